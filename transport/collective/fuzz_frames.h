// Fuzz inputs for the collective transport's decoders: one byte string
// holding several messages (split at kMessageSeparator), each of several
// ZeroMQ frames (split at kFrameSeparator). Shared by mesh_fuzz.cc and
// rendezvous_fuzz.cc; the same separators as transport/ps/fuzz_frames.h.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_FUZZ_FRAMES_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_FUZZ_FRAMES_H_

#include <string_view>
#include <vector>

namespace kvtrain {
namespace collective {

inline constexpr std::string_view kFrameSeparator("\xF1\xF2\xF3\xF4", 4);
inline constexpr std::string_view kMessageSeparator("\xE1\xE2\xE3\xE4", 4);

// The pieces of `s` between separators (at most `max`; the last keeps the
// rest).
inline std::vector<std::string_view> SplitAt(std::string_view s,
                                             std::string_view sep,
                                             size_t max = 64) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at =
        out.size() + 1 < max ? s.find(sep) : std::string_view::npos;
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + sep.size());
  }
}

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_FUZZ_FRAMES_H_
