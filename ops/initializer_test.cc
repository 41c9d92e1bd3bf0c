// Initializers: determinism by seed and name, the name rules, the ranges and
// spreads of uniform/normal/Xavier, parsing.
#include "ops/initializer.h"

#include <cmath>

#include <gtest/gtest.h>

#include "tensor/test_device.h"

namespace kvtrain {
namespace {

class InitializerTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
  Tensor Filled(const InitializerOptions& o, const std::string& name,
                const Shape& shape) {
    Tensor t = Tensor::Zeros(shape, DType::kFloat32, TestDevice());
    auto init = Initializer::Create(o);
    EXPECT_TRUE(init.ok());
    EXPECT_TRUE(init->Init(name, &t).ok());
    return t;
  }
};

void Moments(const std::vector<float>& v, double* mean, double* sd,
             double* max_abs) {
  double s = 0, ss = 0;
  *max_abs = 0;
  for (float x : v) {
    s += x;
    ss += double(x) * x;
    *max_abs = std::max(*max_abs, std::fabs(double(x)));
  }
  *mean = s / v.size();
  *sd = std::sqrt(ss / v.size() - *mean * *mean);
}

TEST_F(InitializerTest, DeterministicBySeedAndName) {
  InitializerOptions o;
  o.seed = 42;
  const auto a = Filled(o, "fc1_weight", {30, 20}).ToVector();
  EXPECT_EQ(a, Filled(o, "fc1_weight", {30, 20}).ToVector());
  EXPECT_NE(a, Filled(o, "fc2_weight", {30, 20}).ToVector());
  o.seed = 43;
  EXPECT_NE(a, Filled(o, "fc1_weight", {30, 20}).ToVector());
}

TEST_F(InitializerTest, NameRules) {
  InitializerOptions o;
  for (const char* zero : {"fc1_bias", "bn_beta", "bn_moving_mean"}) {
    EXPECT_EQ(Filled(o, zero, {4}).ToVector(), std::vector<float>(4, 0.0f));
  }
  for (const char* one : {"bn_gamma", "bn_moving_var"}) {
    EXPECT_EQ(Filled(o, one, {4}).ToVector(), std::vector<float>(4, 1.0f));
  }
}

TEST_F(InitializerTest, Distributions) {
  double mean, sd, max_abs;
  InitializerOptions u;
  u.scale = 0.5f;
  Moments(Filled(u, "w", {100, 100}).ToVector(), &mean, &sd, &max_abs);
  EXPECT_LE(max_abs, 0.5);
  EXPECT_NEAR(mean, 0, 0.02);
  EXPECT_NEAR(sd, 0.5 / std::sqrt(3.0), 0.01);

  InitializerOptions n;
  n.type = InitializerOptions::Type::kNormal;
  n.sigma = 2.0f;
  Moments(Filled(n, "w", {100, 100}).ToVector(), &mean, &sd, &max_abs);
  EXPECT_NEAR(mean, 0, 0.08);
  EXPECT_NEAR(sd, 2.0, 0.06);

  // Xavier on (50, 20, 3, 3): fan_in 180, fan_out 450, avg 315.
  InitializerOptions x;
  x.type = InitializerOptions::Type::kXavier;
  x.magnitude = 3;
  const double bound = std::sqrt(3.0 / 315);
  Moments(Filled(x, "conv_weight", {50, 20, 3, 3}).ToVector(), &mean, &sd,
          &max_abs);
  EXPECT_LE(max_abs, bound);
  EXPECT_NEAR(sd, bound / std::sqrt(3.0), 0.05 * bound);
  x.distribution = InitializerOptions::Distribution::kGaussian;
  x.factor = InitializerOptions::Factor::kIn;
  Moments(Filled(x, "conv_weight", {50, 20, 3, 3}).ToVector(), &mean, &sd,
          &max_abs);
  EXPECT_NEAR(sd, std::sqrt(3.0 / 180), 0.05 * std::sqrt(3.0 / 180));
}

TEST_F(InitializerTest, ParseAndErrors) {
  auto o = ParseInitializer("xavier:gaussian:out:2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->type, InitializerOptions::Type::kXavier);
  EXPECT_EQ(o->distribution, InitializerOptions::Distribution::kGaussian);
  EXPECT_EQ(o->factor, InitializerOptions::Factor::kOut);
  EXPECT_EQ(o->magnitude, 2.0f);
  o = ParseInitializer("normal:0.05");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->sigma, 0.05f);
  EXPECT_EQ(ParseInitializer("glorot").status().message(),
            "initializer \"glorot\": unknown type \"glorot\" (expected "
            "uniform[:scale], normal[:sigma], xavier[:uniform|gaussian[:avg|"
            "in|out[:magnitude]]], orthogonal[:gain[:uniform|gaussian]], bilinear or "
            "constant:value)");
  // Constant: any finite value for weights; biases keep their own rule.
  o = ParseInitializer("constant:-0.5");
  ASSERT_TRUE(o.ok()) << o.status();
  auto constant = Initializer::Create(*o);
  Tensor w = Tensor::Zeros({2, 3});
  Tensor b = Tensor::Zeros({3});
  ASSERT_TRUE(constant->Init("fc_weight", &w).ok());
  ASSERT_TRUE(constant->Init("fc_bias", &b).ok());
  for (float f : w.ToVector()) EXPECT_EQ(f, -0.5f);
  for (float f : b.ToVector()) EXPECT_EQ(f, 0.0f);
  EXPECT_FALSE(ParseInitializer("constant").ok());
  EXPECT_FALSE(ParseInitializer("constant:nan").ok());
  EXPECT_FALSE(ParseInitializer("constant:1:2").ok());
  InitializerOptions x;
  x.type = InitializerOptions::Type::kXavier;
  auto init = Initializer::Create(x);
  Tensor v = Tensor::Zeros({5});
  EXPECT_EQ(init->Init("v_weight", &v).message(),
            "initializer: xavier needs a weight of 2 or more dimensions, but "
            "v_weight is (5)");
}

// Orthogonal: a wide weight has orthonormal rows times the gain, a tall one
// (more rows than the rest) orthonormal columns; a 4-d kernel counts as
// (out, in * kh * kw).
TEST_F(InitializerTest, BilinearKernelsUpsample) {
  auto o = ParseInitializer("bilinear");
  ASSERT_TRUE(o.ok()) << o.status();
  auto init = Initializer::Create(*o);
  // A 4x4 kernel (stride 2 upsampling): f = 2, c = 0.75, the 1-D filter
  // (0.25, 0.75, 0.75, 0.25); each kernel its outer product.
  Tensor w = Tensor::Zeros({2, 1, 4, 4});
  ASSERT_TRUE(init->Init("up_weight", &w).ok());
  const std::vector<float> v = w.ToVector();
  const float k[4] = {0.25f, 0.75f, 0.75f, 0.25f};
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(v[i], k[(i / 4) % 4] * k[i % 4]) << i;
  Tensor flat = Tensor::Zeros({3, 4});
  EXPECT_EQ(init->Init("fc_weight", &flat).message(),
            "initializer: bilinear needs a 4-D weight (a Deconvolution's), but fc_weight is (3, 4)");
  EXPECT_FALSE(ParseInitializer("bilinear:2").ok());
}

TEST_F(InitializerTest, OrthogonalRowsOrColumns) {
  for (const std::string spec : {"orthogonal", "orthogonal:1:gaussian"}) {
    auto o = ParseInitializer(spec);
    ASSERT_TRUE(o.ok()) << o.status();
    auto init = Initializer::Create(*o);
    const float gain = o->gain;
    struct Case {
      Shape shape;
      int64_t rows, cols;
    };
    for (const Case& c : {Case{Shape({3, 8}), 3, 8}, Case{Shape({8, 3}), 8, 3},
                          Case{Shape({4, 2, 2, 2}), 4, 8}}) {
      Tensor w = Tensor::Zeros(c.shape);
      ASSERT_TRUE(init->Init("fc_weight", &w).ok());
      const std::vector<float> m = w.ToVector();
      const bool by_rows = c.rows <= c.cols;
      const int64_t k = by_rows ? c.rows : c.cols, len = by_rows ? c.cols : c.rows;
      auto at = [&](int64_t vec, int64_t j) {
        return by_rows ? m[vec * c.cols + j] : m[j * c.cols + vec];
      };
      for (int64_t a = 0; a < k; ++a) {
        for (int64_t b = 0; b <= a; ++b) {
          double dot = 0;
          for (int64_t j = 0; j < len; ++j) dot += double{at(a, j)} * at(b, j);
          EXPECT_NEAR(dot, a == b ? gain * gain : 0.0, 1e-5)
              << spec << " " << c.shape.ToString() << " " << a << "," << b;
        }
      }
    }
  }
  auto o = ParseInitializer("orthogonal:2");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->gain, 2.0f);
  EXPECT_FALSE(ParseInitializer("orthogonal:-1").ok());
  EXPECT_FALSE(ParseInitializer("orthogonal:1:poisson").ok());
  auto init = Initializer::Create(*o);
  Tensor v = Tensor::Zeros({5});
  EXPECT_EQ(init->Init("v_weight", &v).message(),
            "initializer: orthogonal needs a weight of 2 or more dimensions, but "
            "v_weight is (5)");
}

}  // namespace
}  // namespace kvtrain
