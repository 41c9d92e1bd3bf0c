// Steady time that tests can drive. Code that measures or waits out time
// (rate limiters, progress, deadlines) takes a `const Clock*`, by default
// Clock::Real(); a test passes a FakeClock and advances it, so that what
// follows from time passing is checked without sleeping and holds on a
// slow machine as on a fast one.
#ifndef KVTRAIN_BASE_CLOCK_H_
#define KVTRAIN_BASE_CLOCK_H_

#include <atomic>
#include <chrono>

namespace kvtrain {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // std::chrono::steady_clock; lives for the whole program.
  static const Clock* Real();
};

// Stands still until advanced. Thread-safe.
class FakeClock : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(std::chrono::nanoseconds(ns_.load())); }
  void Advance(std::chrono::nanoseconds d) { ns_ += d.count(); }

 private:
  // Not at the epoch: code may subtract intervals from Now().
  std::atomic<int64_t> ns_{int64_t{1} << 40};
};

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_CLOCK_H_
