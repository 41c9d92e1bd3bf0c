// Shared by kvstore's compression tests: the type constants, non-finite
// floats and checks on error messages.
#ifndef KVTRAIN_KVSTORE_COMPRESSION_TEST_UTIL_H_
#define KVTRAIN_KVSTORE_COMPRESSION_TEST_UTIL_H_

#include <cctype>
#include <limits>
#include <string>

#include "kvstore/compression.h"

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

}  // namespace testutil
}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_COMPRESSION_TEST_UTIL_H_
