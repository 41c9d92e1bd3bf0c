// Fuzz target: the transport's decoder of received frames (DecodeMessage),
// then what every receiver does next with a DATA message: KVPairs
// validation, slicing the values per key, the verbose description and the
// status conversion. Input: frames joined by kFrameSeparator (fuzz_frames.h).
#include <cstdint>

#include "net/fuzz_frames.h"
#include "transport/ps/message.h"

namespace kvtrain {
namespace ps {
namespace {

void UsePairs(const Message& msg) {
  KVPairs kv;
  kv.keys = msg.Frame(wire::KEYS);
  kv.vals = msg.Frame(wire::VALUES);
  kv.lens = msg.Frame(wire::LENS);
  if (!kv.Validate().ok()) return;
  // Receivers slice the values per key once the pairs validated.
  const size_t n = kv.num_keys();
  volatile uint64_t sum = 0;
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const size_t len = kv.lens.empty() ? kv.vals.size() / n
                                       : static_cast<size_t>(kv.lens.as<int64_t>()[i]);
    Blob part = kv.vals.Slice(offset, len);
    if (len > 0) sum = sum + static_cast<uint8_t>(part.data()[len - 1]) + kv.key(i);
    offset += len;
  }
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtrain::ps;  // NOLINT
  Message msg;
  std::vector<Blob> frames;  // 8-byte aligned copies, as ZeroMQ hands over large frames
  for (std::string_view f : kvtrain::net::SplitAt({reinterpret_cast<const char*>(data), size},
                                                  kvtrain::net::kFrameSeparator)) {
    frames.push_back(Blob::Copy(f.data(), f.size()));
  }
  if (!DecodeMessage(std::move(frames), &msg).ok()) return 0;
  (void)DescribeData(msg);
  (void)StatusFromWire(msg.meta.status_code(), msg.meta.status_message());
  if (msg.meta.command() == kvtrain::wire::DATA) UsePairs(msg);
  return 0;
}
