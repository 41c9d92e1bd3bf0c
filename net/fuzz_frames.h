// Fuzz inputs for both transports' decoders: one byte string holding
// several messages (split at kMessageSeparator), each of several ZeroMQ
// frames (split at kFrameSeparator), 4 bytes unlikely in real headers. The
// fuzz targets split their input with SplitAt; tools/make_fuzz_seeds joins
// seeds with JoinAt.
#ifndef KVTRAIN_NET_FUZZ_FRAMES_H_
#define KVTRAIN_NET_FUZZ_FRAMES_H_

#include <string>
#include <string_view>
#include <vector>

namespace kvtrain {
namespace net {

inline constexpr std::string_view kFrameSeparator("\xF1\xF2\xF3\xF4", 4);
inline constexpr std::string_view kMessageSeparator("\xE1\xE2\xE3\xE4", 4);

// The pieces of `s` between separators (at most `max`; the last keeps the
// rest).
inline std::vector<std::string_view> SplitAt(std::string_view s, std::string_view sep,
                                             size_t max = 64) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at = out.size() + 1 < max ? s.find(sep) : std::string_view::npos;
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + sep.size());
  }
}

// The inverse, for writing seeds.
inline std::string JoinAt(const std::vector<std::string_view>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_FUZZ_FRAMES_H_
