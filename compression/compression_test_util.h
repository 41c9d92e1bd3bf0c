// Shared by kvstore's compression tests: the type constants, non-finite
// floats, checks on error messages, float and byte comparisons, and one
// Encode/Decode step of the code under test.
#ifndef KVTRAIN_COMPRESSION_COMPRESSION_TEST_UTIL_H_
#define KVTRAIN_COMPRESSION_COMPRESSION_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compression/compression.h"

namespace kvtrain {
namespace kv {
namespace testutil {

inline constexpr CompressionType kNone = proto::GradientCompression::NONE;
inline constexpr CompressionType kTwoBit = proto::GradientCompression::TWO_BIT;
inline constexpr CompressionType kOneBit = proto::GradientCompression::ONE_BIT;
inline constexpr CompressionType kFp16 = proto::GradientCompression::FP16;

inline const float kNaN = std::numeric_limits<float>::quiet_NaN();
inline const float kInf = std::numeric_limits<float>::infinity();

// Whether `msg` contains the decimal number `v` as a whole token (no digit
// right before or after it).
inline bool ContainsNumber(const std::string& msg, size_t v) {
  const std::string s = std::to_string(v);
  for (size_t pos = msg.find(s); pos != std::string::npos; pos = msg.find(s, pos + 1)) {
    const bool digit_before = pos > 0 && std::isdigit(static_cast<unsigned char>(msg[pos - 1]));
    const size_t after = pos + s.size();
    const bool digit_after =
        after < msg.size() && std::isdigit(static_cast<unsigned char>(msg[after]));
    if (!digit_before && !digit_after) return true;
  }
  return false;
}

inline bool Contains(const std::string& msg, const std::string& part) {
  return msg.find(part) != std::string::npos;
}

inline uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FloatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Little-endian bytes of a float, as the headers are written on the wire.
inline void PutFloatLE(float f, unsigned char* out) {
  const uint32_t u = BitsOf(f);
  for (int b = 0; b < 4; ++b) out[b] = static_cast<unsigned char>(u >> (8 * b));
}

// A float from its little-endian bytes.
inline float GetFloatLE(const unsigned char* in) {
  return FloatOf(uint32_t{in[0]} | uint32_t{in[1]} << 8 |
                 uint32_t{in[2]} << 16 | uint32_t{in[3]} << 24);
}

// Same value: equal bits, or both NaN (any payload).
inline bool SameFloat(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return BitsOf(a) == BitsOf(b);
}

inline ::testing::AssertionResult SameFloats(const std::vector<float>& got,
                                             const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!SameFloat(got[i], want[i])) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult SameBytes(
    const std::vector<unsigned char>& got,
    const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << "size " << got.size() << ", want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return ::testing::AssertionFailure()
             << "byte " << i << ": got 0x" << std::hex << int{got[i]}
             << ", want 0x" << int{want[i]};
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

// The code under test for one step: Encode (checking it writes exactly
// EncodedBytes bytes), then Decode (checking it writes exactly n floats).
// `residual` is updated in place.
inline Step RunStep(CompressionType type, float t,
                    const std::vector<float>& grad,
                    std::vector<float>* residual) {
  const int64_t n = static_cast<int64_t>(grad.size());
  const size_t bytes = EncodedBytes(type, n);
  const unsigned char kGuard = 0xA5;
  std::vector<char> buf(bytes + 16, static_cast<char>(kGuard));
  Encode(type, t, grad.data(), residual ? residual->data() : nullptr, n,
         buf.data());
  for (size_t i = bytes; i < buf.size(); ++i) {
    EXPECT_EQ(static_cast<unsigned char>(buf[i]), kGuard)
        << "Encode wrote past byte " << bytes;
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

inline std::vector<float> RandomVector(std::mt19937* rng, size_t n,
                                       float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

}  // namespace testutil
}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_COMPRESSION_COMPRESSION_TEST_UTIL_H_
