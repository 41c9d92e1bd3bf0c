// What a key range's primary does for its copies, dense keys and row-sparse
// tables alike (kvstore/server.cc and sparse/server.cc): passing an update
// on and going on once every copy took it, and recognising a worker's push
// sent again after a failover.
#ifndef KVTRAIN_KVSTORE_SPARSE_REPLICA_H_
#define KVTRAIN_KVSTORE_SPARSE_REPLICA_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "transport/ps/ps.h"

namespace kvtrain {
namespace replica {

// Sends an update of `key` to the range's other copies and calls `done`
// (from another thread) once they all applied it; false when it sent
// nothing (not the primary, or no live copy).
using Forwarder = std::function<bool(
    uint64_t key, std::string body, ps::Blob vals, std::function<void()> done)>;

// forward(...), with `then` run once under *mu after every copy took the
// update: from the thread of the copies' last answer, or from this call
// (whose caller holds *mu) if they answered before forward returned.
// False, and `then` never runs, when nothing was sent.
inline bool ForwardThen(const Forwarder& forward, std::mutex* mu, uint64_t key,
                        std::string body, ps::Blob vals,
                        std::function<void()> then) {
  enum { kSending, kAnsweredEarly, kSent };
  auto state = std::make_shared<std::atomic<int>>(kSending);
  auto run = std::make_shared<std::function<void()>>(std::move(then));
  const bool sent =
      forward(key, std::move(body), std::move(vals), [mu, state, run] {
        if (state->exchange(kAnsweredEarly) == kSending) return;
        std::lock_guard<std::mutex> lock(*mu);
        (*run)();
      });
  if (sent && state->exchange(kSent) == kAnsweredEarly) (*run)();
  return sent;
}

// By worker rank, the steps of its last pushes of one key applied (async
// stores): a push sent again is recognised among them.
using AppliedSteps = std::vector<std::set<int64_t>>;

// The steps of each worker's last pushes a key remembers.
inline constexpr size_t kRememberedPushes = 64;

inline bool Applied(const AppliedSteps& applied, int rank, int64_t step) {
  if (applied.empty()) return false;
  const std::set<int64_t>& a = applied[static_cast<size_t>(rank)];
  return a.count(step) > 0 || (!a.empty() && step < *a.begin());
}

inline void Remember(AppliedSteps* applied, int num_workers, int rank,
                     int64_t step) {
  if (applied->empty()) applied->resize(static_cast<size_t>(num_workers));
  std::set<int64_t>& a = (*applied)[static_cast<size_t>(rank)];
  a.insert(step);
  // A worker's pushes of one key overtake each other by a few at most.
  while (a.size() > kRememberedPushes) a.erase(a.begin());
}

}  // namespace replica
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SPARSE_REPLICA_H_
