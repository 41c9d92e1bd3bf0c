// LinearRegressionOutput: identity forward, the squared-error gradient by
// central differences, label shapes.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

class RegressionOutputTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(RegressionOutputTest, IdentityAndSquaredErrorGradient) {
  auto r = OpRunner::Create("LinearRegressionOutput", {{"grad_scale", "3"}},
                            {{4, 2}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Forward(true).ok());
  EXPECT_EQ((*r)->Output(0), (*r)->Input(0));
  op_test::GradCheckOptions o = op_test::ForInputs({0});
  // grad_scale / num_output * 1/2 sum (out - label)^2.
  o.loss = [](const std::vector<Values>& out, const std::vector<Values>& in) {
    double s = 0;
    for (size_t i = 0; i < out[0].size(); ++i) {
      const double d = out[0][i] - in[1][i];
      s += 0.5 * d * d;
    }
    return 3.0 / 2 * s;
  };
  op_test::CheckGradient(r->get(), o);
}

TEST_F(RegressionOutputTest, LabelShapes) {
  auto ok = OpRunner::Create("LinearRegressionOutput", {}, {{5, 1}, {5}},
                             TestDevice());
  EXPECT_TRUE(ok.ok()) << ok.status();
  auto op = CreateOperator("LinearRegressionOutput", "lro", {});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{5, 2}, {5}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "lro (LinearRegressionOutput): lro_label is (5) but lro_data is "
            "(5, 2); they need the same rows and element count");
}

#ifdef KV_TEST_ON_GPU
TEST_F(RegressionOutputTest, GpuMatchesCpu) {
  op_test::ExpectSameOnDevice("LinearRegressionOutput", {}, {{9, 3}, {9, 3}},
                              {op_test::Random(27, 1), op_test::Random(27, 2)},
                              TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
