// elemwise_add/sub/mul: values, gradients, shape mismatch.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

class ElemwiseTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_P(ElemwiseTest, ValuesAndGradient) {
  const std::string type = GetParam();
  auto r = OpRunner::Create(type, {}, {{4, 5}, {4, 5}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Forward(false).ok());
  const auto a = (*r)->Input(0), b = (*r)->Input(1);
  std::vector<double> want;
  for (size_t i = 0; i < a.size(); ++i) {
    want.push_back(type == "elemwise_add"   ? double(a[i]) + b[i]
                   : type == "elemwise_sub" ? double(a[i]) - b[i]
                                            : double(a[i]) * b[i]);
  }
  op_test::ExpectNear((*r)->Output(0), want, 1e-6, 1e-6, type);
  op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1}));
}

INSTANTIATE_TEST_SUITE_P(Kinds, ElemwiseTest,
                         ::testing::Values("elemwise_add", "elemwise_sub",
                                           "elemwise_mul"));

TEST(ElemwiseErrors, ShapeMismatch) {
  auto op = CreateOperator("elemwise_mul", "m", {});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{2, 3}, {3, 2}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "m (elemwise_mul): m_lhs is (2, 3) but m_rhs is (3, 2); "
            "elementwise ops need equal shapes");
}

#ifdef KV_TEST_ON_GPU
TEST(ElemwiseGpu, MatchesCpu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  for (const char* type : {"elemwise_add", "elemwise_sub", "elemwise_mul"}) {
    op_test::ExpectSameOnDevice(type, {}, {{70, 3}, {70, 3}},
                                {op_test::Random(210, 1), op_test::Random(210, 2)},
                                TestDevice());
  }
}
#endif

}  // namespace
}  // namespace kvtrain
