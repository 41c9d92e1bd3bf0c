// In-memory PeerLinks for tests: the ranks of one group live in one process
// (typically one thread each) and exchange messages through a shared hub.
//   InMemoryPeerGroup group(2);
//   PeerLink* rank0 = group.link(0);  // hand each to its thread
#ifndef KVTRAIN_BASE_IN_MEMORY_PEER_LINK_H_
#define KVTRAIN_BASE_IN_MEMORY_PEER_LINK_H_

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "base/peer_link.h"
#include "base/thread_annotations.h"

namespace kvtrain {

// Thread-safe. Owns the links; they live as long as the group.
class InMemoryPeerGroup {
 public:
  explicit InMemoryPeerGroup(int size);
  ~InMemoryPeerGroup();

  PeerLink* link(int rank) const;
  int size() const { return static_cast<int>(links_.size()); }
  // Marks `rank` dead: its peers' Send/Recv to it fail naming it.
  void Kill(int rank);
  // Messages sent but not yet received (to check that nothing is left over).
  size_t pending() const;

 private:
  class Link;
  // (from, to, tag)
  using Key = std::tuple<int, int, uint64_t>;

  Status Send(int from, int to, uint64_t tag, const void* data, size_t size);
  Status Recv(int to, int from, uint64_t tag, void* data, size_t size,
              PeerLink::Duration timeout);
  Status CheckPeer(int self, int peer) const REQUIRES(mu_);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<std::string>> queues_ GUARDED_BY(mu_);
  std::vector<bool> dead_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Link>> links_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_IN_MEMORY_PEER_LINK_H_
