// Fuzz target: the mesh's receive path without sockets. Each message goes
// through DecodeMeshMessage (the pure decoder of what a ROUTER hands over),
// and what it accepts into an Inbox with small limits, as the receive
// thread does; some messages are then received, some collectives retired.
// Checked: the decoder only accepts what its contract says, no peer ever
// has more waiting than the limits, and the Inbox's counts match what can
// be received.
//
// Input: byte 0 picks the mesh (size 2 + bits 0-2, rank bits 3-7 mod size);
// the rest is messages joined by kMessageSeparator, each frames (routing
// id, header, body) joined by kFrameSeparator (net/fuzz_frames.h).
#include <glog/logging.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <tuple>

#include "net/fuzz_frames.h"
#include "net/lane_setup.h"
#include "transport/collective/inbox.h"
#include "transport/collective/mesh_wire.h"

namespace kvtrain {
namespace collective {
namespace {

std::unique_ptr<Payload> Copy(std::string_view s) {
  auto p = std::make_unique<Payload>();
  zmq_msg_init_size(&p->msg, s.size());
  if (!s.empty()) std::memcpy(zmq_msg_data(&p->msg), s.data(), s.size());
  return p;
}

void CheckAccepted(const Decoded& d, const WireFrames& in, int rank, int size) {
  CHECK(d.peer >= 0 && d.peer < size && d.peer != rank) << d.peer;
  CHECK_EQ(in.count, 3u);
  CHECK_EQ(in.frame[1].size(), sizeof(WireHeader));
  CHECK_LE(static_cast<uint32_t>(d.kind),
           static_cast<uint32_t>(MsgKind::kLane));
  if (d.kind == MsgKind::kLane) {
    CHECK(d.group == 0 && (d.tag == kLaneOffer || d.tag == kLaneAck));
    CHECK_EQ(in.frame[2].size(),
             d.tag == kLaneOffer ? net::kLaneOfferBytes : net::kLaneAnswerBytes);
    return;
  }
  const bool control =
      d.kind != MsgKind::kUser && d.kind != MsgKind::kCollective;
  // A bye may say why its sender left (kMaxByeReason bytes at most).
  const size_t body_limit = d.kind == MsgKind::kBye ? kMaxByeReason : 0;
  CHECK(!control || (d.group == 0 && d.tag == 0 && in.frame[2].size() <= body_limit));
  CHECK(control || d.group != 0);
}

void Run(std::string_view input) {
  const uint8_t b = static_cast<uint8_t>(input[0]);
  const int size = 2 + (b & 7);
  const int rank = (b >> 3) % size;
  InboxLimits limits;
  limits.max_messages_per_peer = 8;
  limits.max_bytes_per_peer = 4096;
  Inbox inbox(rank, size, limits);
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  inbox.OpenGroup(kWorldGroup, everyone);
  inbox.OpenGroup(2, {rank, (rank + 1) % size});
  using Key = std::tuple<int, MsgKind, uint64_t, uint64_t>;
  std::set<Key> keys;
  int i = 0;
  for (std::string_view message : net::SplitAt(input.substr(1), net::kMessageSeparator)) {
    const std::vector<std::string_view> frames =
        net::SplitAt(message, net::kFrameSeparator);
    WireFrames in;
    in.count = frames.size();
    for (size_t f = 0; f < frames.size() && f < 3; ++f) in.frame[f] = frames[f];
    const Decoded d = DecodeMeshMessage(in, rank, size);
    ++i;
    if (d.drop != Drop::kNone) {
      CHECK(!d.why.empty());
      continue;
    }
    CheckAccepted(d, in, rank, size);
    if (d.kind == MsgKind::kHeartbeat || d.kind == MsgKind::kBye) continue;
    const Drop verdict =
        inbox.Push(d.peer, d.kind, d.group, d.tag, Copy(in.frame[2]));
    if (verdict == Drop::kOverLimit) inbox.CutOff(d.peer);
    if (verdict == Drop::kNone) keys.insert({d.peer, d.kind, d.group, d.tag});
    for (int p = 0; p < size; ++p) {
      CHECK_LE(inbox.queued_messages(p), limits.max_messages_per_peer);
      CHECK_LE(inbox.queued_bytes(p), limits.max_bytes_per_peer);
    }
    if (i % 3 == 0) (void)inbox.Pop(d.peer, d.kind, d.group, d.tag);
    if (i % 4 == 0 && d.kind == MsgKind::kCollective)
      inbox.Retire(d.group, d.tag);
    if (i % 7 == 0) inbox.OpenGroup(2, {rank, d.peer});
  }
  // Everything still counted can be received, and then nothing is counted.
  for (const Key& k : keys) {
    while (inbox.Pop(std::get<0>(k), std::get<1>(k), std::get<2>(k),
                     std::get<3>(k))) {
    }
  }
  for (int p = 0; p < size; ++p) {
    CHECK_EQ(inbox.queued_messages(p), 0u) << "peer " << p;
    CHECK_EQ(inbox.queued_bytes(p), 0u) << "peer " << p;
  }
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  kvtrain::collective::Run(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
