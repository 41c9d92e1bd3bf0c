// LogRateLimiter.
#include "base/logging.h"

namespace kvtrain {

LogRateLimiter::LogRateLimiter(int burst, std::chrono::milliseconds interval)
    : burst_(burst),
      interval_(interval),
      window_start_(std::chrono::steady_clock::now()) {}

bool LogRateLimiter::Allow(int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
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
