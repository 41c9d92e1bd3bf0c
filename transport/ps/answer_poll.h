// AnswerPoll: whether a worker's Wait for a small request polls for the
// answer before it sleeps, and for how long.
//
// A small request's answer (at most 64 KB each way) is usually one round
// trip, ~100 us, away. Sleeping on a condition variable puts a thread
// wake-up (tens of microseconds on a VM) between the answer's arrival and
// the waiter; polling for up to `spin_us` (yielding the CPU between looks)
// does not. ps_bench measures it: 1 KB push+pull round trips take 1.24-1.41x
// as long with KVTRAIN_WAIT_SPIN_US=0. When answers keep outlasting the poll
// (the CPUs are oversubscribed, or the servers are slow), polling only takes
// CPU from them: after each miss the next polls are skipped for twice as
// many small waits as before, plus one (up to 63), and one hit resets that.
// Large requests poll only when the whole job is on one host: their frames
// then travel through shared memory, a copy by the receiving thread, and
// the poll spares the waiter a wake-up after a round trip of a few hundred
// microseconds; between hosts their transfer (and CURVE) needs the CPU.
#ifndef KVTRAIN_TRANSPORT_PS_ANSWER_POLL_H_
#define KVTRAIN_TRANSPORT_PS_ANSWER_POLL_H_

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>

namespace kvtrain {
namespace ps {

// KVTRAIN_WAIT_SPIN_US's default, and its default when every node of the
// job is on one host (where large requests poll too: their round trip,
// a few hundred microseconds on one host, outlasts the shorter poll).
inline constexpr int kWaitSpinUs = 200;
inline constexpr int kWaitSpinUsOneHost = 1000;

// The poll of a worker's Wait: `set` (KVTRAIN_WAIT_SPIN_US or
// PostofficeOptions::wait_spin_us), else the default for where the job is.
inline int WaitSpinUs(std::optional<int> set, bool one_host) {
  if (set) return *set;
  return one_host ? kWaitSpinUsOneHost : kWaitSpinUs;
}

// Not thread-safe: the owner guards it (KVWorker holds it under its mutex).
class AnswerPoll {
 public:
  // spin_us: the longest poll (KVTRAIN_WAIT_SPIN_US; 0: never poll).
  explicit AnswerPoll(int spin_us) : spin_us_(std::max(0, spin_us)) {}

  // Microseconds the next small wait polls for; 0: sleep at once. A call
  // that returns > 0 must be followed by Polled.
  int Next() {
    if (spin_us_ == 0) return 0;
    if (skip_ > 0) {
      --skip_;
      return 0;
    }
    return spin_us_;
  }
  // Whether the poll that Next granted found the answer.
  void Polled(bool answered) {
    misses_ = answered ? 0 : std::min(misses_ + 1, kMaxMisses);
    skip_ = answered ? 0 : (1 << misses_) - 1;
  }

 private:
  static constexpr int kMaxMisses = 6;  // skip at most 63 waits
  const int spin_us_;
  int misses_ = 0;
  int skip_ = 0;
};

// Polls for up to `us` microseconds until ready() holds, yielding the CPU
// between looks; ready() is evaluated under *lock, and only when `finished`
// (a count of completed requests, bumped with release order) moved. Called
// and returns with *lock held. Returns whether ready() held.
template <typename Ready>
bool PollForAnswer(std::unique_lock<std::mutex>* lock,
                   const std::atomic<uint64_t>& finished, int us, Ready ready) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  uint64_t seen = finished.load(std::memory_order_acquire);
  lock->unlock();
  for (;;) {
    const uint64_t now_seen = finished.load(std::memory_order_acquire);
    if (now_seen != seen) {
      seen = now_seen;
      lock->lock();
      if (ready()) return true;
      lock->unlock();
    }
    if (std::chrono::steady_clock::now() >= end) {
      lock->lock();
      return ready();
    }
    sched_yield();
  }
}

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_ANSWER_POLL_H_
