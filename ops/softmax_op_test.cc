// softmax along the last axis: rows sum to one, match the formula, and the
// gradient matches finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

Values Reference(const Values& x, int rows, int width, float t, bool log = false) {
  Values y(x.size());
  for (int r = 0; r < rows; ++r) {
    double sum = 0;
    for (int j = 0; j < width; ++j) sum += std::exp(x[r * width + j] / t);
    for (int j = 0; j < width; ++j) {
      const double p = std::exp(x[r * width + j] / t) / sum;
      y[r * width + j] = log ? std::log(p) : p;
    }
  }
  return y;
}

class SoftmaxOpTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SoftmaxOpTest, ForwardAndBackwardAlongTheLastAxis) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  const bool log = GetParam() == "log_softmax";
  for (float t : {1.0f, 2.0f}) {
    auto r = OpRunner::Create(GetParam(), {{"temperature", std::to_string(t)}}, {{2, 3, 4}},
                              TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    const Values x = op_test::Random(24, 7, -2.0f, 2.0f);
    (*r)->SetInput(0, x);
    ASSERT_TRUE((*r)->Forward(true).ok());
    const Values y = (*r)->Output(0);
    const Values want = Reference(x, 6, 4, t, log);
    for (int i = 0; i < 24; ++i) EXPECT_NEAR(y[i], want[i], 2e-6);
    // d/dx of sum(dy * softmax(x)) by central differences.
    const Values dy = op_test::Random(24, 8);
    std::vector<Values> grads = {Values(24, 0.0f)};
    ASSERT_TRUE((*r)->Backward({dy}, {OpReq::kWrite}, &grads).ok());
    for (int i = 0; i < 24; ++i) {
      Values hi = x, lo = x;
      hi[i] += 1e-3f;
      lo[i] -= 1e-3f;
      const Values yh = Reference(hi, 6, 4, t, log), yl = Reference(lo, 6, 4, t, log);
      double numeric = 0;
      for (int j = 0; j < 24; ++j) numeric += dy[j] * (yh[j] - yl[j]) / 2e-3;
      EXPECT_NEAR(grads[0][i], numeric, 2e-3) << "t=" << t << " i=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, SoftmaxOpTest, ::testing::Values("softmax", "log_softmax"));

TEST(SoftmaxOpTest, LogSoftmaxOfLargeValuesIsFinite) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  auto r = OpRunner::Create("log_softmax", {}, {{1, 3}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->SetInput(0, {1000.0f, 0.0f, -1000.0f});
  ASSERT_TRUE((*r)->Forward(false).ok());
  const Values y = (*r)->Output(0);
  EXPECT_NEAR(y[0], 0.0f, 1e-6);
  EXPECT_NEAR(y[1], -1000.0f, 1e-3);
  EXPECT_NEAR(y[2], -2000.0f, 1e-3);
}

TEST(SoftmaxErrors, OnlyTheLastAxis) {
  auto other = CreateOperator("softmax", "s", {{"axis", "1"}});
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("axis"), std::string::npos) << other.status();
}

}  // namespace
}  // namespace kvtrain
