// Outbox: the send queue of one connection. Messages go straight out while
// the bytes handed to the network and not yet written stay within a window;
// beyond it they wait here and leave highest priority first (FIFO among
// equal priorities), as earlier ones finish.
#ifndef KVTRAIN_TRANSPORT_PS_OUTBOX_H_
#define KVTRAIN_TRANSPORT_PS_OUTBOX_H_

#include <cstdint>
#include <vector>

#include "transport/ps/ps.h"

namespace kvtrain {
namespace ps {

struct OutMessage {
  int priority = 0;
  int64_t bytes = 0;
  std::vector<Blob> frames;
  uint64_t seq = 0;  // set by the Outbox
};

// Not thread-safe: the owning connection's mutex guards it.
class Outbox {
 public:
  explicit Outbox(int64_t window_bytes) : window_bytes_(window_bytes) {}

  // True: the caller sends *msg now (it counts as in flight). False: *msg
  // was moved into the queue.
  bool Offer(OutMessage* msg);
  // A message of `bytes` that was in flight has been written out.
  void Released(int64_t bytes);
  // Moves the next queued message into *out if the window allows it (it
  // then counts as in flight).
  bool Next(OutMessage* out);
  // A queued message could go now.
  bool HasReady() const;

  int64_t in_flight_bytes() const { return in_flight_bytes_; }
  int in_flight_messages() const { return in_flight_messages_; }
  size_t queued() const { return heap_.size(); }

 private:
  bool Fits(int64_t bytes) const {
    return in_flight_messages_ == 0 ||
           in_flight_bytes_ + bytes <= window_bytes_;
  }
  void Take(int64_t bytes) {
    in_flight_bytes_ += bytes;
    ++in_flight_messages_;
  }

  const int64_t window_bytes_;
  int64_t in_flight_bytes_ = 0;
  int in_flight_messages_ = 0;
  uint64_t next_seq_ = 0;
  std::vector<OutMessage> heap_;  // max-heap by (priority, -seq)
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_OUTBOX_H_
