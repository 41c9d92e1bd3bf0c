// Tests for compression/compression.h: the 2bit and 1bit wire formats, checked
// byte for byte against reference encoders written here, error feedback
// over several steps and non-finite values (none, sizes and Decode's
// checks: compression_decode_test.cc; fp16: compression_half_test.cc; the
// specs: compression_spec_test.cc).
#include "compression/compression.h"
#include "compression/compression_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace kvtrain {
namespace kv {

using namespace testutil;  // NOLINT: the shared test constants and checks

namespace {

// 2bit by the header's rules, element by element, each code OR-ed into its
// byte (bits 2(i%16) of little-endian word i/16). Unused bits stay 0.
Step RefTwoBit(float t, const std::vector<float>& grad, const std::vector<float>& residual) {
  const size_t n = grad.size();
  Step s;
  s.bytes.assign(4 + 4 * ((n + 15) / 16), 0);
  PutFloatLE(t, s.bytes.data());
  s.sent.resize(n);
  s.residual.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = grad[i] + residual[i];
    unsigned code;
    if (std::isnan(v) || std::isinf(v)) {
      code = 1;
      s.sent[i] = kNaN;
      s.residual[i] = 0.0f;
    } else if (v >= t) {
      code = 3;
      s.sent[i] = t;
      s.residual[i] = v - t;
    } else if (v <= -t) {
      code = 2;
      s.sent[i] = -t;
      s.residual[i] = v + t;
    } else {
      code = 0;
      s.sent[i] = 0.0f;
      s.residual[i] = v;
    }
    const size_t bit = 2 * (i % 16);
    s.bytes[4 + 4 * (i / 16) + bit / 8] |= static_cast<unsigned char>(code << (bit % 8));
  }
  return s;
}

// 1bit: scale = mean |v|, |v| summed in double in 8 partial sums (element
// i into sum i%8, in order) added 0 to 7, cast to float; bit i%32 of
// little-endian word i/32 set for v >= 0. Any non-finite v: scale NaN, and
// finite elements keep all of v as residual, non-finite ones restart at 0.
Step RefOneBit(const std::vector<float>& grad, const std::vector<float>& residual) {
  const size_t n = grad.size();
  std::vector<float> v(n);
  bool finite = true;
  double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    v[i] = grad[i] + residual[i];
    if (std::isnan(v[i]) || std::isinf(v[i])) finite = false;
    partial[i % 8] += std::fabs(static_cast<double>(v[i]));
  }
  double sum = 0;
  for (double p : partial) sum += p;
  float scale = 0.0f;
  if (!finite) {
    scale = kNaN;
  } else if (n > 0) {
    scale = static_cast<float>(sum / static_cast<double>(n));
  }
  Step s;
  s.bytes.assign(4 + 4 * ((n + 31) / 32), 0);
  PutFloatLE(scale, s.bytes.data());
  s.sent.resize(n);
  s.residual.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const bool positive = v[i] >= 0.0f;
    if (positive) s.bytes[4 + 4 * (i / 32) + (i % 32) / 8] |= 1u << (i % 8);
    if (!finite) {
      s.sent[i] = kNaN;
      s.residual[i] = (std::isnan(v[i]) || std::isinf(v[i])) ? 0.0f : v[i];
    } else {
      s.sent[i] = positive ? scale : -scale;
      s.residual[i] = v[i] - s.sent[i];
    }
  }
  return s;
}

}  // namespace

// ---------------------------------------------------------------- 2bit

// //compression:compression_portable_test runs every case on the portable loops
// (the CPU's AVX2/F16C otherwise, where it has them).
class PortableKernels : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("KVTRAIN_PORTABLE_KERNELS") != nullptr) UsePortableKernels(true);
  }
};
::testing::Environment* const kPortable =
    ::testing::AddGlobalTestEnvironment(new PortableKernels);

TEST(TwoBitTest, MatchesReferenceForOddLengths) {
  std::mt19937 rng(20240601);
  const float t = 0.5f;
  for (size_t n : {0, 1, 15, 16, 17, 33, 1000}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> grad = RandomVector(&rng, n, 0.6f);
    std::vector<float> residual = RandomVector(&rng, n, 0.2f);
    const Step want = RefTwoBit(t, grad, residual);
    const Step got = RunStep(kTwoBit, t, grad, &residual);
    ASSERT_EQ(got.bytes.size(), 4 + 4 * ((n + 15) / 16));
    EXPECT_TRUE(SameBytes(got.bytes, want.bytes));
    EXPECT_TRUE(SameFloats(got.sent, want.sent));
    EXPECT_TRUE(SameFloats(got.residual, want.residual));
    // Every code is used for the random inputs of any length >= 15.
    if (n >= 15) {
      EXPECT_TRUE(std::count(want.sent.begin(), want.sent.end(), t) > 0);
      EXPECT_TRUE(std::count(want.sent.begin(), want.sent.end(), -t) > 0);
      EXPECT_TRUE(std::count(want.sent.begin(), want.sent.end(), 0.0f) > 0);
    }
  }
}

TEST(TwoBitTest, ThresholdIsInclusiveAndOtherThresholdsWork) {
  // v exactly +-t sends +-t; just inside sends 0.
  const float t = 0.25f;
  const std::vector<float> grad = {0.25f, -0.25f, std::nextafter(0.25f, 0.0f),
                                   std::nextafter(-0.25f, 0.0f), 3.0f, -3.0f, 0.0f};
  std::vector<float> residual(grad.size(), 0.0f);
  const Step got = RunStep(kTwoBit, t, grad, &residual);
  EXPECT_TRUE(SameFloats(got.sent, {0.25f, -0.25f, 0.0f, 0.0f, 0.25f, -0.25f, 0.0f}));
  EXPECT_TRUE(SameFloats(got.residual, {0.0f, 0.0f, std::nextafter(0.25f, 0.0f),
                                        std::nextafter(-0.25f, 0.0f), 2.75f, -2.75f, 0.0f}));
  // Codes 3, 2, 0, 0 | 3, 2, 0: byte 0 = 0b00'00'10'11 = 0x0B, byte 1 the same.
  const std::vector<unsigned char> want = {0x00, 0x00, 0x80, 0x3E, 0x0B, 0x0B, 0x00, 0x00};
  EXPECT_TRUE(SameBytes(got.bytes, want));
}

TEST(TwoBitTest, DecodesHandWrittenWords) {
  // n = 19, threshold 0.25 (0x3E800000). Word 0: codes 0,1,2,3 repeated
  // (each byte 0b11'10'01'00 = 0xE4). Word 1: element 16 code 3, 17 code 2,
  // 18 code 0, and the unused bits set: they must be ignored.
  const std::vector<unsigned char> in = {0x00, 0x00, 0x80, 0x3E, 0xE4, 0xE4, 0xE4,
                                         0xE4, 0x0B, 0xFF, 0xFF, 0xFF};
  std::vector<float> out(19 + 1, 7.0f);
  const Status st = Decode(kTwoBit, reinterpret_cast<const char*>(in.data()), in.size(), 19,
                           out.data());
  ASSERT_TRUE(st.ok()) << st;
  for (int i = 0; i < 16; ++i) {
    const float want[4] = {0.0f, kNaN, -0.25f, 0.25f};
    EXPECT_TRUE(SameFloat(out[i], want[i % 4])) << i << ": " << out[i];
  }
  EXPECT_EQ(out[16], 0.25f);
  EXPECT_EQ(out[17], -0.25f);
  EXPECT_EQ(out[18], 0.0f);
  EXPECT_EQ(out[19], 7.0f);  // untouched
}

TEST(TwoBitTest, ErrorFeedbackOverFiveStepsByHand) {
  const float t = 0.5f;
  // Element 0: 0.375 every step. 1: -0.25 every step. 2: 1.25, -0.25, -0.25,
  // 0.125, -1. 3: 0.0625 every step (never reaches the threshold).
  const std::vector<std::vector<float>> grads = {
      {0.375f, -0.25f, 1.25f, 0.0625f},  {0.375f, -0.25f, -0.25f, 0.0625f},
      {0.375f, -0.25f, -0.25f, 0.0625f}, {0.375f, -0.25f, 0.125f, 0.0625f},
      {0.375f, -0.25f, -1.0f, 0.0625f},
  };
  // v = g + r: element 0 goes 0.375, 0.75, 0.625, 0.5 (sent: >= t), 0.375;
  // element 1 -0.25, -0.5 (sent: <= -t), -0.25, -0.5, -0.25; element 2
  // 1.25, 0.5, -0.25, -0.125, -1.125; element 3 0.0625 .. 0.3125.
  const std::vector<std::vector<float>> sent = {
      {0.0f, 0.0f, 0.5f, 0.0f},  {0.5f, -0.5f, 0.5f, 0.0f}, {0.5f, 0.0f, 0.0f, 0.0f},
      {0.5f, -0.5f, 0.0f, 0.0f}, {0.0f, 0.0f, -0.5f, 0.0f},
  };
  const std::vector<std::vector<float>> residuals = {
      {0.375f, -0.25f, 0.75f, 0.0625f},   {0.25f, 0.0f, 0.0f, 0.125f},
      {0.125f, -0.25f, -0.25f, 0.1875f},  {0.0f, 0.0f, -0.125f, 0.25f},
      {0.375f, -0.25f, -0.625f, 0.3125f},
  };
  // The one data word's low byte per step (codes of elements 0..3 at bits
  // 0-1, 2-3, 4-5, 6-7; 3 = +t, 2 = -t).
  const unsigned char word_byte[5] = {0x30, 0x3B, 0x03, 0x0B, 0x20};
  std::vector<float> residual(4, 0.0f);
  std::vector<double> total_grad(4, 0.0), total_sent(4, 0.0);
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    const Step got = RunStep(kTwoBit, t, grads[step], &residual);
    EXPECT_TRUE(SameFloats(got.sent, sent[step]));
    EXPECT_TRUE(SameFloats(got.residual, residuals[step]));
    EXPECT_TRUE(SameBytes(got.bytes, {0x00, 0x00, 0x00, 0x3F, word_byte[step], 0, 0, 0}));
    for (int i = 0; i < 4; ++i) {
      total_grad[i] += grads[step][i];
      total_sent[i] += got.sent[i];
    }
  }
  // Nothing is lost: what was sent plus what is left is what was pushed.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(total_sent[i] + residual[i], total_grad[i]) << i;
}

TEST(TwoBitTest, ErrorFeedbackMatchesReferenceAndConserves) {
  std::mt19937 rng(7);
  const float t = 0.5f;
  const size_t n = 1000;
  std::vector<float> residual(n, 0.0f), ref_residual(n, 0.0f);
  std::vector<double> total_grad(n, 0.0), total_sent(n, 0.0);
  for (int step = 0; step < 20; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> grad = RandomVector(&rng, n, 0.3f);
    const Step want = RefTwoBit(t, grad, ref_residual);
    ref_residual = want.residual;
    const Step got = RunStep(kTwoBit, t, grad, &residual);
    ASSERT_TRUE(SameBytes(got.bytes, want.bytes));
    ASSERT_TRUE(SameFloats(got.sent, want.sent));
    ASSERT_TRUE(SameFloats(got.residual, want.residual));
    for (size_t i = 0; i < n; ++i) {
      total_grad[i] += grad[i];
      total_sent[i] += got.sent[i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(total_sent[i] + residual[i], total_grad[i], 1e-5) << i;
  }
}

TEST(TwoBitTest, NonFiniteElementsArriveAsNaNAlone) {
  const float t = 0.5f;
  const float big = std::numeric_limits<float>::max();
  // Element 6: g + r overflows to +Inf, a non-finite v from finite inputs.
  const std::vector<float> grad = {0.75f, kNaN, -0.75f, kInf, 0.25f, -kInf, big, 0.125f};
  std::vector<float> residual = {0.25f, 0.5f, 0.0f, -2.0f, 0.0f, 1.0f, big, 0.25f};
  const Step got = RunStep(kTwoBit, t, grad, &residual);
  EXPECT_TRUE(SameFloats(got.sent, {0.5f, kNaN, -0.5f, kNaN, 0.0f, kNaN, kNaN, 0.0f}));
  EXPECT_TRUE(SameFloats(got.residual, {0.5f, 0.0f, -0.25f, 0.0f, 0.25f, 0.0f, 0.0f, 0.375f}));
  // Codes 3, 1, 2, 1 | 0, 1, 1, 0 -> bytes 0b01'10'01'11 = 0x67, 0b00'01'01'00 = 0x14.
  EXPECT_TRUE(SameBytes(got.bytes, {0x00, 0x00, 0x00, 0x3F, 0x67, 0x14, 0x00, 0x00}));
  // The next step starts those elements from 0 and the others carry on.
  const std::vector<float> grad2(8, 0.25f);
  const Step got2 = RunStep(kTwoBit, t, grad2, &residual);
  EXPECT_TRUE(SameFloats(got2.sent, {0.5f, 0.0f, 0.0f, 0.0f, 0.5f, 0.0f, 0.0f, 0.5f}));
  EXPECT_TRUE(
      SameFloats(got2.residual, {0.25f, 0.25f, 0.0f, 0.25f, 0.0f, 0.25f, 0.25f, 0.125f}));
}

// ---------------------------------------------------------------- 1bit

TEST(OneBitTest, MatchesReferenceForOddLengths) {
  std::mt19937 rng(1234);
  for (size_t n : {0, 1, 31, 32, 33, 65, 1000}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const std::vector<float> grad = RandomVector(&rng, n, 1.0f);
    std::vector<float> residual = RandomVector(&rng, n, 0.5f);
    const Step want = RefOneBit(grad, residual);
    const Step got = RunStep(kOneBit, 0.0f, grad, &residual);
    ASSERT_EQ(got.bytes.size(), 4 + 4 * ((n + 31) / 32));
    EXPECT_TRUE(SameBytes(got.bytes, want.bytes));
    EXPECT_TRUE(SameFloats(got.sent, want.sent));
    EXPECT_TRUE(SameFloats(got.residual, want.residual));
  }
}

TEST(OneBitTest, EmptyArrayHasScaleZero) {
  std::vector<float> residual;
  const Step got = RunStep(kOneBit, 0.0f, {}, &residual);
  EXPECT_TRUE(SameBytes(got.bytes, {0, 0, 0, 0}));
  EXPECT_TRUE(got.sent.empty());
}

TEST(OneBitTest, DecodesHandWrittenWords) {
  // n = 35, scale 1.5 (0x3FC00000). Word 0 = 0x0000FFFF: elements 0-15 +s,
  // 16-31 -s. Word 1: bits 0 and 2 set (elements 32 and 34), unused bits set.
  const std::vector<unsigned char> in = {0x00, 0x00, 0xC0, 0x3F, 0xFF, 0xFF, 0x00,
                                         0x00, 0xFD, 0xFF, 0xFF, 0xFF};
  std::vector<float> out(36, 7.0f);
  const Status st = Decode(kOneBit, reinterpret_cast<const char*>(in.data()), in.size(), 35,
                           out.data());
  ASSERT_TRUE(st.ok()) << st;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], i < 16 ? 1.5f : -1.5f) << i;
  EXPECT_EQ(out[32], 1.5f);
  EXPECT_EQ(out[33], -1.5f);
  EXPECT_EQ(out[34], 1.5f);
  EXPECT_EQ(out[35], 7.0f);  // untouched
}

TEST(OneBitTest, ErrorFeedbackOverFiveStepsByHand) {
  // The same gradient every step. v = g + r; scale = mean |v|:
  //   step 1: v = (1, -0.5, 0.25, -0.25)        scale 2/4 = 0.5
  //   step 2: v = (1.5, -0.5, 0, 0)             scale 2/4 = 0.5 (0 sends +s)
  //   step 3: v = (2, -0.5, -0.25, -0.75)       scale 3.5/4 = 0.875
  //   step 4: v = (2.125, -0.125, 0.875, -0.125) scale 3.25/4 = 0.8125
  //   step 5: v = (2.3125, 0.1875, 0.3125, 0.4375) scale 3.25/4 = 0.8125
  const std::vector<float> grad = {1.0f, -0.5f, 0.25f, -0.25f};
  const float scales[5] = {0.5f, 0.5f, 0.875f, 0.8125f, 0.8125f};
  const std::vector<std::vector<float>> sent = {
      {0.5f, -0.5f, 0.5f, -0.5f},
      {0.5f, -0.5f, 0.5f, 0.5f},
      {0.875f, -0.875f, -0.875f, -0.875f},
      {0.8125f, -0.8125f, 0.8125f, -0.8125f},
      {0.8125f, 0.8125f, 0.8125f, 0.8125f},
  };
  const std::vector<std::vector<float>> residuals = {
      {0.5f, 0.0f, -0.25f, 0.25f},          {1.0f, 0.0f, -0.5f, -0.5f},
      {1.125f, 0.375f, 0.625f, 0.125f},     {1.3125f, 0.6875f, 0.0625f, 0.6875f},
      {1.5f, -0.625f, -0.5f, -0.375f},
  };
  // Bit i set for +s.
  const unsigned char word_byte[5] = {0x05, 0x0D, 0x01, 0x05, 0x0F};
  std::vector<float> residual(4, 0.0f);
  std::vector<double> total_sent(4, 0.0);
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step + 1));
    const Step got = RunStep(kOneBit, 0.0f, grad, &residual);
    std::vector<unsigned char> want(8, 0);
    PutFloatLE(scales[step], want.data());
    want[4] = word_byte[step];
    EXPECT_TRUE(SameBytes(got.bytes, want));
    EXPECT_TRUE(SameFloats(got.sent, sent[step]));
    EXPECT_TRUE(SameFloats(got.residual, residuals[step]));
    for (int i = 0; i < 4; ++i) total_sent[i] += got.sent[i];
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(total_sent[i] + residual[i], 5.0 * grad[i]) << i;
}

TEST(OneBitTest, ErrorFeedbackMatchesReferenceAndConserves) {
  std::mt19937 rng(99);
  for (size_t n : {33, 1000}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<float> residual(n, 0.0f), ref_residual(n, 0.0f);
    std::vector<double> total_grad(n, 0.0), total_sent(n, 0.0);
    for (int step = 0; step < 20; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const std::vector<float> grad = RandomVector(&rng, n, 1.0f);
      const Step want = RefOneBit(grad, ref_residual);
      ref_residual = want.residual;
      const Step got = RunStep(kOneBit, 0.0f, grad, &residual);
      ASSERT_TRUE(SameBytes(got.bytes, want.bytes));
      ASSERT_TRUE(SameFloats(got.sent, want.sent));
      ASSERT_TRUE(SameFloats(got.residual, want.residual));
      for (size_t i = 0; i < n; ++i) {
        total_grad[i] += grad[i];
        total_sent[i] += got.sent[i];
      }
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(total_sent[i] + residual[i], total_grad[i], 1e-4) << i;
    }
  }
}

TEST(OneBitTest, AnyNonFiniteValueMakesTheWholeArrayNaN) {
  for (float bad : {kNaN, kInf, -kInf}) {
    SCOPED_TRACE("bad=" + std::to_string(bad));
    const std::vector<float> grad = {1.0f, bad, -2.0f, 0.5f, -0.25f};
    std::vector<float> residual = {0.5f, 3.0f, 0.0f, 0.0f, -0.5f};
    const Step got = RunStep(kOneBit, 0.0f, grad, &residual);
    for (size_t i = 0; i < got.sent.size(); ++i) EXPECT_TRUE(std::isnan(got.sent[i])) << i;
    // Nothing of the finite elements was sent: they keep all of v.
    EXPECT_TRUE(SameFloats(got.residual, {1.5f, 0.0f, -2.0f, 0.5f, -0.75f}));
    EXPECT_TRUE(std::isnan(GetFloatLE(got.bytes.data())));  // the scale
    // The next, finite step goes on from there.
    const Step next = RunStep(kOneBit, 0.0f, {0.5f, 0.5f, 0.0f, 0.5f, 0.75f}, &residual);
    // v = (2, 0.5, -2, 1, 0): scale 5.5/5 = 1.1f.
    const float s = static_cast<float>(5.5 / 5.0);
    EXPECT_TRUE(SameFloats(next.sent, {s, s, -s, s, s}));
    EXPECT_TRUE(SameFloats(next.residual, {2.0f - s, 0.5f - s, -2.0f + s, 1.0f - s, 0.0f - s}));
  }
}

}  // namespace kv
}  // namespace kvtrain
