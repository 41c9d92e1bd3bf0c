// The update ops: one step of each rule as an operator, in place, against
// hand-computed values; bad attributes.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::Values;

class UpdateOpTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }

  // Runs `type` twice in place on w = [1, -2] with grad g = [0.5, 0.25].
  std::vector<Values> TwoSteps(const std::string& type, const OpAttrs& attrs) {
    auto op = CreateOperator(type, "upd", attrs);
    EXPECT_TRUE(op.ok()) << op.status();
    const Device d = TestDevice();
    Tensor w = *Tensor::FromVector({1, -2}, {2}).CopyTo(d);
    Tensor g = *Tensor::FromVector({0.5f, 0.25f}, {2}).CopyTo(d);
    ForwardArgs f;
    f.in = {w, g};
    f.out = {w};
    f.req = {OpReq::kInplace};
    for (size_t i = 0; i < (*op)->ListAuxiliaryStates().size(); ++i) {
      f.aux.push_back(Tensor::Zeros({2}, DType::kFloat32, d));
    }
    OpContext ctx;
    ctx.device = *DeviceContext::Get(d);
    std::vector<Values> steps;
    for (int s = 0; s < 2; ++s) {
      Status st = (*op)->Forward(ctx, &f);
      EXPECT_TRUE(st.ok()) << st;
      steps.push_back(w.ToVector());
    }
    return steps;
  }
};

TEST_F(UpdateOpTest, SgdWithWeightDecay) {
  // w -= 0.1 * (g + 0.01 w): 1 - 0.1 * 0.51 = 0.949, then
  // 0.949 - 0.1 * (0.5 + 0.00949) = 0.898051.
  auto s = TwoSteps("sgd_update", {{"lr", "0.1"}, {"wd", "0.01"}});
  EXPECT_NEAR(s[0][0], 0.949, 1e-6);
  EXPECT_NEAR(s[1][0], 0.898051, 1e-6);
}

TEST_F(UpdateOpTest, SgdMomentum) {
  // m = 0.9 m - 0.1 g: m1 = -0.05, w1 = 0.95; m2 = -0.095, w2 = 0.855.
  auto s = TwoSteps("sgd_mom_update", {{"lr", "0.1"}, {"momentum", "0.9"}});
  EXPECT_NEAR(s[0][0], 0.95, 1e-6);
  EXPECT_NEAR(s[1][0], 0.855, 1e-6);
  EXPECT_NEAR(s[1][1], -2 - 0.025 - 0.0475, 1e-6);
}

TEST_F(UpdateOpTest, NesterovMomentum) {
  // m1 = 0.5, w1 = 1 - 0.1 (0.5 + 0.45) = 0.905; m2 = 0.95,
  // w2 = 0.905 - 0.1 (0.5 + 0.855) = 0.7695.
  auto s = TwoSteps("nag_mom_update", {{"lr", "0.1"}, {"momentum", "0.9"}});
  EXPECT_NEAR(s[0][0], 0.905, 1e-6);
  EXPECT_NEAR(s[1][0], 0.7695, 1e-6);
}

TEST_F(UpdateOpTest, AdamWithClipping) {
  // rescale 4 then clip at 1: g = 1 for both steps (0.5*4, 0.25*4 = 1).
  // m1 = 0.1, v1 = 0.001: w1 = 1 - 0.01 * 0.1 / (sqrt(0.001) + 1e-8).
  auto s = TwoSteps("adam_update",
                    {{"lr", "0.01"}, {"rescale_grad", "4"}, {"clip_gradient", "1"}});
  const double w1 = 1 - 0.01 * 0.1 / (std::sqrt(0.001) + 1e-8);
  EXPECT_NEAR(s[0][0], w1, 1e-6);
  const double m2 = 0.9 * 0.1 + 0.1, v2 = 0.999 * 0.001 + 0.001;
  EXPECT_NEAR(s[1][0], w1 - 0.01 * m2 / (std::sqrt(v2) + 1e-8), 1e-6);
}

TEST_F(UpdateOpTest, AdaGrad) {
  // h1 = 0.25, w1 = 1 - 0.1 * 0.5 / sqrt(0.25 + 1e-7); h2 = 0.5.
  auto s = TwoSteps("adagrad_update", {{"lr", "0.1"}});
  const double w1 = 1 - 0.1 * 0.5 / std::sqrt(0.25 + 1e-7);
  EXPECT_NEAR(s[0][0], w1, 1e-6);
  EXPECT_NEAR(s[1][0], w1 - 0.1 * 0.5 / std::sqrt(0.5 + 1e-7), 1e-6);
}

TEST_F(UpdateOpTest, BadAttributesAndNoGradient) {
  EXPECT_EQ(CreateOperator("sgd_update", "u", {}).status().message(),
            "u (sgd_update): attribute lr (> 0) is required");
  EXPECT_EQ(CreateOperator("sgd_update", "u", {{"lr", "1"}, {"momentum", "0.9"}})
                .status()
                .message(),
            "u (sgd_update): unknown attribute \"momentum\"; accepted: beta1, "
            "beta2, clip_gradient, epsilon, lr, rescale_grad, wd");
  auto op = CreateOperator("sgd_update", "u", {{"lr", "1"}});
  ASSERT_TRUE(op.ok());
  EXPECT_FALSE((*op)->differentiable());
  OpContext ctx;
  ctx.device = *DeviceContext::Get(TestDevice());
  BackwardArgs b;
  EXPECT_EQ((*op)->Backward(ctx, &b).message(), "u (sgd_update): has no gradient");
}

}  // namespace
}  // namespace kvtrain
