// Fuzz inputs for the transport's decoders: one byte string holding several
// ZeroMQ frames, separated by kFrameSeparator (4 bytes unlikely in real
// headers). Shared by message_fuzz.cc and control_fuzz.cc.
#ifndef KVTRAIN_TRANSPORT_PS_FUZZ_FRAMES_H_
#define KVTRAIN_TRANSPORT_PS_FUZZ_FRAMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "transport/ps/ps.h"

namespace kvtrain {
namespace ps {

inline constexpr char kFrameSeparator[] = "\xF1\xF2\xF3\xF4";

// Splits `data` at every separator; frames are 8-byte aligned copies, as
// ZeroMQ hands over large frames.
inline std::vector<Blob> SplitFuzzFrames(const uint8_t* data, size_t size) {
  const std::string s(reinterpret_cast<const char*>(data), size);
  std::vector<Blob> frames;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(kFrameSeparator, start, 4);
    const size_t end = at == std::string::npos ? s.size() : at;
    frames.push_back(Blob::Copy(s.data() + start, end - start));
    if (at == std::string::npos) break;
    start = at + 4;
    if (frames.size() > 64) break;
  }
  return frames;
}

// The inverse, for writing seeds.
inline std::string JoinFuzzFrames(const std::vector<Blob>& frames) {
  std::string out;
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i > 0) out.append(kFrameSeparator, 4);
    out.append(static_cast<const char*>(frames[i].data()), frames[i].size());
  }
  return out;
}

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_FUZZ_FRAMES_H_
