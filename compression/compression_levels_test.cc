// Tests for the level answers of compression/compression.h: the bits a sum of N
// workers' 2bit or 1bit pushes needs, the format byte for byte against a
// reference written here, exact round trips (NaN, -0, odd lengths), the
// vector kernels against the portable loops, and the errors for too many
// values and wrong sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compression/compression.h"

namespace kvtrain {
namespace kv {
namespace {

constexpr CompressionType kTwoBit = proto::GradientCompression::TWO_BIT;
constexpr CompressionType kOneBit = proto::GradientCompression::ONE_BIT;

uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(LevelsTest, BitsHoldEveryTupleOfCodes) {
  // 2bit: 4 codes per worker, 4^N sums at most; 1bit: 2^N.
  EXPECT_EQ(LevelBits(kTwoBit, 1), 2);
  EXPECT_EQ(LevelBits(kTwoBit, 2), 4);
  EXPECT_EQ(LevelBits(kTwoBit, 3), 8);
  EXPECT_EQ(LevelBits(kTwoBit, 4), 8);
  EXPECT_EQ(LevelBits(kTwoBit, 5), 0);
  EXPECT_EQ(LevelBits(kOneBit, 1), 1);
  EXPECT_EQ(LevelBits(kOneBit, 2), 2);
  EXPECT_EQ(LevelBits(kOneBit, 4), 4);
  EXPECT_EQ(LevelBits(kOneBit, 8), 8);
  EXPECT_EQ(LevelBits(kOneBit, 9), 0);
  EXPECT_EQ(LevelBits(proto::GradientCompression::FP16, 2), 0);
  EXPECT_EQ(LevelBits(proto::GradientCompression::NONE, 2), 0);
  EXPECT_EQ(LevelBits(kTwoBit, 0), 0);
}

TEST(LevelsTest, BytesAreTheTableThenPackedIndices) {
  EXPECT_EQ(LevelBytes(4, 0), 64u);
  EXPECT_EQ(LevelBytes(4, 3), 64u + 2);
  EXPECT_EQ(LevelBytes(1, 9), 8u + 2);
  EXPECT_EQ(LevelBytes(8, 5), 1024u + 5);
  EXPECT_EQ(AnswerBytes(10, false, 0), 40u);
  EXPECT_EQ(AnswerBytes(10, true, 0), 20u);
  EXPECT_EQ(AnswerBytes(10, true, 2), LevelBytes(2, 10));
}

TEST(LevelsTest, FormatMatchesTheReference) {
  // Values in order of first appearance get table entries 0, 1, 2...
  const std::vector<float> v = {0.5f, -0.5f, 0.5f, 0.0f, 1.0f, 0.0f, -0.5f};
  std::vector<char> out(LevelBytes(4, 7));
  ASSERT_TRUE(EncodeLevels(v.data(), 7, 4, out.data()).ok());
  std::vector<float> table(16);
  std::memcpy(table.data(), out.data(), 64);
  EXPECT_EQ(table[0], 0.5f);
  EXPECT_EQ(table[1], -0.5f);
  EXPECT_EQ(table[2], 0.0f);
  EXPECT_EQ(table[3], 1.0f);
  for (int k = 4; k < 16; ++k) EXPECT_EQ(BitsOf(table[k]), 0u) << k;
  // Indices 0 1 0 2 3 2 1: low nibble first.
  const std::vector<uint8_t> want = {0x10, 0x20, 0x23, 0x01};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(static_cast<uint8_t>(out[64 + i]), want[i]) << i;
  }
  // 2 bits: four indices per byte, from bit 0 up.
  const std::vector<float> w = {3.0f, 4.0f, 4.0f, 5.0f, 3.0f};
  std::vector<char> out2(LevelBytes(2, 5));
  ASSERT_TRUE(EncodeLevels(w.data(), 5, 2, out2.data()).ok());
  EXPECT_EQ(static_cast<uint8_t>(out2[16]), 0x94);  // 0, 1, 1, 2 -> 10 01 01 00
  EXPECT_EQ(static_cast<uint8_t>(out2[17]), 0x00);
}

TEST(LevelsTest, RoundTripsBitForBit) {
  // Every width, odd lengths, NaN (its payload kept), both zeros and
  // infinities: what comes back is the same bits.
  std::mt19937 rng(7);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> pool = {0.0f, -0.0f, 0.25f, -0.25f, nan, inf, -inf, 1e-40f,
                                   3.0f, -3.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f};
  for (int bits : {1, 2, 4, 8}) {
    const size_t kinds = std::min<size_t>(pool.size(), size_t{1} << bits);
    for (int64_t n : {1, 2, 3, 7, 8, 9, 1001}) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = pool[rng() % kinds];
      std::vector<char> coded(LevelBytes(bits, n));
      ASSERT_TRUE(EncodeLevels(v.data(), n, bits, coded.data()).ok()) << bits << " " << n;
      std::vector<float> back(static_cast<size_t>(n), 42.0f);
      ASSERT_TRUE(DecodeLevels(coded.data(), coded.size(), n, bits, back.data()).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(BitsOf(back[i]), BitsOf(v[i])) << "bits " << bits << " n " << n << " [" << i
                                                 << "]";
      }
      std::vector<float> generic(static_cast<size_t>(n));
      ASSERT_TRUE(DecodeAnswer(coded.data(), n, false, bits, generic.data()).ok());
      EXPECT_EQ(std::memcmp(generic.data(), back.data(), back.size() * 4), 0);
    }
  }
}

// The AVX2 kernels (where the CPU has them) index blocks of 8 values
// whose values are all in the table and hand a block with a new value to
// the hash: the bytes must be the portable loop's, wherever the new values
// first appear, and so must a decode.
TEST(LevelsTest, VectorKernelsGiveThePortableBytes) {
  std::mt19937 rng(11);
  // 8 bits: with 9 values (2bit, 4 workers: -4t..4t) and with 256 (past
  // the 16 the vector path takes).
  for (const auto& [bits, cap] : std::vector<std::pair<int, int>>{
           {1, 2}, {2, 4}, {4, 16}, {8, 9}, {8, 256}}) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 1001, 100352}) {
      // Distinct values, each first appearing at a random place (new ones
      // keep turning up in later blocks), the rest drawn from those seen.
      std::vector<float> v(static_cast<size_t>(n));
      int seen = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool fresh =
            seen == 0 || (seen < cap && rng() % (n / cap + 1) == 0);
        v[i] = fresh ? -1.5f * static_cast<float>(seen++)
                     : -1.5f * static_cast<float>(rng() % seen);
      }
      SCOPED_TRACE("bits " + std::to_string(bits) + " cap " +
                   std::to_string(cap) + " n " + std::to_string(n));
      std::vector<char> fast(LevelBytes(bits, n)), slow(fast.size());
      ASSERT_TRUE(EncodeLevels(v.data(), n, bits, fast.data()).ok());
      UsePortableKernels(true);
      ASSERT_TRUE(EncodeLevels(v.data(), n, bits, slow.data()).ok());
      std::vector<float> slow_back(static_cast<size_t>(n));
      ASSERT_TRUE(
          DecodeLevels(slow.data(), slow.size(), n, bits, slow_back.data())
              .ok());
      UsePortableKernels(false);
      EXPECT_EQ(fast, slow);
      std::vector<float> fast_back(static_cast<size_t>(n));
      ASSERT_TRUE(
          DecodeLevels(fast.data(), fast.size(), n, bits, fast_back.data())
              .ok());
      EXPECT_EQ(std::memcmp(fast_back.data(), v.data(), v.size() * 4), 0);
      EXPECT_EQ(std::memcmp(slow_back.data(), v.data(), v.size() * 4), 0);
      // One value too many, late in a long array, is refused either way.
      if (n >= 1001) {
        std::vector<float> over = v;
        for (int k = 0; k <= 1 << bits; ++k)
          over[static_cast<size_t>(n - 1 - k)] = 1000.0f + k;
        EXPECT_FALSE(EncodeLevels(over.data(), n, bits, fast.data()).ok());
        UsePortableKernels(true);
        EXPECT_FALSE(EncodeLevels(over.data(), n, bits, slow.data()).ok());
        UsePortableKernels(false);
      }
    }
  }
}

TEST(LevelsTest, TooManyValuesIsAnErrorSayingSo) {
  std::vector<float> v(17);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  std::vector<char> out(LevelBytes(4, 17));
  const Status s = EncodeLevels(v.data(), 17, 4, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("more than 16 distinct values"), std::string::npos) << s;
  // 16 fit.
  EXPECT_TRUE(EncodeLevels(v.data(), 16, 4, out.data()).ok());
  // +0 and -0 are two values.
  const std::vector<float> zeros = {0.0f, -0.0f, 1.0f};
  std::vector<char> one(LevelBytes(1, 3));
  EXPECT_FALSE(EncodeLevels(zeros.data(), 3, 1, one.data()).ok());
  const Status width = EncodeLevels(zeros.data(), 3, 3, one.data());
  ASSERT_FALSE(width.ok());
  EXPECT_NE(width.message().find("3 bits"), std::string::npos) << width;
}

TEST(LevelsTest, WrongSizeIsDataLossNamingBothCounts) {
  std::vector<char> in(LevelBytes(4, 10) + 1);
  std::vector<float> out(10);
  const Status s = DecodeLevels(in.data(), in.size(), 10, 4, out.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kDataLoss);
  EXPECT_NE(s.message().find("70 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("expected 69"), std::string::npos) << s;
  EXPECT_FALSE(DecodeLevels(in.data(), in.size(), 10, 5, out.data()).ok());
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
