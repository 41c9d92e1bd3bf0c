// Inbox: what a mesh rank has received and not yet handed out, filed by
// (kind, group, tag, peer). It knows the groups this rank is in (and who is
// in each), the collectives it has finished, and bounds what each peer may
// have waiting. Private to transport/collective.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_INBOX_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_INBOX_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "transport/collective/mesh_wire.h"
#include "net/zmq_frame.h"

namespace kvtrain {
namespace collective {

// A received payload; keeps the ZeroMQ frame alive (no copy).
using Payload = net::ZmqFrame;

struct InboxLimits {
  // Messages from one peer waiting to be received, all kinds, groups and
  // tags together. A correct peer is ahead by at most one collective's
  // pieces (a ring all-reduce's tensor bytes / piece bytes), one message per
  // broadcast it finished before this rank began it, and the user messages
  // it sent that were not received yet.
  size_t max_messages_per_peer = 65536;
  // Their bytes, each message counted as its body plus kOverheadBytes. It
  // must exceed the largest Broadcast or Send a rank may get before it asks
  // for it.
  size_t max_bytes_per_peer = size_t{8} << 30;
};

// Not thread-safe: the Mesh calls it under its lock.
class Inbox {
 public:
  // What a queued message costs besides its body (the ZeroMQ frame, the
  // queue's slot and node), for max_bytes_per_peer.
  static constexpr size_t kOverheadBytes = 256;

  Inbox(int rank, int size, const InboxLimits& limits);

  const InboxLimits& limits() const { return limits_; }

  // Accepts user and collective messages of `group` from `members` (ranks
  // of the mesh). Again for an open group: replaces its members, dropping
  // what the others sent.
  void OpenGroup(uint64_t group, const std::vector<int>& members);
  // Drops the group and what is queued for it.
  void CloseGroup(uint64_t group);
  // The collectives of `group` below `tag` are over: drops what is queued
  // for them and, from now on, what arrives for them.
  void Retire(uint64_t group, uint64_t tag);

  // Files a decoded message from `peer` (user, collective or hello), or
  // says why it is dropped. kOverLimit: it would take `peer` past a limit;
  // the caller cuts the peer off.
  Drop Push(int peer, MsgKind kind, uint64_t group, uint64_t tag,
            std::unique_ptr<Payload> body);
  // The oldest message filed under this key, or null.
  std::unique_ptr<Payload> Pop(int peer, MsgKind kind, uint64_t group,
                               uint64_t tag);
  // Drops what `peer` has queued and everything it sends from now on.
  void CutOff(int peer);

  // Counts a message dropped before it got here (the decoder's verdicts).
  void Count(Drop why) { ++dropped_[static_cast<int>(why)]; }
  int64_t dropped(Drop why) const { return dropped_[static_cast<int>(why)]; }
  size_t queued_messages(int peer) const { return peers_[peer].messages; }
  size_t queued_bytes(int peer) const { return peers_[peer].bytes; }

 private:
  using Key =
      std::tuple<uint32_t, uint64_t, uint64_t, int>;  // kind, group, tag, peer
  using Queue = std::deque<std::unique_ptr<Payload>>;
  struct PeerState {
    size_t messages = 0;
    size_t bytes = 0;  // bodies + kOverheadBytes each
    bool hello = false;
    bool cut_off = false;
  };
  struct Group {
    std::vector<bool> member;    // by rank
    uint64_t retired_below = 0;  // collective tags below this are over
  };

  // Drops every queued message of (kind, group) with tag in [from, to) (to
  // the maximum: no upper end) for which keep(peer) is false, counting them
  // as `why`.
  template <typename Keep>
  void Purge(MsgKind kind, uint64_t group, uint64_t from, uint64_t to,
             Keep keep, Drop why);
  void Forget(int peer, const Queue& q, Drop why);

  const int rank_;
  const InboxLimits limits_;
  std::map<Key, Queue> queues_;
  std::vector<PeerState> peers_;
  std::unordered_map<uint64_t, Group> groups_;
  int64_t dropped_[kDropReasons] = {};
};

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_INBOX_H_
