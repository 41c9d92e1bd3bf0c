// Inbox: bounded queues of received messages, by group, tag and peer.
#include "transport/collective/inbox.h"

#include <algorithm>
#include <climits>
#include <limits>

namespace kvtrain {
namespace collective {

Inbox::Inbox(int rank, int size, const InboxLimits& limits)
    : rank_(rank), limits_(limits), peers_(size) {}

void Inbox::OpenGroup(uint64_t group, const std::vector<int>& members) {
  Group& g = groups_[group];
  g.member.assign(peers_.size(), false);
  for (int m : members) {
    if (m >= 0 && m < static_cast<int>(peers_.size())) g.member[m] = true;
  }
  const auto keep = [&g](int peer) {
    return static_cast<bool>(g.member[peer]);
  };
  const uint64_t all = std::numeric_limits<uint64_t>::max();
  Purge(MsgKind::kUser, group, 0, all, keep, Drop::kUnknownGroup);
  Purge(MsgKind::kCollective, group, 0, all, keep, Drop::kUnknownGroup);
}

void Inbox::CloseGroup(uint64_t group) {
  if (groups_.erase(group) == 0) return;
  const auto none = [](int) { return false; };
  const uint64_t all = std::numeric_limits<uint64_t>::max();
  Purge(MsgKind::kUser, group, 0, all, none, Drop::kUnknownGroup);
  Purge(MsgKind::kCollective, group, 0, all, none, Drop::kUnknownGroup);
}

void Inbox::Retire(uint64_t group, uint64_t tag) {
  auto it = groups_.find(group);
  if (it == groups_.end() || tag <= it->second.retired_below) return;
  Purge(
      MsgKind::kCollective, group, it->second.retired_below, tag,
      [](int) { return false; }, Drop::kStaleTag);
  it->second.retired_below = tag;
}

template <typename Keep>
void Inbox::Purge(MsgKind kind, uint64_t group, uint64_t from, uint64_t to,
                  Keep keep, Drop why) {
  const uint32_t k = static_cast<uint32_t>(kind);
  auto it = queues_.lower_bound(Key{k, group, from, INT_MIN});
  while (it != queues_.end() && std::get<0>(it->first) == k &&
         std::get<1>(it->first) == group &&
         (to == std::numeric_limits<uint64_t>::max() ||
          std::get<2>(it->first) < to)) {
    const int peer = std::get<3>(it->first);
    if (keep(peer)) {
      ++it;
      continue;
    }
    Forget(peer, it->second, why);
    it = queues_.erase(it);
  }
}

void Inbox::Forget(int peer, const Queue& q, Drop why) {
  PeerState& p = peers_[peer];
  for (const auto& body : q) {
    p.messages -= 1;
    p.bytes -= body->size() + kOverheadBytes;
  }
  dropped_[static_cast<int>(why)] += static_cast<int64_t>(q.size());
}

Drop Inbox::Push(int peer, MsgKind kind, uint64_t group, uint64_t tag,
                 std::unique_ptr<Payload> body) {
  const Drop verdict = [&] {
    if (peer < 0 || peer >= static_cast<int>(peers_.size()) || peer == rank_) {
      return Drop::kUnknownConnection;
    }
    PeerState& p = peers_[peer];
    if (p.cut_off) return Drop::kCutOff;
    if (kind == MsgKind::kHello) {
      if (group != 0 || tag != 0) return Drop::kMalformed;
      if (p.hello) return Drop::kDuplicateHello;
    } else if (kind == MsgKind::kLane) {
      if (group != 0) return Drop::kMalformed;
    } else if (kind == MsgKind::kUser || kind == MsgKind::kCollective) {
      auto g = groups_.find(group);
      if (g == groups_.end() || !g->second.member[peer])
        return Drop::kUnknownGroup;
      if (kind == MsgKind::kCollective && tag < g->second.retired_below) {
        return Drop::kStaleTag;
      }
    } else {
      return Drop::kMalformed;  // heartbeats and byes are never queued
    }
    const size_t bytes = body->size() + kOverheadBytes;
    if (p.messages + 1 > limits_.max_messages_per_peer ||
        p.bytes + bytes > limits_.max_bytes_per_peer) {
      return Drop::kOverLimit;
    }
    return Drop::kNone;
  }();
  if (verdict != Drop::kNone) {
    ++dropped_[static_cast<int>(verdict)];
    return verdict;
  }
  PeerState& p = peers_[peer];
  if (kind == MsgKind::kHello) p.hello = true;
  p.messages += 1;
  p.bytes += body->size() + kOverheadBytes;
  queues_[Key{static_cast<uint32_t>(kind), group, tag, peer}].push_back(
      std::move(body));
  return Drop::kNone;
}

std::unique_ptr<Payload> Inbox::Pop(int peer, MsgKind kind, uint64_t group,
                                    uint64_t tag) {
  auto it = queues_.find(Key{static_cast<uint32_t>(kind), group, tag, peer});
  if (it == queues_.end()) return nullptr;
  std::unique_ptr<Payload> body = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues_.erase(it);
  PeerState& p = peers_[peer];
  p.messages -= 1;
  p.bytes -= body->size() + kOverheadBytes;
  return body;
}

void Inbox::CutOff(int peer) {
  if (peer < 0 || peer >= static_cast<int>(peers_.size())) return;
  peers_[peer].cut_off = true;
  for (auto it = queues_.begin(); it != queues_.end();) {
    if (std::get<3>(it->first) != peer) {
      ++it;
      continue;
    }
    Forget(peer, it->second, Drop::kCutOff);
    it = queues_.erase(it);
  }
}

}  // namespace collective
}  // namespace kvtrain
