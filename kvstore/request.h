// What a dense push, pull or push-pull says about each of its keys. A
// request is one message per server carrying that server's keys (a single
// key is the degenerate case); beside the keys travel one KeyRecord each
// (ps::KVPairs::attrs), cut with them by the transport, so a server reads
// only its own keys' records. What holds for the whole request (the mode,
// the staleness bound) is its proto::RequestInfo.
#ifndef KVTRAIN_KVSTORE_REQUEST_H_
#define KVTRAIN_KVSTORE_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "transport/ps/ps.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace kv {

// 16 bytes on the wire, little-endian (as keys and values are).
struct KeyRecord {
  // Push: the sender's push count for the key, this push included (1,
  // 2, ...). Pull: the push count whose update the answer must include.
  int64_t step = 0;
  // Push: how the values are encoded (proto::GradientCompression::Type;
  // NONE: float32).
  uint8_t compression = 0;
  // Answer as IEEE halves (fp16).
  uint8_t half = 0;
  // Answer the step's sum as levels of this many bits (1, 2, 4 or 8;
  // dist_sync without an optimizer on the servers); 0: as `half` says.
  uint8_t level_bits = 0;
  uint8_t unused[5] = {};

  proto::GradientCompression::Type type() const {
    return static_cast<proto::GradientCompression::Type>(compression);
  }
  // Bytes of the answer for `n` values.
  size_t AnswerBytes(int64_t n) const;
  // Neither encoded nor answered coded: the answer has the push's size.
  bool plain() const { return compression == 0 && half == 0 && level_bits == 0; }
};
static_assert(sizeof(KeyRecord) == 16, "KeyRecord is a 16-byte wire record");

// The records as the transport carries them.
ps::Blob EncodeKeyRecords(const std::vector<KeyRecord>& records);
// The records of a request's `n` keys, checked: one each, a known encoding,
// level bits of 1, 2, 4 or 8. Errors name the sender and the server key.
StatusOr<std::vector<KeyRecord>> DecodeKeyRecords(const ps::KVPairs& data, size_t n,
                                                  const std::string& sender);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_REQUEST_H_
