// Outbox: windowed, priority-ordered send queue of one connection.
#include "transport/ps/outbox.h"

#include <glog/logging.h>

#include <algorithm>

namespace kvtrain {
namespace ps {
namespace {

// Heap order: lower priority, or equal priority and later, sinks.
bool Below(const OutMessage& a, const OutMessage& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.seq > b.seq;
}

}  // namespace

bool Outbox::Offer(OutMessage* msg) {
  msg->seq = next_seq_++;
  if (heap_.empty() && Fits(msg->bytes)) {
    Take(msg->bytes);
    return true;
  }
  heap_.push_back(std::move(*msg));
  std::push_heap(heap_.begin(), heap_.end(), Below);
  return false;
}

void Outbox::Released(int64_t bytes) {
  CHECK_GT(in_flight_messages_, 0) << "Outbox released more than it sent";
  in_flight_bytes_ -= bytes;
  --in_flight_messages_;
}

bool Outbox::HasReady() const {
  return !heap_.empty() && Fits(heap_.front().bytes);
}

bool Outbox::Next(OutMessage* out) {
  if (!HasReady()) return false;
  std::pop_heap(heap_.begin(), heap_.end(), Below);
  *out = std::move(heap_.back());
  heap_.pop_back();
  Take(out->bytes);
  return true;
}

}  // namespace ps
}  // namespace kvtrain
