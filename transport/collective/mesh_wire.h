// The mesh's wire form: the address a rank advertises (Endpoint), the
// message header, and the decoder: a pure function from the frames a ROUTER
// hands over (routing id, header, body) to a message attributed to the
// connection it came on, or the reason to drop it. Private to
// transport/collective; mesh_fuzz drives the decoder.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_MESH_WIRE_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_MESH_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvtrain {
namespace collective {

struct Endpoint {
  std::string host;
  int port = 0;
  // Same-host shortcut: the abstract socket the rank also listens on,
  // "<host identity>@<name>" (net/same_host.h; empty: TCP only). A
  // peer on the same host connects there instead of over TCP.
  std::string same_host;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  // "host:port" or "host:port@<host identity>@<name>" (one token).
  std::string Encode() const;
  static bool Decode(const std::string& text, Endpoint* out);
};

// What a message is for; queues of different kinds never mix.
enum class MsgKind : uint32_t {
  kUser = 0,        // PeerLink::Send/Recv
  kCollective = 1,  // all-reduce, broadcast, barrier, split
  kHello = 2,       // connection handshake
  kHeartbeat = 3,
  kBye = 4,   // the sender is leaving; body: why, if it failed (kMaxByeReason)
  kLane = 5,  // sealed-lane setup (mesh_lane.cc): tag kLaneOffer or kLaneAck
};

// kLane's tags: an offer and its answer (net/lane_setup.h: the lane id and
// key the sender will seal with; the lane id and the receiver's lane port).
// A bye's body at most: the failure that made its sender leave, if any.
inline constexpr size_t kMaxByeReason = 1024;
inline constexpr uint64_t kLaneOffer = 1;
inline constexpr uint64_t kLaneAck = 2;

// Every message is two frames: this header and the body (empty for hello,
// heartbeat and bye). Each rank's DEALER carries its rank as routing id
// (4 bytes, native order), so the receiving ROUTER knows the connection's
// rank; `sender` must repeat it, and `recipient` must be the receiving
// rank: a connection redirected to another rank of the job (which holds
// the same key) delivers nothing there.
struct WireHeader {
  uint32_t kind;
  int32_t sender;
  uint64_t group;  // 0 for hello, heartbeat and bye
  uint64_t tag;    // 0 for hello, heartbeat and bye
  int32_t recipient;
  uint32_t reserved;  // 0
};
static_assert(sizeof(WireHeader) == 32, "wire header is 32 bytes");

// The group id of a whole mesh (every rank; Split derives the others).
constexpr uint64_t kWorldGroup = 1;

// Why a received message was dropped. kNone: it was not.
enum class Drop : int {
  kNone = 0,
  kUnknownConnection,  // its routing id is no other rank's
  kMalformed,          // frame count, header size, kind, or control fields
  kForgedSender,       // the header names another rank than the connection's
  kUnknownGroup,       // a group this rank is not in (or the sender is not)
  kStaleTag,           // a collective this rank has finished
  kDuplicateHello,     // a second hello on a connection
  kCutOff,             // the peer went over its queue limit before
  kOverLimit,          // this message put the peer over its queue limit
  kMisdirected,        // the header names another rank as its recipient
};
constexpr int kDropReasons = 10;
// "forged sender" etc., for logs and tests.
const char* DropName(Drop d);
// "user", "collective", "hello", "heartbeat", "bye".
const char* KindName(MsgKind k);

// What the receive loop saw of one message: its first three frames (views
// into them) and how many frames it had in all.
struct WireFrames {
  std::string_view frame[3];  // routing id, header, body (joined)
  // Frames received, counting a body in pieces as one (at most 3).
  size_t count = 0;
  // The ZeroMQ frames the body came in (0: none; a body above
  // net::kMaxFramePayloadBytes comes in several, every one but the last
  // exactly that long) and whether they were so.
  size_t body_pieces = 1;
  bool pieces_well_formed = true;
};

struct Decoded {
  Drop drop = Drop::kNone;
  std::string why;  // set when drop != kNone
  // The connection's rank, -1 if it is no rank's (set whenever known, also
  // for a message that is dropped, so the log can name it).
  int peer = -1;
  MsgKind kind = MsgKind::kUser;
  uint64_t group = 0;
  uint64_t tag = 0;
};

// Decodes what rank `rank` of a mesh of `size` received. Pure: no state,
// any bytes are safe. What it accepts has exactly 3 frames, a known
// connection, a 32-byte header whose sender is that connection's rank, a
// known kind, `rank` as recipient, and for hello/heartbeat/bye group 0,
// tag 0 and an empty body.
Decoded DecodeMeshMessage(const WireFrames& in, int rank, int size);

// The routing id a rank's connections carry.
std::string RankRoutingId(int rank);
// A routing id as printable text: "rank 3" for a rank's, else hex.
std::string DescribeRoutingId(std::string_view id);

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_MESH_WIRE_H_
