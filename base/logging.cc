// LogRateLimiter.
#include "base/logging.h"

namespace kvtrain {

LogRateLimiter::LogRateLimiter(int burst, std::chrono::milliseconds interval,
                               const Clock* clock)
    : burst_(burst), interval_(interval), clock_(clock), window_start_(clock->Now()) {}

bool LogRateLimiter::Allow(int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = clock_->Now();
  if (now - window_start_ >= interval_) {
    window_start_ = now;
    in_window_ = 0;
  }
  if (in_window_ >= burst_) {
    ++suppressed_;
    return false;
  }
  ++in_window_;
  if (suppressed != nullptr) *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

std::string SuppressedNote(int64_t suppressed) {
  if (suppressed <= 0) return "";
  return "(" + std::to_string(suppressed) + " similar messages suppressed) ";
}

}  // namespace kvtrain
