// Compressor: 2bit with an automatic threshold, momentum correction (the
// velocity kept before error feedback, masked where a value was sent, and
// saved with the residuals), and the warning for a threshold below a key's
// gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/file.h"
#include "kvstore/keys.h"
#include "kvstore/compressor.h"
#include "compression/compression.h"

namespace kvtrain {
namespace kv {
namespace {

proto::GradientCompression TwoBit(float threshold) {
  proto::GradientCompression spec;
  spec.set_type(proto::GradientCompression::TWO_BIT);
  spec.set_threshold(threshold);
  return spec;
}

std::vector<float> Decoded(const std::vector<char>& code, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  EXPECT_TRUE(Decode(proto::GradientCompression::TWO_BIT, code.data(), code.size(), n,
                     out.data())
                  .ok());
  return out;
}

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(AutoThresholdTest, IsTwiceTheMeanMagnitudeAndDecodesAsAnyThreshold) {
  const std::vector<float> g = {1.0f, -3.0f, 0.5f, 0.0f, 2.0f, -0.5f};  // mean |g| 7/6
  std::vector<float> r(g.size(), 0.0f);
  std::vector<char> code(EncodedBytes(proto::GradientCompression::TWO_BIT, 6));
  const float t = EncodeTwoBitAuto(g.data(), r.data(), 6, code.data());
  EXPECT_FLOAT_EQ(t, 2.0f * 7.0f / 6.0f);
  const std::vector<float> sent = Decoded(code, 6);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_FLOAT_EQ(sent[i], std::fabs(g[i]) >= t ? std::copysign(t, g[i]) : 0.0f) << i;
    EXPECT_FLOAT_EQ(r[i], g[i] - sent[i]) << i;  // error feedback
  }
  // Nothing to send still makes a valid encoding.
  std::vector<float> zeros(6, 0.0f);
  std::fill(r.begin(), r.end(), 0.0f);
  EXPECT_FLOAT_EQ(EncodeTwoBitAuto(zeros.data(), r.data(), 6, code.data()), 1.0f);
  EXPECT_EQ(Decoded(code, 6), zeros);
}

TEST(AutoThresholdTest, IsParsedFromTextAndBelongsTo2bitOnly) {
  StatusOr<proto::GradientCompression> a = ParseCompression("2bit", std::string("auto"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->auto_threshold());
  EXPECT_EQ(a->threshold(), 0.0f);
  StatusOr<proto::GradientCompression> n = ParseCompression("2bit", std::string("0.25"));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_FALSE(n->auto_threshold());
  EXPECT_EQ(n->threshold(), 0.25f);
  StatusOr<proto::GradientCompression> one = ParseCompression("1bit", std::string("auto"));
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("2bit"), std::string::npos) << one.status();
  StatusOr<proto::GradientCompression> bad = ParseCompression("2bit", std::string("half"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'half'"), std::string::npos) << bad.status();
  proto::GradientCompression both = TwoBit(0.5f);
  both.set_auto_threshold(true);
  EXPECT_FALSE(CheckCompression(both).ok());
}

TEST(MomentumCorrectionTest, VelocityFeedsTheResidualAndRestartsWhereSent) {
  Compressor c;
  ASSERT_TRUE(c.Set(TwoBit(1.0f), false).ok());
  c.SetMomentum(0.5f);
  const std::vector<float> g = {0.6f, 0.2f};
  std::vector<char> code(EncodedBytes(proto::GradientCompression::TWO_BIT, 2));
  // u = 0.5 u + g; v = r + u; |v| >= 1 sends 1, and that value's u restarts.
  const std::vector<std::vector<float>> want = {{0, 0}, {1, 0}, {1, 0}};
  for (const std::vector<float>& w : want) {
    c.EncodeTo(7, 2, g.data(), 0, 2, code.data());
    EXPECT_EQ(Decoded(code, 2), w);
  }
  // After three pushes: r = (0.1, 0.85), u = (0, 0.35).
  KeyTable keys;
  ASSERT_TRUE(keys.Id(Key(7)).ok());
  const std::string path = TmpPath("momentum.residuals");
  ASSERT_TRUE(c.Save(path, 0, 1, keys).ok());
  StatusOr<std::string> bytes = ReadChecksummedFile(path);
  ASSERT_TRUE(bytes.ok());
  proto::ResidualsFile file;
  ASSERT_TRUE(file.ParseFromString(*bytes));
  EXPECT_EQ(file.momentum(), 0.5f);
  ASSERT_EQ(file.residuals_size(), 1);
  std::vector<float> r(2), u(2);
  ASSERT_EQ(file.residuals(0).velocity().size(), 8u);
  std::memcpy(r.data(), file.residuals(0).data().data(), 8);
  std::memcpy(u.data(), file.residuals(0).velocity().data(), 8);
  EXPECT_NEAR(r[0], 0.1f, 1e-6f);
  EXPECT_NEAR(r[1], 0.85f, 1e-6f);
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_NEAR(u[1], 0.35f, 1e-6f);

  // Resuming restores the velocity: the next push is the one a fourth push
  // would have sent (v = (0.1 + 0.6, 0.85 + 0.375)).
  Compressor resumed;
  ASSERT_TRUE(resumed.Set(TwoBit(1.0f), false).ok());
  resumed.SetMomentum(0.5f);
  auto size_of = [](uint64_t) -> StatusOr<int64_t> { return int64_t{2}; };
  ASSERT_TRUE(resumed.Load(path, 0, 1, &keys, size_of).ok());
  resumed.EncodeTo(7, 2, g.data(), 0, 2, code.data());
  EXPECT_EQ(Decoded(code, 2), (std::vector<float>{0, 1}));
  // Another momentum is refused, naming it.
  Compressor other;
  ASSERT_TRUE(other.Set(TwoBit(1.0f), false).ok());
  const Status s = other.Load(path, 0, 1, &keys, size_of);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("momentum"), std::string::npos) << s;
}

TEST(MomentumCorrectionTest, MovesSgdMomentumIntoThe2bitCompressorOnly) {
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(0.05f);
  sgd.set_momentum(0.9f);
  sgd.set_weight_decay(1e-4f);
  Compressor two;
  ASSERT_TRUE(two.Set(TwoBit(0.5f), false).ok());
  const proto::OptimizerSpec applied = CorrectMomentum(sgd, &two);
  EXPECT_EQ(applied.momentum(), 0.0f);
  EXPECT_FLOAT_EQ(applied.weight_decay(), 1e-3f);
  EXPECT_EQ(applied.learning_rate(), 0.05f);
  EXPECT_EQ(two.momentum(), 0.9f);
  // NAG, and 1bit, keep their momentum where it was.
  proto::OptimizerSpec nag = sgd;
  nag.set_type(proto::OptimizerSpec::NAG);
  EXPECT_EQ(CorrectMomentum(nag, &two).momentum(), 0.9f);
  EXPECT_EQ(two.momentum(), 0.0f);
  // Arrays below min_bytes travel as float32, without a velocity: the
  // update keeps its momentum for all.
  Compressor some;
  proto::GradientCompression big_only = TwoBit(0.5f);
  big_only.set_min_bytes(65536);
  ASSERT_TRUE(some.Set(big_only, false).ok());
  EXPECT_EQ(CorrectMomentum(sgd, &some).momentum(), 0.9f);
  EXPECT_EQ(some.momentum(), 0.0f);
  Compressor one;
  proto::GradientCompression onebit;
  onebit.set_type(proto::GradientCompression::ONE_BIT);
  ASSERT_TRUE(one.Set(onebit, false).ok());
  EXPECT_EQ(CorrectMomentum(sgd, &one).momentum(), 0.9f);
  EXPECT_EQ(one.momentum(), 0.0f);
}

TEST(ResidualWatchTest, WarnsOnceNamingAKeyWhoseGradientsOutgrowTheThreshold) {
  KeyTable keys;
  const uint64_t big = keys.Id(Key("fc1_weight")).value();
  const uint64_t small = keys.Id(Key("fc1_bias")).value();
  Compressor c;
  c.SetKeyNames(&keys);
  ASSERT_TRUE(c.Set(TwoBit(0.5f), false).ok());
  std::vector<char> code(EncodedBytes(proto::GradientCompression::TWO_BIT, 8));
  const std::vector<float> two(8, 2.0f);
  std::vector<float> wobble(8);
  for (int push = 1; push <= 2 * Compressor::kWatchLast; ++push) {
    c.EncodeTo(big, 8, two.data(), 0, 8, code.data());
    // Below the threshold, each sign for as many pushes: kept up with.
    std::fill(wobble.begin(), wobble.end(), (push / 7) % 2 ? 0.3f : -0.3f);
    c.EncodeTo(small, 8, wobble.data(), 0, 8, code.data());
    if (push == Compressor::kWatchFirst * 2) {
      EXPECT_TRUE(c.Warned().empty());
    }
  }
  EXPECT_EQ(c.Warned(), std::vector<std::string>{"fc1_weight"});
  EXPECT_FALSE(c.WarnedOfMomentum());
  // An update that keeps a large momentum makes it worse: said too.
  Compressor nag;
  nag.SetKeyNames(&keys);
  ASSERT_TRUE(nag.Set(TwoBit(0.5f), false).ok());
  nag.SetMomentum(0, 0.9f);
  for (int push = 1; push <= Compressor::kWatchLast; ++push) {
    nag.EncodeTo(big, 8, two.data(), 0, 8, code.data());
  }
  EXPECT_EQ(nag.Warned(), std::vector<std::string>{"fc1_weight"});
  EXPECT_TRUE(nag.WarnedOfMomentum());
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
