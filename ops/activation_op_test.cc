// Activation: each function against a double reference, numeric gradients
// (inputs kept away from relu's kink), in-place forward, bad attributes.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

double Reference(const std::string& act, double x) {
  if (act == "relu") return x > 0 ? x : 0;
  if (act == "sigmoid") return 1 / (1 + std::exp(-x));
  if (act == "tanh") return std::tanh(x);
  return std::log1p(std::exp(x));
}

class ActivationTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_P(ActivationTest, ForwardAndGradient) {
  const std::string act = GetParam();
  auto r = OpRunner::Create("Activation", {{"act_type", act}}, {{5, 40}},
                            TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  // Values in [-3, 3] at least 0.05 away from 0 (relu's kink).
  op_test::Values x = op_test::Random(200, 7, 0.05f, 3.0f);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  (*r)->SetInput(0, x);
  ASSERT_TRUE((*r)->Forward(false).ok());
  std::vector<double> want;
  for (float v : x) want.push_back(Reference(act, v));
  op_test::ExpectNear((*r)->Output(0), want, 1e-6, 1e-5, act);
  op_test::CheckGradient(r->get(), op_test::ForInputs({0}));
}

INSTANTIATE_TEST_SUITE_P(AllFunctions, ActivationTest,
                         ::testing::Values("relu", "sigmoid", "tanh",
                                           "softrelu"));

class ActivationOpTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(ActivationOpTest, InPlaceForwardAndBackward) {
  auto op = CreateOperator("Activation", "act", {{"act_type", "tanh"}});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ((*op)->ForwardInplace(), (std::vector<std::pair<int, int>>{{0, 0}}));
  const op_test::Values x = op_test::Random(1000, 3, -2, 2);
  Tensor t = *Tensor::FromVector(x, {1000}).CopyTo(TestDevice());
  ForwardArgs f;
  f.in = {t};
  f.out = {t};
  f.req = {OpReq::kInplace};
  OpContext ctx;
  ctx.device = *DeviceContext::Get(TestDevice());
  ASSERT_TRUE((*op)->Forward(ctx, &f).ok());
  ASSERT_TRUE(ctx.device->Synchronize().ok());
  const op_test::Values y = t.ToVector();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(y[i], std::tanh(double(x[i])), 1e-6);
  }
  // Backward in place over the output gradient: dx = dy * (1 - y^2).
  Tensor g = Tensor::Zeros({1000}, DType::kFloat32, TestDevice());
  ASSERT_TRUE(g.Fill(2.0).ok());
  BackwardArgs b;
  b.out_grad = {g};
  b.in = {t};
  b.out = {t};
  b.in_grad = {g};
  b.req = {OpReq::kInplace};
  ASSERT_TRUE((*op)->Backward(ctx, &b).ok());
  ASSERT_TRUE(ctx.device->Synchronize().ok());
  const op_test::Values dx = g.ToVector();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(dx[i], 2 * (1 - double(y[i]) * y[i]), 1e-5);
  }
}

TEST_F(ActivationOpTest, BadAttributes) {
  EXPECT_EQ(CreateOperator("Activation", "a", {}).status().message(),
            "a (Activation): missing attribute act_type (relu, sigmoid, tanh "
            "or softrelu)");
  EXPECT_EQ(CreateOperator("Activation", "a", {{"act_type", "gelu"}})
                .status()
                .message(),
            "a (Activation): attribute act_type=\"gelu\": expected one of "
            "relu, sigmoid, tanh, softrelu");
}

#ifdef KV_TEST_ON_GPU
TEST_F(ActivationOpTest, GpuMatchesCpu) {
  for (const char* act : {"relu", "sigmoid", "tanh", "softrelu"}) {
    op_test::ExpectSameOnDevice("Activation", {{"act_type", act}}, {{7, 300}},
                                {op_test::Random(2100, 4, -4, 4)},
                                TestDevice());
  }
}

// cuDNN against kvtrain's kernels (softrelu, which cuDNN lacks, runs the
// reference both times).
TEST_F(ActivationOpTest, CudnnMatchesReference) {
  for (const char* act : {"relu", "sigmoid", "tanh", "softrelu"}) {
    SCOPED_TRACE(act);
    op_test::ExpectCudnnMatchesReference("Activation", {{"act_type", act}},
                                         {{64, 20, 24, 24}},
                                         {op_test::Random(64 * 20 * 24 * 24, 4, -4, 4)},
                                         TestDevice(), 1e-5f);
  }
}
#endif

}  // namespace
}  // namespace kvtrain
