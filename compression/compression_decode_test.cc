// Tests for compression/compression.h: the none format, encoded sizes, Decode's
// checks of what arrives, and DecodeAdd against Decode then add (built
// into //compression:compression_test and its portable twin).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compression/compression.h"
#include "compression/compression_test_util.h"

namespace kvtrain {
namespace kv {

using namespace testutil;  // NOLINT: the shared test constants and checks

// ---------------------------------------------------------------- none

TEST(NoneTest, EncodesRawFloats) {
  const std::vector<float> grad = {1.0f, -0.1f, kInf, 3e38f};
  const Step got = RunStep(kNone, 0.0f, grad, nullptr);
  ASSERT_EQ(got.bytes.size(), 16u);
  std::vector<unsigned char> want(16);
  for (size_t i = 0; i < grad.size(); ++i)
    PutFloatLE(grad[i], want.data() + 4 * i);
  EXPECT_TRUE(SameBytes(got.bytes, want));
  EXPECT_TRUE(SameFloats(got.sent, grad));
}

// ---------------------------------------------------------------- sizes

TEST(CompressionTest, EncodedBytes) {
  for (int64_t n : std::vector<int64_t>{0, 1, 15, 16, 17, 31, 32, 33, 64, 65,
                                        1000, 3000000001LL}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    EXPECT_EQ(EncodedBytes(kTwoBit, n),
              static_cast<size_t>(4 + 4 * ((n + 15) / 16)));
    EXPECT_EQ(EncodedBytes(kOneBit, n),
              static_cast<size_t>(4 + 4 * ((n + 31) / 32)));
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

// ---------------------------------------------------------------- Decode
// errors

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
    const Status st = Decode(kTwoBit, reinterpret_cast<const char*>(buf.data()),
                             8, 5, out.data());
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st;
    EXPECT_TRUE(Contains(st.message(), "threshold")) << st;
  }
  for (float t :
       {0.5f, 1e-30f, std::numeric_limits<float>::denorm_min(), 1e30f}) {
    PutFloatLE(t, buf.data());
    EXPECT_TRUE(Decode(kTwoBit, reinterpret_cast<const char*>(buf.data()), 8, 5,
                       out.data())
                    .ok())
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
        std::vector<float> grad = RandomVector(&rng, n, 3.0f),
                           residual(n, 0.0f);
        grad[0] = kNaN;
        std::vector<char> buf(EncodedBytes(type, n) + 1);
        Encode(type, 1.0f, grad.data(), residual.data(), n, buf.data() + 1);
        std::vector<float> decoded(n);
        ASSERT_TRUE(
            Decode(type, buf.data() + 1, buf.size() - 1, n, decoded.data())
                .ok());
        std::vector<float> sum = RandomVector(&rng, n, 100.0f);
        sum[n - 1] = -0.0f;
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = sum[i] + decoded[i];
        ASSERT_TRUE(
            DecodeAdd(type, buf.data() + 1, buf.size() - 1, n, sum.data())
                .ok());
        EXPECT_TRUE(SameFloats(sum, want));
        const Status st =
            DecodeAdd(type, buf.data() + 1, buf.size() - 2, n, sum.data());
        EXPECT_EQ(st.code(), Status::Code::kDataLoss) << st;
      }
    }
  }
  UsePortableKernels(false);
}

}  // namespace kv
}  // namespace kvtrain
