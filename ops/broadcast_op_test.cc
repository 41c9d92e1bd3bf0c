// broadcast_add/sub/mul/div: shapes, values against the formula with
// numpy's rule, and gradients (summed over the broadcast dimensions)
// against finite differences.
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
  return a / b;
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
    // Away from 0 for div's right side.
    (*r)->SetInput(0, op_test::Random(ls.Product(0, ls.ndim()), 3, -2.0f, 2.0f));
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
                                           "broadcast_div"));

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
  for (const char* type : {"broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div"}) {
    op_test::ExpectSameOnDevice(type, {}, {{7, 3, 5}, {3, 1}},
                                {op_test::Random(105, 1), op_test::Random(3, 2, 0.5f, 2.0f)},
                                TestDevice());
  }
}
#endif

}  // namespace
}  // namespace kvtrain
