// Tests for compression/compression.h's fp16: every half decoded as IEEE
// binary16, rounding to nearest even against a reference written here,
// the array conversions, Encode/Decode's halves and RoundToHalves. Built
// into compression_test and compression_portable_test with
// compression_test.cc (whose environment picks the kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compression/compression.h"
#include "compression/compression_test_util.h"

namespace kvtrain {
namespace kv {

using namespace testutil;  // NOLINT: the shared test constants and checks

namespace {

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

bool IsHalfNaN(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

// The non-negative halves 0x0000..0x7bff in increasing order (a half's code
// is its index), then 65536 at index 0x7c00: where the next half would be if
// the exponent went on, so that rounding past 65504 lands on Inf (an even
// code, as round-to-nearest-even needs).
const std::vector<double>& HalfGrid() {
  static const std::vector<double>* grid = [] {
    auto* g = new std::vector<double>;
    for (uint32_t h = 0; h < 0x7c00; ++h)
      g->push_back(RefHalfValue(static_cast<uint16_t>(h)));
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
  const size_t hi =
      std::lower_bound(grid.begin(), grid.end(), a) - grid.begin();
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

// ---------------------------------------------------------------- fp16

TEST(HalfTest, EveryHalfDecodesAsIEEE) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double want = RefHalfValue(static_cast<uint16_t>(h));
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_TRUE(SameFloat(got, static_cast<float>(want)))
          << std::hex << h << ": " << got;
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
    ASSERT_TRUE(SameFloat(HalfToFloat(FloatToHalf(exact)), exact))
        << std::hex << u;
  }
}

TEST(HalfTest, MidpointsRoundToEven) {
  const std::vector<double>& grid = HalfGrid();
  for (uint32_t k = 0; k < 0x7c00; ++k) {
    // Halves k and k + 1 (k + 1 = 0x7c00: 65536, which rounds to Inf).
    const double mid = (grid[k] + grid[k + 1]) / 2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid)
        << k;  // 12 significant bits fit a float
    const uint16_t even = static_cast<uint16_t>(k % 2 == 0 ? k : k + 1);
    ASSERT_EQ(FloatToHalf(m), even) << std::hex << k;
    ASSERT_EQ(FloatToHalf(-m), even | 0x8000) << std::hex << k;
    ASSERT_EQ(FloatToHalf(std::nextafter(m, 0.0f)), k) << std::hex << k;
    ASSERT_EQ(FloatToHalf(std::nextafter(m, kInf)), k + 1) << std::hex << k;
    ASSERT_EQ(FloatToHalf(-std::nextafter(m, kInf)), (k + 1) | 0x8000)
        << std::hex << k;
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
  EXPECT_EQ(FloatToHalf(1.5f * tiny), 0x0002);  // tie between 1 and 2
  EXPECT_EQ(FloatToHalf(2.5f * tiny), 0x0002);  // tie between 2 and 3
  EXPECT_EQ(FloatToHalf(2.75f * tiny), 0x0003);
  EXPECT_EQ(FloatToHalf(1023 * tiny), 0x03ff);     // largest subnormal
  EXPECT_EQ(FloatToHalf(1023.5f * tiny), 0x0400);  // tie: to 2^-14 (even)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)),
            0x3c02);  // tie: to even
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
  const std::vector<float> grad = {1.0f,
                                   -2.0f,
                                   65504.0f,
                                   1e6f,
                                   -1e6f,
                                   kInf,
                                   -kInf,
                                   kNaN,
                                   -0.0f,
                                   0.1f,
                                   std::ldexp(1.0f, -24)};
  const Step got = RunStep(kFp16, 0.0f, grad, nullptr);
  ASSERT_EQ(got.bytes.size(), 2 * grad.size());
  const uint16_t want[] = {0x3c00, 0xc000, 0x7bff, 0x7c00, 0xfc00, 0x7c00,
                           0xfc00, 0,      0x8000, 0x2e66, 0x0001};
  for (size_t i = 0; i < grad.size(); ++i) {
    const uint16_t h =
        static_cast<uint16_t>(got.bytes[2 * i] | got.bytes[2 * i + 1] << 8);
    if (i == 7) {
      EXPECT_TRUE(IsHalfNaN(h));
    } else {
      EXPECT_EQ(h, want[i]) << i;
    }
  }
  EXPECT_TRUE(SameFloats(
      got.sent, {1.0f, -2.0f, 65504.0f, kInf, -kInf, kInf, -kInf, kNaN, -0.0f,
                 HalfToFloat(0x2e66), std::ldexp(1.0f, -24)}));
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

TEST(HalfTest, RoundToHalvesIsEncodeThenDecode) {
  // Longer than one internal chunk (4096), odd length, with extremes.
  std::mt19937 rng(5);
  std::vector<float> v = RandomVector(&rng, 9001, 3.0f);
  v[0] = 70000.0f;  // beyond the largest half: +Inf
  v[1] = 1e-9f;     // below the smallest subnormal half: 0
  v[4096] = 0.1f;   // the first value of the second chunk
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
