// In-memory PeerLinks: one queue per (sender, receiver, tag).
#include "base/in_memory_peer_link.h"

#include <cstring>

namespace kvtrain {

class InMemoryPeerGroup::Link : public PeerLink {
 public:
  Link(InMemoryPeerGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  Status Send(int peer, uint64_t tag, const void* data, size_t size) override {
    return group_->Send(rank_, peer, tag, data, size);
  }
  Status Recv(int peer, uint64_t tag, void* data, size_t size,
              Duration timeout) override {
    return group_->Recv(rank_, peer, tag, data, size, timeout);
  }

 private:
  InMemoryPeerGroup* group_;
  int rank_;
};

InMemoryPeerGroup::InMemoryPeerGroup(int size) : dead_(size, false) {
  for (int r = 0; r < size; ++r) links_.push_back(std::make_unique<Link>(this, r));
}

InMemoryPeerGroup::~InMemoryPeerGroup() = default;

PeerLink* InMemoryPeerGroup::link(int rank) const { return links_[rank].get(); }

void InMemoryPeerGroup::Kill(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  dead_[rank] = true;
  cv_.notify_all();
}

size_t InMemoryPeerGroup::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [key, q] : queues_) n += q.size();
  return n;
}

Status InMemoryPeerGroup::CheckPeer(int self, int peer) const {
  if (peer < 0 || peer >= size() || peer == self) {
    return Status::InvalidArgument("rank " + std::to_string(self) +
                                   ": invalid peer rank " + std::to_string(peer) +
                                   " (group of " + std::to_string(size()) + ")");
  }
  if (dead_[peer]) {
    return Status::Unavailable("peer rank " + std::to_string(peer) + " is dead");
  }
  return Status::OK();
}

Status InMemoryPeerGroup::Send(int from, int to, uint64_t tag, const void* data,
                               size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  KV_RETURN_IF_ERROR(CheckPeer(from, to));
  queues_[Key(from, to, tag)].emplace_back(static_cast<const char*>(data), size);
  cv_.notify_all();
  return Status::OK();
}

Status InMemoryPeerGroup::Recv(int to, int from, uint64_t tag, void* data,
                               size_t size, PeerLink::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const Key key(from, to, tag);
  while (true) {
    KV_RETURN_IF_ERROR(CheckPeer(to, from));
    auto it = queues_.find(key);
    if (it != queues_.end() && !it->second.empty()) break;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      it = queues_.find(key);
      if (it != queues_.end() && !it->second.empty()) break;
      return Status::DeadlineExceeded(
          "no message from peer rank " + std::to_string(from) + " under tag " +
          std::to_string(tag) + " within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                             timeout).count()) + " ms");
    }
  }
  std::deque<std::string>& q = queues_[key];
  if (q.front().size() != size) {
    return Status::InvalidArgument(
        "message from peer rank " + std::to_string(from) + " under tag " +
        std::to_string(tag) + " has " + std::to_string(q.front().size()) +
        " bytes, expected " + std::to_string(size));
  }
  std::memcpy(data, q.front().data(), size);
  q.pop_front();
  return Status::OK();
}

}  // namespace kvtrain
