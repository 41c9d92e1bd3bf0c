// Sealed frames: AES-256-GCM records for the bulk lane between hosts.
//
// CURVE (net/curve.h) encrypts every byte with XSalsa20-Poly1305 on
// ZeroMQ's I/O thread, about 1.6 GB/s per core; AES-GCM with the CPU's AES
// and carry-less multiply instructions runs about 2.8 times as fast. A
// sender that reaches a peer over TCP with security on moves its large
// frames over a second connection (the "lane"), each frame sealed under a
// random key it gave the peer over CURVE, and tells the peer over CURVE
// which sealed frames belong to which message: CURVE still authenticates
// every peer and orders every message; the lane only carries bytes that
// open under a key no stranger has, each accepted once.
//
// A sealed frame: a 32-byte header (magic, kind, direction, its part number
// in its message, lane id, sequence number, payload size; authenticated,
// not encrypted), the
// encrypted payload, a 16-byte tag. The nonce is the direction and the
// sequence number, so one key never seals two frames with one nonce as long
// as each direction's numbers only grow, which the sender keeps and the
// opener checks.
#ifndef KVTRAIN_NET_SEAL_H_
#define KVTRAIN_NET_SEAL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvtrain {
namespace net {

inline constexpr size_t kSealKeyBytes = 32;
inline constexpr size_t kSealHeaderBytes = 32;
inline constexpr size_t kSealTagBytes = 16;

// What a sealed frame is for.
enum class SealKind : uint8_t {
  kData = 1,   // a frame of a message, more of it to follow
  kProbe = 2,  // the sender's first frame on a new lane (empty)
  kReady = 3,  // the receiver's answer to a probe (empty)
  kLast = 4,   // the last frame of a message
};
// Which way a frame goes: its half of the nonce space.
enum class SealDir : uint8_t { kToReceiver = 1, kToSender = 2 };

// The clear header of a sealed frame.
struct SealHeader {
  SealKind kind = SealKind::kData;
  SealDir dir = SealDir::kToReceiver;
  uint16_t part = 0;  // its place in its message, the first 0
  uint64_t lane = 0;
  uint64_t seq = 0;
  uint64_t size = 0;  // payload bytes
};
// The most frames one message on a lane may have (part numbers are 16-bit).
inline constexpr size_t kMaxLaneParts = 65536;

// The header of `data` if it is shaped like a sealed frame (magic, a known
// kind and direction, a size that matches), without opening it.
bool PeekSealed(const char* data, size_t size, SealHeader* header);

inline size_t SealedSize(size_t payload) {
  return kSealHeaderBytes + payload + kSealTagBytes;
}

// One key's sealing and opening. Not thread-safe: one per lane end.
class Sealer {
 public:
  // `key`: kSealKeyBytes bytes. Internal error when this libcrypto has no
  // AES-256-GCM.
  static StatusOr<std::unique_ptr<Sealer>> Create(const std::string& key);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  // Writes the sealed frame of `payload` (header.size bytes) to `out`, which
  // holds SealedSize(header.size) bytes.
  Status Seal(const SealHeader& header, const void* payload, char* out);
  // Checks the tag of the sealed frame in `frame` and decrypts its payload
  // in place (at frame + kSealHeaderBytes). InvalidArgument when the frame is
  // malformed or does not open under this key (altered, another key).
  Status Open(char* frame, size_t size, SealHeader* header);

 private:
  struct Impl;
  explicit Sealer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Little-endian 64-bit fields of the lane's messages.
inline void StoreLe64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
inline uint64_t LoadLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  return v;
}

// The lane a message's first part names, if that part is shaped like a
// sealed frame to a receiver (PeekSealed, without opening it).
bool PeekLaneId(const char* data, size_t size, uint64_t* lane);

// The receiving end of one lane: its key and the last sequence number taken.
// A message on a lane is the parts of one ZeroMQ message, each a sealed
// frame under the next sequence number and numbered from 0 in the message,
// all kData but the last, kLast (or a lone kProbe). Not thread-safe.
class LaneReader {
 public:
  LaneReader(uint64_t id, std::unique_ptr<Sealer> sealer)
      : id_(id), sealer_(std::move(sealer)) {}
  uint64_t id() const { return id_; }

  struct Part {
    char* data;
    size_t size;
  };
  // Opens the parts of one message in place. OK: each part's payload now
  // lies at data + kSealHeaderBytes (size - kSealedOverhead bytes); *probe
  // says it was a probe, and then *answer holds the sealed kReady to send
  // back; *lost counts the frames the lane skipped before it (a message
  // lost on the way). InvalidArgument naming what is wrong otherwise (not
  // sealed, another lane, played again or out of order, parts not
  // consecutive or not numbered from the first, cut, or not opening under
  // the key): drop the message; the
  // lane is as before.
  Status Open(const std::vector<Part>& parts, bool* probe, uint64_t* lost,
              std::string* answer);

 private:
  const uint64_t id_;
  std::unique_ptr<Sealer> sealer_;
  uint64_t last_seq_ = 0;
};

inline constexpr size_t kSealedOverhead = kSealHeaderBytes + kSealTagBytes;

// What opening a message that came on a lane found.
struct LaneOpened {
  uint64_t lane = 0;   // the lane it came on
  bool probe = false;  // a probe: send `answer` back on its connection
  uint64_t lost = 0;   // frames the lane skipped before it
  std::string answer;
};

// Opens a message that came on a lane (LaneReader::Open) with the reader
// of the lane its first part names (`reader_of`: null for a lane not
// offered here). InvalidArgument naming why it is dropped otherwise.
Status OpenLaneMessage(const std::vector<LaneReader::Part>& parts,
                       const std::function<LaneReader*(uint64_t)>& reader_of,
                       LaneOpened* out);

// The same over a map from lane id to entries that hold a `reader`.
template <typename Lanes>
Status OpenLaneMessage(const std::vector<LaneReader::Part>& parts, Lanes& lanes,
                       LaneOpened* out) {
  return OpenLaneMessage(
      parts,
      [&lanes](uint64_t lane) -> LaneReader* {
        auto it = lanes.find(lane);
        return it == lanes.end() ? nullptr : it->second.reader.get();
      },
      out);
}

// The sending end of one lane: a random id and key (to give the receiver
// over an authenticated channel) and the sequence numbers. Not thread-safe.
class LaneWriter {
 public:
  // A lane with a fresh random id and key; Internal error when libcrypto
  // cannot seal.
  static StatusOr<std::unique_ptr<LaneWriter>> Create();
  uint64_t id() const { return id_; }
  const std::string& key() const { return key_; }

  // The sealed probe that opens a lane.
  std::string Probe();
  // Whether `reply` (opened in place) is the receiver's answer to a probe.
  bool IsReady(char* reply, size_t size);
  // Seals frame i of a message of n frames (`size` bytes at `data`) into
  // `out` (SealedSize(size) bytes); the frames of one message in order,
  // i = 0 first.
  Status Seal(size_t i, size_t n, const void* data, size_t size, char* out);

 private:
  LaneWriter(uint64_t id, std::string key, std::unique_ptr<Sealer> sealer)
      : id_(id), key_(std::move(key)), sealer_(std::move(sealer)) {}
  const uint64_t id_;
  const std::string key_;
  std::unique_ptr<Sealer> sealer_;
  uint64_t seq_ = 0;  // the last sequence number sealed
};

// The password a lane's sending socket shows in its ZeroMQ PLAIN handshake
// (net/curve.h, BindLaneSocket): 32 hex characters derived one-way from the
// lane's key, so only the holder of a key given over CURVE can open a
// connection to a lane, and the token tells nothing of the key.
std::string LaneToken(const std::string& key);

// `n` bytes from the kernel's random source (keys, lane ids).
std::string SealRandomBytes(size_t n);

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_SEAL_H_
