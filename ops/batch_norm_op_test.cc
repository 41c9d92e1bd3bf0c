// BatchNorm: training forward and moving averages against a double
// reference, inference with the moving statistics, numeric gradients.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

class BatchNormTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(BatchNormTest, TrainingForwardAndMovingAverages) {
  const int n = 4, c = 3, s = 5;
  auto r = OpRunner::Create(
      "BatchNorm", {{"fix_gamma", "false"}, {"eps", "0.001"}, {"momentum", "0.8"}},
      {{n, c, s}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->op()->ListAuxiliaryStates(),
            (std::vector<std::string>{"moving_mean", "moving_var"}));
  (*r)->SetAux(1, {1, 1, 1});
  ASSERT_TRUE((*r)->Forward(true).ok());
  const auto x = (*r)->Input(0), gamma = (*r)->Input(1), beta = (*r)->Input(2);
  std::vector<double> want(x.size()), mm(c), mv(c);
  for (int ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < s; ++j) mean += x[(i * c + ch) * s + j];
    mean /= n * s;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < s; ++j) {
        const double d = x[(i * c + ch) * s + j] - mean;
        var += d * d;
      }
    var /= n * s;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < s; ++j) {
        const int k = (i * c + ch) * s + j;
        want[k] = gamma[ch] * (x[k] - mean) / std::sqrt(var + 1e-3) + beta[ch];
      }
    mm[ch] = 0.2 * mean;
    mv[ch] = 0.8 + 0.2 * var;
  }
  op_test::ExpectNear((*r)->Output(0), want, 1e-5, 1e-4, "output");
  op_test::ExpectNear((*r)->Aux(0), mm, 1e-6, 1e-5, "moving_mean");
  op_test::ExpectNear((*r)->Aux(1), mv, 1e-6, 1e-5, "moving_var");
  // Inference normalises with the moving statistics.
  ASSERT_TRUE((*r)->Forward(false).ok());
  for (int ch = 0; ch < c; ++ch)
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < s; ++j) {
        const int k = (i * c + ch) * s + j;
        want[k] = gamma[ch] * (x[k] - mm[ch]) / std::sqrt(mv[ch] + 1e-3) +
                  beta[ch];
      }
  op_test::ExpectNear((*r)->Output(0), want, 1e-5, 1e-4, "inference output");
}

TEST_F(BatchNormTest, GradientCheck) {
  for (const char* fix : {"false", "true"}) {
    auto r = OpRunner::Create("BatchNorm", {{"fix_gamma", fix}}, {{5, 2, 3, 2}},
                              TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1, 2}));
  }
}

TEST_F(BatchNormTest, GlobalStatsGradientCheck) {
  auto r = OpRunner::Create(
      "BatchNorm", {{"fix_gamma", "false"}, {"use_global_stats", "true"}},
      {{4, 3, 2}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->SetAux(0, {0.1f, -0.2f, 0.3f});
  (*r)->SetAux(1, {0.5f, 1.5f, 2.0f});
  op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1, 2}));
}

TEST_F(BatchNormTest, Errors) {
  auto op = CreateOperator("BatchNorm", "bn", {});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{8}, {}, {}}, out(3), aux(2);
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "bn (BatchNorm): bn_data must have a channel axis (N, C, ...), got "
            "(8)");
  in = {{8, 4}, {5}, {}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "bn (BatchNorm): bn_gamma is (5), expected (4)");
}

#ifdef KV_TEST_ON_GPU
TEST_F(BatchNormTest, GpuMatchesCpu) {
  op_test::ExpectSameOnDevice("BatchNorm", {{"fix_gamma", "false"}},
                              {{6, 4, 5, 3}},
                              {op_test::Random(360, 1), op_test::Random(4, 2),
                               op_test::Random(4, 3)},
                              TestDevice());
}

// cuDNN against kvtrain's kernels: images and plain (N, C) rows, learned and
// fixed gamma, inference (moving statistics: the reference runs both), and
// an eps below cuDNN's minimum (the reference runs both).
TEST_F(BatchNormTest, CudnnMatchesReference) {
  const std::vector<op_test::Values> images = {
      op_test::Random(32 * 6 * 5 * 5, 1), op_test::Random(6, 2),
      op_test::Random(6, 3)};
  for (const char* fix : {"false", "true"}) {
    SCOPED_TRACE(std::string("fix_gamma=") + fix);
    op_test::ExpectCudnnMatchesReference("BatchNorm", {{"fix_gamma", fix}},
                                         {{32, 6, 5, 5}}, images, TestDevice());
  }
  op_test::ExpectCudnnMatchesReference(
      "BatchNorm", {{"fix_gamma", "false"}}, {{64, 10}},
      {op_test::Random(640, 4), op_test::Random(10, 5), op_test::Random(10, 6)},
      TestDevice());
  op_test::ExpectCudnnMatchesReference("BatchNorm", {{"fix_gamma", "false"}},
                                       {{32, 6, 5, 5}}, images, TestDevice(),
                                       1e-4f, /*is_train=*/false);
  op_test::ExpectCudnnMatchesReference(
      "BatchNorm", {{"fix_gamma", "false"}, {"eps", "1e-7"}}, {{32, 6, 5, 5}},
      images, TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
