// Dropout: the mask's rate and scale, identity at inference, the gradient
// through the mask, determinism per seed.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

class DropoutTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(DropoutTest, TrainingMasksAndScales) {
  auto r = OpRunner::Create("Dropout", {{"p", "0.25"}}, {{100, 200}},
                            TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Forward(true).ok());
  const op_test::Values x = (*r)->Input(0), y = (*r)->Output(0);
  const op_test::Values mask = (*r)->Output(1);
  int dropped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(mask[i] == 0.0f || std::fabs(mask[i] - 1 / 0.75f) < 1e-6);
    ASSERT_FLOAT_EQ(y[i], x[i] * mask[i]);
    dropped += mask[i] == 0.0f;
  }
  // 20000 draws at p = 0.25: 5000 expected, sd about 61.
  EXPECT_NEAR(dropped, 5000, 400);
  // The gradient goes through the same mask.
  const op_test::Values dy = op_test::Random(x.size(), 3);
  std::vector<op_test::Values> g = {op_test::Values(x.size(), 0.0f)};
  ASSERT_TRUE((*r)->Backward({dy}, {OpReq::kWrite}, &g).ok());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_FLOAT_EQ(g[0][i], dy[i] * mask[i]);
  // A second call draws a new mask.
  ASSERT_TRUE((*r)->Forward(true).ok());
  EXPECT_NE((*r)->Output(1), mask);
}

TEST_F(DropoutTest, InferenceIsIdentity) {
  auto r = OpRunner::Create("Dropout", {}, {{10, 10}}, TestDevice());
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*r)->Forward(false).ok());
  EXPECT_EQ((*r)->Output(0), (*r)->Input(0));
}

TEST_F(DropoutTest, SameSeedSameMasks) {
  auto a = OpRunner::Create("Dropout", {{"seed", "7"}}, {{50}}, TestDevice());
  auto b = OpRunner::Create("Dropout", {{"seed", "7"}}, {{50}}, TestDevice());
  auto c = OpRunner::Create("Dropout", {{"seed", "8"}}, {{50}}, TestDevice());
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE((*a)->Forward(true).ok() && (*b)->Forward(true).ok() &&
              (*c)->Forward(true).ok());
  EXPECT_EQ((*a)->Output(1), (*b)->Output(1));
  EXPECT_NE((*a)->Output(1), (*c)->Output(1));
  EXPECT_EQ(CreateOperator("Dropout", "d", {{"p", "1"}}).status().message(),
            "d (Dropout): attribute p=\"1\": expected a number in [0, "
            "0.999999]");
}

#ifdef KV_TEST_ON_GPU
TEST_F(DropoutTest, GpuMatchesCpu) {
  op_test::ExpectSameOnDevice("Dropout", {{"p", "0.3"}, {"seed", "5"}},
                              {{33, 17}}, {op_test::Random(561, 2)},
                              TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
