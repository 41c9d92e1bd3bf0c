// LeakyReLU (leaky, elu), clip and the scalar arithmetic ops against their
// formulas, both directions.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

// Forward and backward (write, then add onto ones) against f and f'; with
// `away_from_zero`, inputs in [0.5, 3] and their negatives.
void Check(const std::string& type, const OpAttrs& attrs, float (*f)(float),
           float (*slope)(float), bool away_from_zero = false) {
  auto r = OpRunner::Create(type, attrs, {{3, 5}}, TestDevice());
  ASSERT_TRUE(r.ok()) << type << ": " << r.status();
  Values x = op_test::Random(15, 4, -3.0f, 3.0f);
  x[0] = 0.0f;
  if (away_from_zero) {
    for (float& v : x) v = v < 0 ? std::fmin(v, -0.5f) : std::fmax(v, 0.5f);
  }
  (*r)->SetInput(0, x);
  ASSERT_TRUE((*r)->Forward(true).ok());
  const Values y = (*r)->Output(0);
  for (int i = 0; i < 15; ++i) EXPECT_NEAR(y[i], f(x[i]), 1e-5) << type << " x=" << x[i];
  const Values dy = op_test::Random(15, 5);
  std::vector<Values> grads = {Values(15, 1.0f)};
  ASSERT_TRUE((*r)->Backward({dy}, {OpReq::kAdd}, &grads).ok());
  for (int i = 0; i < 15; ++i) {
    EXPECT_NEAR(grads[0][i], 1.0f + dy[i] * slope(x[i]), 1e-5) << type << " x=" << x[i];
  }
}

TEST(UnaryOpTest, LeakyReluAndElu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  Check("LeakyReLU", {{"slope", "0.1"}},
        [](float x) { return x > 0 ? x : 0.1f * x; },
        [](float x) { return x > 0 ? 1.0f : 0.1f; });
  Check("LeakyReLU", {{"act_type", "elu"}, {"slope", "0.5"}},
        [](float x) { return x > 0 ? x : 0.5f * std::expm1(x); },
        [](float x) { return x > 0 ? 1.0f : 0.5f * std::exp(x); });
  // MXNet's default slope is 0.25.
  Check("LeakyReLU", {}, [](float x) { return x > 0 ? x : 0.25f * x; },
        [](float x) { return x > 0 ? 1.0f : 0.25f; });
}

TEST(UnaryOpTest, ClipPassesTheGradientInsideItsBounds) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  Check("clip", {{"a_min", "-1"}, {"a_max", "0.5"}},
        [](float x) { return std::fmin(std::fmax(x, -1.0f), 0.5f); },
        [](float x) { return x >= -1.0f && x <= 0.5f ? 1.0f : 0.0f; });
}

TEST(UnaryOpTest, ArithmeticWithAScalar) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  const OpAttrs s = {{"scalar", "2.5"}};
  Check("_plus_scalar", s, [](float x) { return x + 2.5f; }, [](float) { return 1.0f; });
  Check("_minus_scalar", s, [](float x) { return x - 2.5f; }, [](float) { return 1.0f; });
  Check("_rminus_scalar", s, [](float x) { return 2.5f - x; }, [](float) { return -1.0f; });
  Check("_mul_scalar", s, [](float x) { return x * 2.5f; }, [](float) { return 2.5f; });
  Check("_div_scalar", s, [](float x) { return x / 2.5f; }, [](float) { return 0.4f; });
  Check("_rdiv_scalar", s, [](float x) { return 2.5f / x; },
        [](float x) { return -2.5f / (x * x); }, /*away_from_zero=*/true);
  // As MXNet 1.x writes them into a graph's JSON.
  Check("_mul_scalar", {{"scalar", "-1"}, {"is_int", "False"}}, [](float x) { return -x; },
        [](float) { return -1.0f; });
}

TEST(UnaryOpTest, BadAttributesAreNamed) {
  EXPECT_NE(CreateOperator("_plus_scalar", "p", {}).status().message().find(
                "missing attribute scalar"),
            std::string::npos);
  EXPECT_NE(CreateOperator("_div_scalar", "d", {{"scalar", "0"}}).status().message().find(
                "division by a scalar of 0"),
            std::string::npos);
  auto prelu = CreateOperator("LeakyReLU", "l", {{"act_type", "prelu"}});
  ASSERT_FALSE(prelu.ok());
  EXPECT_NE(prelu.status().message().find("prelu"), std::string::npos);
  EXPECT_NE(CreateOperator("clip", "c", {{"a_max", "1"}}).status().message().find(
                "missing attribute a_min"),
            std::string::npos);
  EXPECT_NE(CreateOperator("clip", "c", {{"a_min", "2"}, {"a_max", "1"}})
                .status().message().find("is above a_max"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtrain
