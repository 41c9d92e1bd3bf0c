// Tests for kvstore/compression.h: the 2bit, 1bit and fp16 wire formats, checked
// byte for byte against reference encoders written here, error feedback over
// several steps, non-finite values and Decode's checks (the specs:
// compression_spec_test.cc).
#include "kvstore/compression.h"
#include "kvstore/compression_test_util.h"

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

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Little-endian bytes of a float, as the headers are written on the wire.
void PutFloatLE(float f, unsigned char* out) {
  const uint32_t u = BitsOf(f);
  for (int b = 0; b < 4; ++b) out[b] = static_cast<unsigned char>(u >> (8 * b));
}

// A float from its little-endian bytes.
float GetFloatLE(const unsigned char* in) {
  return FloatOf(uint32_t{in[0]} | uint32_t{in[1]} << 8 | uint32_t{in[2]} << 16 |
                 uint32_t{in[3]} << 24);
}

// Same value: equal bits, or both NaN (any payload).
bool SameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return BitsOf(a) == BitsOf(b);
}

::testing::AssertionResult SameFloats(const std::vector<float>& got,
                                      const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!SameFloat(got[i], want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i]
                                           << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameBytes(const std::vector<unsigned char>& got,
                                     const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure() << "byte " << i << ": got 0x" << std::hex
                                           << int{got[i]} << ", want 0x" << int{want[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

// One step of the reference encoders: the wire bytes, what the receiver
// decodes, and the residual left on the worker.
struct Step {
  std::vector<unsigned char> bytes;
  std::vector<float> sent;
  std::vector<float> residual;
};

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

// The code under test for one step: Encode (checking it writes exactly
// EncodedBytes bytes), then Decode (checking it writes exactly n floats).
// `residual` is updated in place.
Step RunStep(CompressionType type, float t, const std::vector<float>& grad,
             std::vector<float>* residual) {
  const int64_t n = static_cast<int64_t>(grad.size());
  const size_t bytes = EncodedBytes(type, n);
  const unsigned char kGuard = 0xA5;
  std::vector<char> buf(bytes + 16, static_cast<char>(kGuard));
  Encode(type, t, grad.data(), residual ? residual->data() : nullptr, n, buf.data());
  for (size_t i = bytes; i < buf.size(); ++i) {
    EXPECT_EQ(static_cast<unsigned char>(buf[i]), kGuard) << "Encode wrote past byte " << bytes;
  }
  Step s;
  s.bytes.assign(buf.begin(), buf.begin() + bytes);
  const float kSentinel = 12345.0f;
  std::vector<float> out(grad.size() + 4, kSentinel);
  const Status st = Decode(type, buf.data(), bytes, n, out.data());
  EXPECT_TRUE(st.ok()) << st;
  for (size_t i = grad.size(); i < out.size(); ++i) {
    EXPECT_EQ(out[i], kSentinel) << "Decode wrote past element " << n;
  }
  s.sent.assign(out.begin(), out.begin() + n);
  if (residual) s.residual = *residual;
  return s;
}

std::vector<float> RandomVector(std::mt19937* rng, size_t n, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

// fp16 reference decoder: IEEE binary16 by its definition.
double RefHalfValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant == 0 ? std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return (h & 0x8000) ? -v : v;
}

bool IsHalfNaN(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

// The non-negative halves 0x0000..0x7bff in increasing order (a half's code
// is its index), then 65536 at index 0x7c00: where the next half would be if
// the exponent went on, so that rounding past 65504 lands on Inf (an even
// code, as round-to-nearest-even needs).
const std::vector<double>& HalfGrid() {
  static const std::vector<double>* grid = [] {
    auto* g = new std::vector<double>;
    for (uint32_t h = 0; h < 0x7c00; ++h) g->push_back(RefHalfValue(static_cast<uint16_t>(h)));
    g->push_back(65536.0);
    return g;
  }();
  return *grid;
}

// Nearest half to a non-NaN float, ties to the even code, by comparing the
// distances (in double, exact here) to the two candidates around it.
uint16_t RefFloatToHalf(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65536.0) return sign | 0x7c00;
  const std::vector<double>& grid = HalfGrid();
  const size_t hi = std::lower_bound(grid.begin(), grid.end(), a) - grid.begin();
  if (grid[hi] == a) return static_cast<uint16_t>(sign | hi);
  const size_t lo = hi - 1;
  const double dlo = a - grid[lo], dhi = grid[hi] - a;
  size_t pick;
  if (dlo < dhi) {
    pick = lo;
  } else if (dhi < dlo) {
    pick = hi;
  } else {
    pick = lo % 2 == 0 ? lo : hi;
  }
  return static_cast<uint16_t>(sign | pick);
}

}  // namespace

// ---------------------------------------------------------------- 2bit

// //kvstore:compression_portable_test runs every case on the portable loops
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

// ---------------------------------------------------------------- fp16

TEST(HalfTest, EveryHalfDecodesAsIEEE) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double want = RefHalfValue(static_cast<uint16_t>(h));
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_TRUE(SameFloat(got, static_cast<float>(want))) << std::hex << h << ": " << got;
    }
  }
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x7c00), kInf);
  EXPECT_EQ(HalfToFloat(0xfc00), -kInf);
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t u = 0; u <= 0xffff; ++u) {
    const uint16_t h = static_cast<uint16_t>(u);
    const float x = HalfToFloat(h);
    if (IsHalfNaN(h)) {
      EXPECT_TRUE(IsHalfNaN(FloatToHalf(x))) << std::hex << u;
      continue;
    }
    ASSERT_EQ(FloatToHalf(x), h) << std::hex << u;
    const float exact = static_cast<float>(RefHalfValue(h));
    ASSERT_TRUE(SameFloat(HalfToFloat(FloatToHalf(exact)), exact)) << std::hex << u;
  }
}

TEST(HalfTest, MidpointsRoundToEven) {
  const std::vector<double>& grid = HalfGrid();
  for (uint32_t k = 0; k < 0x7c00; ++k) {
    // Halves k and k + 1 (k + 1 = 0x7c00: 65536, which rounds to Inf).
    const double mid = (grid[k] + grid[k + 1]) / 2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid) << k;  // 12 significant bits fit a float
    const uint16_t even = static_cast<uint16_t>(k % 2 == 0 ? k : k + 1);
    ASSERT_EQ(FloatToHalf(m), even) << std::hex << k;
    ASSERT_EQ(FloatToHalf(-m), even | 0x8000) << std::hex << k;
    ASSERT_EQ(FloatToHalf(std::nextafter(m, 0.0f)), k) << std::hex << k;
    ASSERT_EQ(FloatToHalf(std::nextafter(m, kInf)), k + 1) << std::hex << k;
    ASSERT_EQ(FloatToHalf(-std::nextafter(m, kInf)), (k + 1) | 0x8000) << std::hex << k;
  }
}

TEST(HalfTest, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < (1 << 20); ++i) {
    const float f = FloatOf(bits(rng));
    const uint16_t got = FloatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(IsHalfNaN(got)) << f;
    } else {
      ASSERT_EQ(got, RefFloatToHalf(f)) << std::hexfloat << f;
    }
  }
  // Magnitudes spread over the half range and a bit around it: 2^-27 .. 2^17.
  std::uniform_real_distribution<float> exponent(-27.0f, 17.0f);
  std::uniform_int_distribution<int> sign(0, 1);
  for (int i = 0; i < (1 << 20); ++i) {
    const float f = (sign(rng) ? -1.0f : 1.0f) * std::exp2(exponent(rng));
    ASSERT_EQ(FloatToHalf(f), RefFloatToHalf(f)) << std::hexfloat << f;
  }
}

TEST(HalfTest, EdgeValues) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest subnormal half
  EXPECT_EQ(FloatToHalf(tiny), 0x0001);
  EXPECT_EQ(FloatToHalf(-tiny), 0x8001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie: to even (0)
  EXPECT_EQ(FloatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -26)), 0x8000);  // sign kept
  EXPECT_EQ(FloatToHalf(1.5f * tiny), 0x0002);              // tie between 1 and 2
  EXPECT_EQ(FloatToHalf(2.5f * tiny), 0x0002);              // tie between 2 and 3
  EXPECT_EQ(FloatToHalf(2.75f * tiny), 0x0003);
  EXPECT_EQ(FloatToHalf(1023 * tiny), 0x03ff);              // largest subnormal
  EXPECT_EQ(FloatToHalf(1023.5f * tiny), 0x0400);           // tie: to 2^-14 (even)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);    // smallest normal
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: to even
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(FloatToHalf(65536.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(1e30f), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(FloatToHalf(kInf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-kInf), 0xfc00);
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(kNaN)));
  EXPECT_TRUE(IsHalfNaN(FloatToHalf(-kNaN)));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(kNaN))));
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_TRUE(std::signbit(HalfToFloat(FloatToHalf(-0.0f))));
}

TEST(HalfTest, ArrayConversionsMatchScalar) {
  std::mt19937 rng(5);
  std::vector<float> in = RandomVector(&rng, 257, 100.0f);
  in.push_back(kNaN);
  in.push_back(-kInf);
  std::vector<uint16_t> halves(in.size() + 1, 0xbeef);
  FloatsToHalves(in.data(), static_cast<int64_t>(in.size()), halves.data());
  EXPECT_EQ(halves.back(), 0xbeef);
  std::vector<float> back(in.size() + 1, 7.0f);
  HalvesToFloats(halves.data(), static_cast<int64_t>(in.size()), back.data());
  EXPECT_EQ(back.back(), 7.0f);
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(IsHalfNaN(halves[i]));
    } else {
      EXPECT_EQ(halves[i], RefFloatToHalf(in[i])) << i;
    }
    EXPECT_TRUE(SameFloat(back[i], HalfToFloat(halves[i]))) << i;
  }
}

TEST(HalfTest, EncodeWritesLittleEndianHalvesAndKeepsNonFinite) {
  const std::vector<float> grad = {1.0f, -2.0f, 65504.0f, 1e6f, -1e6f, kInf, -kInf, kNaN,
                                   -0.0f, 0.1f, std::ldexp(1.0f, -24)};
  const Step got = RunStep(kFp16, 0.0f, grad, nullptr);
  ASSERT_EQ(got.bytes.size(), 2 * grad.size());
  const uint16_t want[] = {0x3c00, 0xc000, 0x7bff, 0x7c00, 0xfc00, 0x7c00,
                           0xfc00, 0,      0x8000, 0x2e66, 0x0001};
  for (size_t i = 0; i < grad.size(); ++i) {
    const uint16_t h = static_cast<uint16_t>(got.bytes[2 * i] | got.bytes[2 * i + 1] << 8);
    if (i == 7) {
      EXPECT_TRUE(IsHalfNaN(h));
    } else {
      EXPECT_EQ(h, want[i]) << i;
    }
  }
  EXPECT_TRUE(SameFloats(got.sent, {1.0f, -2.0f, 65504.0f, kInf, -kInf, kInf, -kInf, kNaN,
                                    -0.0f, HalfToFloat(0x2e66), std::ldexp(1.0f, -24)}));
  EXPECT_TRUE(std::signbit(got.sent[8]));
}

TEST(HalfTest, EncodeAndDecodeAtAnOddAddress) {
  // Halves may sit anywhere in a message buffer.
  const std::vector<float> grad = {0.5f, -3.25f, 1024.0f};
  std::vector<char> buf(1 + 6 + 1, 0);
  Encode(kFp16, 0.0f, grad.data(), nullptr, 3, buf.data() + 1);
  EXPECT_EQ(buf[0], 0);
  EXPECT_EQ(buf[7], 0);
  std::vector<float> out(3);
  ASSERT_TRUE(Decode(kFp16, buf.data() + 1, 6, 3, out.data()).ok());
  EXPECT_TRUE(SameFloats(out, grad));
}

// ---------------------------------------------------------------- none

TEST(NoneTest, EncodesRawFloats) {
  const std::vector<float> grad = {1.0f, -0.1f, kInf, 3e38f};
  const Step got = RunStep(kNone, 0.0f, grad, nullptr);
  ASSERT_EQ(got.bytes.size(), 16u);
  std::vector<unsigned char> want(16);
  for (size_t i = 0; i < grad.size(); ++i) PutFloatLE(grad[i], want.data() + 4 * i);
  EXPECT_TRUE(SameBytes(got.bytes, want));
  EXPECT_TRUE(SameFloats(got.sent, grad));
}

// ---------------------------------------------------------------- sizes

TEST(CompressionTest, EncodedBytes) {
  for (int64_t n : std::vector<int64_t>{0, 1, 15, 16, 17, 31, 32, 33, 64, 65, 1000,
                                         3000000001LL}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    EXPECT_EQ(EncodedBytes(kTwoBit, n), static_cast<size_t>(4 + 4 * ((n + 15) / 16)));
    EXPECT_EQ(EncodedBytes(kOneBit, n), static_cast<size_t>(4 + 4 * ((n + 31) / 32)));
    EXPECT_EQ(EncodedBytes(kFp16, n), static_cast<size_t>(2 * n));
    EXPECT_EQ(EncodedBytes(kNone, n), static_cast<size_t>(4 * n));
  }
  // Literal values for a few.
  EXPECT_EQ(EncodedBytes(kTwoBit, 0), 4u);
  EXPECT_EQ(EncodedBytes(kTwoBit, 16), 8u);
  EXPECT_EQ(EncodedBytes(kTwoBit, 17), 12u);
  EXPECT_EQ(EncodedBytes(kOneBit, 32), 8u);
  EXPECT_EQ(EncodedBytes(kOneBit, 33), 12u);
  EXPECT_EQ(EncodedBytes(kFp16, 7), 14u);
}

TEST(CompressionTest, HasResidual) {
  EXPECT_TRUE(HasResidual(kTwoBit));
  EXPECT_TRUE(HasResidual(kOneBit));
  EXPECT_FALSE(HasResidual(kFp16));
  EXPECT_FALSE(HasResidual(kNone));
}

// ---------------------------------------------------------------- Decode errors

TEST(DecodeTest, WrongByteCountIsDataLossNamingBothCounts) {
  for (CompressionType type : {kTwoBit, kOneBit, kFp16, kNone}) {
    for (int64_t n : {17, 40, 1000}) {
      // Computed here from the format, not with EncodedBytes.
      size_t want = 0;
      if (type == kTwoBit) want = 4 + 4 * ((n + 15) / 16);
      if (type == kOneBit) want = 4 + 4 * ((n + 31) / 32);
      if (type == kFp16) want = 2 * n;
      if (type == kNone) want = 4 * n;
      // A buffer big enough for any of the sizes tried; a valid 2bit header.
      std::vector<char> buf(want + 8, 0);
      const float t = 0.5f;
      std::memcpy(buf.data(), &t, 4);
      std::vector<float> out(n);
      for (size_t bytes : {want - 1, want + 1, want + 4, size_t{0}}) {
        SCOPED_TRACE(CompressionName(type) + " n=" + std::to_string(n) +
                     " bytes=" + std::to_string(bytes));
        const Status st = Decode(type, buf.data(), bytes, n, out.data());
        ASSERT_FALSE(st.ok());
        EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st;
        EXPECT_TRUE(ContainsNumber(st.message(), want)) << st;
        EXPECT_TRUE(ContainsNumber(st.message(), bytes)) << st;
      }
      EXPECT_TRUE(Decode(type, buf.data(), want, n, out.data()).ok());
    }
  }
}

TEST(DecodeTest, TwoBitHeaderMustBeAFinitePositiveThreshold) {
  std::vector<unsigned char> buf(8, 0);
  std::vector<float> out(5);
  for (float t : {0.0f, -0.0f, -0.5f, kNaN, kInf, -kInf}) {
    SCOPED_TRACE("threshold " + std::to_string(t));
    PutFloatLE(t, buf.data());
    const Status st = Decode(kTwoBit, reinterpret_cast<const char*>(buf.data()), 8, 5,
                             out.data());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st;
    EXPECT_TRUE(Contains(st.message(), "threshold")) << st;
  }
  for (float t : {0.5f, 1e-30f, std::numeric_limits<float>::denorm_min(), 1e30f}) {
    PutFloatLE(t, buf.data());
    EXPECT_TRUE(
        Decode(kTwoBit, reinterpret_cast<const char*>(buf.data()), 8, 5, out.data()).ok())
        << t;
  }
}

// DecodeAdd adds what Decode gives, bit for bit (the all-reduce sums each
// rank's decoded array into the first one's with it), at any address, with
// the fast kernels and the portable loops.
TEST(DecodeTest, DecodeAddIsDecodeThenAdd) {
  std::mt19937 rng(11);
  for (const bool portable : {false, true}) {
    UsePortableKernels(portable);
    for (CompressionType type : {kTwoBit, kOneBit, kFp16, kNone}) {
      for (int64_t n : {1, 7, 8, 17, 33, 1000}) {
        SCOPED_TRACE(CompressionName(type) + " n=" + std::to_string(n) +
                     (portable ? " portable" : ""));
        std::vector<float> grad = RandomVector(&rng, n, 3.0f), residual(n, 0.0f);
        grad[0] = kNaN;
        std::vector<char> buf(EncodedBytes(type, n) + 1);
        Encode(type, 1.0f, grad.data(), residual.data(), n, buf.data() + 1);
        std::vector<float> decoded(n);
        ASSERT_TRUE(Decode(type, buf.data() + 1, buf.size() - 1, n, decoded.data()).ok());
        std::vector<float> sum = RandomVector(&rng, n, 100.0f);
        sum[n - 1] = -0.0f;
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = sum[i] + decoded[i];
        ASSERT_TRUE(DecodeAdd(type, buf.data() + 1, buf.size() - 1, n, sum.data()).ok());
        EXPECT_TRUE(SameFloats(sum, want));
        const Status st = DecodeAdd(type, buf.data() + 1, buf.size() - 2, n, sum.data());
        EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st;
      }
    }
  }
  UsePortableKernels(false);
}

TEST(HalfTest, RoundToHalvesIsEncodeThenDecode) {
  // Longer than one internal chunk (4096), odd length, with extremes.
  std::mt19937 rng(5);
  std::vector<float> v = RandomVector(&rng, 9001, 3.0f);
  v[0] = 70000.0f;     // beyond the largest half: +Inf
  v[1] = 1e-9f;        // below the smallest subnormal half: 0
  v[4096] = 0.1f;      // the first value of the second chunk
  std::vector<float> got = v;
  RoundToHalves(got.data(), static_cast<int64_t>(got.size()));
  auto Bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(Bits(got[i]), Bits(HalfToFloat(FloatToHalf(v[i])))) << i;
  }
  EXPECT_TRUE(std::isinf(got[0]));
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_EQ(got[4096], 0.0999755859375f);
  // Which arrays push-pulls answer as halves: under pull fp16, those of at
  // least min_bytes.
  auto spec = ParseCompression("2bit", 0.5f, 400, "fp16");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(AnswersHalves(*spec, 100));
  EXPECT_FALSE(AnswersHalves(*spec, 99));
  spec->set_pull(proto::GradientCompression::PULL_DEFAULT);
  EXPECT_FALSE(AnswersHalves(*spec, 100));
}

}  // namespace kv
}  // namespace kvtrain
