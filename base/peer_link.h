// PeerLink: point-to-point messages between the ranks of one group of
// processes. The executor's Send/Recv operators (model parallelism across
// processes) talk through it; kvstore's collective communicator implements it
// over ZeroMQ, and tests implement it in memory. It lives in base/ so that
// engine/ and ops/ need not depend on kvstore/.
#ifndef KVTRAIN_BASE_PEER_LINK_H_
#define KVTRAIN_BASE_PEER_LINK_H_

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace kvtrain {

// Thread-safe: Send and Recv may be called from several threads at once.
// Messages between one (sender, receiver, tag) triple arrive in send order;
// different tags are independent, so a Recv on one tag never consumes a
// message of another.
class PeerLink {
 public:
  using Duration = std::chrono::steady_clock::duration;

  virtual ~PeerLink() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Queues `size` bytes for `peer` under `tag`. The bytes are copied or sent
  // before this returns, so the caller may reuse `data` at once. An invalid
  // peer (out of range or self) or a dead peer is an error naming it.
  virtual Status Send(int peer, uint64_t tag, const void* data,
                      size_t size) = 0;

  // Waits for the next message from `peer` under `tag` and copies it into
  // `data`. A message whose size differs from `size` is an error naming the
  // peer, the tag and both sizes; no message within `timeout`, or the peer
  // dying, is an error naming the peer.
  virtual Status Recv(int peer, uint64_t tag, void* data, size_t size,
                      Duration timeout) = 0;
};

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_PEER_LINK_H_
