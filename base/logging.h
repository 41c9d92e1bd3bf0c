// Logging is glog. This adds a rate limiter for lines that the outside world
// can trigger at will (malformed messages, rogue peers), so a flood of bad
// input cannot flood the log.
#ifndef KVTRAIN_BASE_LOGGING_H_
#define KVTRAIN_BASE_LOGGING_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include <glog/logging.h>

#include "base/clock.h"
#include "base/thread_annotations.h"

namespace kvtrain {

// Lets at most `burst` events through per `interval` of `clock`'s time.
// Thread-safe.
class LogRateLimiter {
 public:
  explicit LogRateLimiter(int burst = 5,
                          std::chrono::milliseconds interval = std::chrono::seconds(10),
                          const Clock* clock = Clock::Real());

  // True if this event may be logged. When true, *suppressed (if not null)
  // receives how many events were refused since the last one let through.
  bool Allow(int64_t* suppressed = nullptr) EXCLUDES(mu_);

 private:
  const int burst_;
  const std::chrono::milliseconds interval_;
  const Clock* const clock_;
  std::mutex mu_;
  Clock::TimePoint window_start_ GUARDED_BY(mu_);
  int in_window_ GUARDED_BY(mu_) = 0;
  int64_t suppressed_ GUARDED_BY(mu_) = 0;
};

// " (12 similar messages suppressed)" or "".
std::string SuppressedNote(int64_t suppressed);

}  // namespace kvtrain

// KV_LOG_LIMITED(WARNING, limiter) << "bad frame from " << peer;
#define KV_LOG_LIMITED(severity, limiter)                       \
  for (int64_t kv_suppressed_ = 0, kv_once_ = 1;                \
       kv_once_ && (limiter).Allow(&kv_suppressed_); kv_once_ = 0) \
  LOG(severity) << ::kvtrain::SuppressedNote(kv_suppressed_)

#endif  // KVTRAIN_BASE_LOGGING_H_
