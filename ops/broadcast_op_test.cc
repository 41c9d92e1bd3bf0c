// broadcast_add/sub/mul/div/maximum/minimum/power and the comparisons:
// shapes, values against the formula with numpy's rule, and gradients
// (summed over the broadcast dimensions) against finite differences;
// broadcast_to and broadcast_axis likewise.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/broadcast_op.h"
#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

class BroadcastTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

double Reference(const std::string& type, double a, double b) {
  if (type == "broadcast_add") return a + b;
  if (type == "broadcast_sub") return a - b;
  if (type == "broadcast_mul") return a * b;
  if (type == "broadcast_div") return a / b;
  if (type == "broadcast_maximum") return std::max(a, b);
  if (type == "broadcast_minimum") return std::min(a, b);
  if (type == "broadcast_power") return std::pow(a, b);
  if (type == "broadcast_equal") return a == b;
  if (type == "broadcast_not_equal") return a != b;
  if (type == "broadcast_greater") return a > b;
  if (type == "broadcast_greater_equal") return a >= b;
  if (type == "broadcast_lesser") return a < b;
  EXPECT_EQ(type, "broadcast_lesser_equal");
  return a <= b;
}

TEST_P(BroadcastTest, ValuesAndGradients) {
  const std::string type = GetParam();
  // (2, 3, 4) with (3, 1): rhs repeats along dimensions 0 and 2; and the
  // other way round, and a row against a column.
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3, 4}, {3, 1}}, {{3, 1}, {2, 3, 4}}, {{1, 5}, {4, 1}}, {{2, 3}, {2, 3}}};
  for (const auto& [ls, rs] : cases) {
    auto r = OpRunner::Create(type, {}, {ls, rs}, TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    // Away from 0 for div's right side; power's base positive.
    const float low = type == "broadcast_power" ? 0.5f : -2.0f;
    (*r)->SetInput(0, op_test::Random(ls.Product(0, ls.ndim()), 3, low, 2.0f));
    (*r)->SetInput(1, op_test::Random(rs.Product(0, rs.ndim()), 4, 0.5f, 2.0f));
    ASSERT_TRUE((*r)->Forward(false).ok());
    const BroadcastGeometry g = MakeBroadcastGeometry(ls, rs);
    EXPECT_EQ((*r)->out_shapes()[0].Product(0, g.ndim), g.size);
    const Values a = (*r)->Input(0), b = (*r)->Input(1);
    std::vector<double> want;
    for (int64_t i = 0; i < g.size; ++i) {
      int64_t rest = i, l = 0, q = 0;
      for (int d = g.ndim - 1; d >= 0; --d) {
        const int64_t c = rest % g.dims[d];
        rest /= g.dims[d];
        l += c * g.lhs_stride[d];
        q += c * g.rhs_stride[d];
      }
      want.push_back(Reference(type, a[l], b[q]));
    }
    op_test::ExpectNear((*r)->Output(0), want, 1e-6, 1e-6, type + " " + ls.ToString());
    op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1}));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, BroadcastTest,
                         ::testing::Values("broadcast_add", "broadcast_sub", "broadcast_mul",
                                           "broadcast_div", "broadcast_maximum",
                                           "broadcast_minimum", "broadcast_power",
                                           "broadcast_equal", "broadcast_not_equal",
                                           "broadcast_greater", "broadcast_greater_equal",
                                           "broadcast_lesser", "broadcast_lesser_equal"));

TEST(BroadcastCompare, EqualValuesCompareEqualAndPassNoGradient) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  auto r = OpRunner::Create("broadcast_greater_equal", {}, {{2, 2}, {2}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->SetInput(0, {1, 2, 3, 4});
  (*r)->SetInput(1, {2, 2});
  ASSERT_TRUE((*r)->Forward(true).ok());
  op_test::ExpectNear((*r)->Output(0), {0, 1, 1, 1}, 0, 0, "greater_equal");
  std::vector<Values> grads = {{5, 5, 5, 5}, {5, 5}};
  ASSERT_TRUE((*r)->Backward({{1, 1, 1, 1}}, {OpReq::kWrite, OpReq::kWrite}, &grads).ok());
  op_test::ExpectNear(grads[0], {0, 0, 0, 0}, 0, 0, "d lhs");
  op_test::ExpectNear(grads[1], {0, 0}, 0, 0, "d rhs");
}

TEST(BroadcastTo, RepeatsDataAndSumsTheGradientBack) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  struct Case {
    std::string type;
    OpAttrs attrs;
    Shape in, out;
  };
  const std::vector<Case> cases = {
      {"broadcast_to", {{"shape", "(2, 0, 4)"}}, {1, 3, 1}, {2, 3, 4}},
      {"broadcast_axis", {{"axis", "(0, 2)"}, {"size", "(2, 4)"}}, {1, 3, 1}, {2, 3, 4}},
      {"broadcast_axis", {{"axis", "-1"}, {"size", "5"}}, {3, 1}, {3, 5}},
      {"broadcast_like", {}, {2, 1, 4}, {2, 3, 4}}};
  for (const Case& c : cases) {
    std::vector<Shape> shapes = {c.in};
    if (c.type == "broadcast_like") shapes.push_back(c.out);
    auto r = OpRunner::Create(c.type, c.attrs, shapes, TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->out_shapes()[0], c.out) << c.type;
    (*r)->SetInput(0, op_test::Random(c.in.Product(0, c.in.ndim()), 5));
    ASSERT_TRUE((*r)->Forward(false).ok());
    const Values a = (*r)->Input(0);
    const BroadcastGeometry g = MakeBroadcastGeometry(c.in, c.out);
    std::vector<double> want;
    for (int64_t i = 0; i < g.size; ++i) {
      int64_t rest = i, l = 0;
      for (int d = g.ndim - 1; d >= 0; --d) {
        l += (rest % g.dims[d]) * g.lhs_stride[d];
        rest /= g.dims[d];
      }
      want.push_back(a[l]);
    }
    op_test::ExpectNear((*r)->Output(0), want, 0, 0, c.type);
    op_test::CheckGradient(r->get(), op_test::ForInputs(shapes.size() == 2
                                                            ? std::vector<int>{0, 1}
                                                            : std::vector<int>{0}));
  }
}

TEST(BroadcastTo, ShapesThatCannotRepeatAreNamed) {
  auto op = CreateOperator("broadcast_to", "t", {{"shape", "(4, 3)"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{2, 3}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "t (broadcast_to): t_data is (2, 3) and shape is (4, 3): dimension 0 is 2 against 4 "
            "(broadcasting needs equal sizes or 1)");
  op = CreateOperator("broadcast_axis", "x", {{"axis", "1"}, {"size", "4"}});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "x (broadcast_axis): axis 1 of x_data (2, 3) has size 3; only size 1 broadcasts");
  EXPECT_EQ(CreateOperator("broadcast_axis", "y", {{"axis", "(0, 1)"}, {"size", "4"}})
                .status()
                .message(),
            "y (broadcast_axis): 2 axes but 1 sizes (one size per axis)");
  op = CreateOperator("broadcast_like", "k", {});
  ASSERT_TRUE(op.ok());
  in = {{2, 3}, {2, 4}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "k (broadcast_like): k_lhs (2, 3) does not broadcast to k_rhs's shape (2, 4) (as "
            "many dimensions, each equal or 1)");
}

TEST(BroadcastErrors, SizesThatDoNotBroadcastAreNamed) {
  auto op = CreateOperator("broadcast_add", "b", {});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{2, 3}, {4, 3}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "b (broadcast_add): b_lhs is (2, 3) and b_rhs is (4, 3): dimension 0 is 2 against 4 "
            "(broadcasting needs equal sizes or 1)");
}

#ifdef KV_TEST_ON_GPU
TEST(BroadcastGpu, MatchesCpu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  for (const char* type : {"broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
                           "broadcast_maximum", "broadcast_power", "broadcast_lesser"}) {
    op_test::ExpectSameOnDevice(type, {}, {{7, 3, 5}, {3, 1}},
                                {op_test::Random(105, 1), op_test::Random(3, 2, 0.5f, 2.0f)},
                                TestDevice());
  }
}
#endif

}  // namespace
}  // namespace kvtrain
