// The mesh's wire form: Endpoint's text, the message decoder.
#include "transport/collective/mesh_wire.h"

#include <cstdlib>
#include <cstring>

#include "net/lane_setup.h"
#include "net/pieces.h"

namespace kvtrain {
namespace collective {

namespace {

bool Token(const std::string& s) {
  return !s.empty() && s.find_first_of(" \t\n@") == std::string::npos;
}

}  // namespace

std::string Endpoint::Encode() const {
  std::string out = ToString();
  if (Token(same_host.substr(same_host.find('@') + 1)) &&
      same_host.find('@') != std::string::npos && same_host.find('@') > 0) {
    out += "@" + same_host;
  }
  return out;
}

bool Endpoint::Decode(const std::string& text, Endpoint* out) {
  const size_t at = text.find('@');
  const std::string addr = text.substr(0, at);
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *out = Endpoint();
  out->host = addr.substr(0, colon);
  char* end = nullptr;
  const long port = std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) return false;
  out->port = static_cast<int>(port);
  if (at == std::string::npos) return true;
  const size_t at2 = text.find('@', at + 1);
  if (at2 == std::string::npos || at2 == at + 1) return false;
  out->same_host = text.substr(at + 1);
  return Token(text.substr(at2 + 1)) &&
         text.find_first_of(" \t\n") == std::string::npos;
}

const char* DropName(Drop d) {
  switch (d) {
    case Drop::kNone:
      return "not dropped";
    case Drop::kUnknownConnection:
      return "unknown connection";
    case Drop::kMalformed:
      return "malformed";
    case Drop::kForgedSender:
      return "forged sender";
    case Drop::kUnknownGroup:
      return "unknown group";
    case Drop::kStaleTag:
      return "stale tag";
    case Drop::kDuplicateHello:
      return "duplicate hello";
    case Drop::kMisdirected:
      return "misdirected";
    case Drop::kCutOff:
      return "peer cut off";
    case Drop::kOverLimit:
      return "over the queue limit";
  }
  return "?";
}

const char* KindName(MsgKind k) {
  switch (k) {
    case MsgKind::kUser:
      return "user";
    case MsgKind::kCollective:
      return "collective";
    case MsgKind::kHello:
      return "hello";
    case MsgKind::kHeartbeat:
      return "heartbeat";
    case MsgKind::kBye:
      return "bye";
    case MsgKind::kLane:
      return "sealed-lane setup";
  }
  return "unknown";
}

std::string RankRoutingId(int rank) {
  const int32_t id = rank;
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

std::string DescribeRoutingId(std::string_view id) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "0x";
  for (size_t i = 0; i < id.size() && i < 32; ++i) {
    const unsigned char c = static_cast<unsigned char>(id[i]);
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  if (id.size() > 32) out += "...";
  return id.empty() ? "(empty)" : out;
}

namespace {

Decoded Dropped(Decoded d, Drop why, std::string text) {
  d.drop = why;
  d.why = std::move(text);
  return d;
}

}  // namespace

Decoded DecodeMeshMessage(const WireFrames& in, int rank, int size) {
  Decoded d;
  const std::string_view id = in.count > 0 ? in.frame[0] : std::string_view();
  int32_t conn = -1;
  if (id.size() == sizeof(conn)) std::memcpy(&conn, id.data(), sizeof(conn));
  if (conn < 0 || conn >= size || conn == rank) {
    return Dropped(d, Drop::kUnknownConnection,
                   "its routing id is no other rank's");
  }
  d.peer = conn;
  if (in.count != 3) {
    const size_t n = in.count > 0 ? in.count - 1 : 0;
    return Dropped(d, Drop::kMalformed,
                   std::to_string(n) + (n == 1 ? " frame" : " frames") +
                       ", expected 2 (header and body)");
  }
  if (!in.pieces_well_formed) {
    return Dropped(d, Drop::kMalformed,
                   "a body in " + std::to_string(in.body_pieces) + " frames that are not " +
                       std::to_string(net::kPieceBytes) + " bytes each but the last");
  }
  if (in.frame[1].size() != sizeof(WireHeader)) {
    return Dropped(d, Drop::kMalformed,
                   "a header of " + std::to_string(in.frame[1].size()) +
                       " bytes, expected " +
                       std::to_string(sizeof(WireHeader)));
  }
  WireHeader h;
  std::memcpy(&h, in.frame[1].data(), sizeof(h));
  if (h.sender != conn) {
    return Dropped(
        d, Drop::kForgedSender,
        "its header says it is from rank " + std::to_string(h.sender));
  }
  if (h.kind > static_cast<uint32_t>(MsgKind::kLane)) {
    return Dropped(d, Drop::kMalformed,
                   "unknown kind " + std::to_string(h.kind));
  }
  if (h.recipient != rank || h.reserved != 0) {
    return Dropped(d, Drop::kMisdirected,
                   "its header addresses it to rank " +
                       std::to_string(h.recipient) + ", not to rank " +
                       std::to_string(rank));
  }
  d.kind = static_cast<MsgKind>(h.kind);
  d.group = h.group;
  d.tag = h.tag;
  if (d.kind == MsgKind::kLane) {
    const size_t want = h.tag == kLaneOffer ? net::kLaneOfferBytes : net::kLaneAnswerBytes;
    if (h.group != 0 || (h.tag != kLaneOffer && h.tag != kLaneAck) ||
        in.frame[2].size() != want) {
      return Dropped(d, Drop::kMalformed,
                     "a sealed-lane setup with group " +
                         std::to_string(h.group) + ", tag " +
                         std::to_string(h.tag) + " and " +
                         std::to_string(in.frame[2].size()) + " bytes");
    }
    return d;
  }
  const bool control = d.kind == MsgKind::kHello ||
                       d.kind == MsgKind::kHeartbeat || d.kind == MsgKind::kBye;
  const size_t body_limit = d.kind == MsgKind::kBye ? kMaxByeReason : 0;
  if (control && (h.group != 0 || h.tag != 0 || in.frame[2].size() > body_limit)) {
    return Dropped(d, Drop::kMalformed,
                   "a hello, heartbeat or bye with group " +
                       std::to_string(h.group) + ", tag " +
                       std::to_string(h.tag) + " and " +
                       std::to_string(in.frame[2].size()) +
                       " bytes (expected 0, 0 and 0; a bye's reason up to " +
                       std::to_string(kMaxByeReason) + ")");
  }
  if (!control && h.group == 0) {
    return Dropped(d, Drop::kUnknownGroup,
                   "group 0 is for hello, heartbeat and bye");
  }
  return d;
}

}  // namespace collective
}  // namespace kvtrain
