// Speedometer, progress bar and JSON-lines metrics log.
#include "trainer/progress.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvtrain {
namespace {

std::string Fields(const MetricValues& values, const std::string& prefix) {
  std::string s;
  char buf[128];
  for (const auto& [name, v] : values) {
    std::snprintf(buf, sizeof(buf), ",\"%s%s\":%.6f", prefix.c_str(), name.c_str(), v);
    s += buf;
  }
  return s;
}

std::string Text(const MetricValues& values, const std::string& prefix) {
  std::string s;
  char buf[128];
  for (const auto& [name, v] : values) {
    std::snprintf(buf, sizeof(buf), " %s%s=%.6f", prefix.c_str(), name.c_str(), v);
    s += buf;
  }
  return s;
}

}  // namespace

StatusOr<Progress> Progress::Create(int disp_batches, const std::string& metrics_file,
                                    int rank, const Clock* clock) {
  Progress p;
  p.clock_ = clock;
  p.disp_ = disp_batches;
  p.rank_ = rank;
  p.tty_ = isatty(STDOUT_FILENO) != 0;
  if (!metrics_file.empty()) {
    p.log_.reset(std::fopen(metrics_file.c_str(), "a"));
    if (p.log_ == nullptr) {
      return Status::Unavailable("cannot open --metrics-file " + metrics_file + ": " +
                                 std::strerror(errno));
    }
  }
  return p;
}

void Progress::Log(const std::string& json) {
  if (log_ == nullptr) return;
  std::fprintf(log_.get(), "{%s%s}\n", rank_ >= 0 ? ("\"rank\":" + std::to_string(rank_) + ",").c_str() : "",
               json.c_str());
  std::fflush(log_.get());
}

void Progress::StartEpoch(int epoch, int64_t batches) {
  epoch_ = epoch;
  batches_ = batches;
  window_samples_ = 0;
  train_end_.reset();
  epoch_start_ = window_start_ = clock_->Now();
}

void Progress::EndTraining() { train_end_ = clock_->Now(); }

void Progress::Batch(int64_t batch, int64_t samples, const MetricValues& train) {
  window_samples_ += samples;
  const auto now = clock_->Now();
  if (disp_ > 0 && (batch + 1) % disp_ == 0) {
    const double secs = std::chrono::duration<double>(now - window_start_).count();
    last_speed_ = secs > 0 ? window_samples_ / secs : 0;
    if (tty_) std::printf("\r\033[K");
    std::printf("Epoch[%d] Batch[%lld] Speed: %.0f samples/sec%s\n", epoch_,
                static_cast<long long>(batch + 1), last_speed_, Text(train, "").c_str());
    char buf[96];
    std::snprintf(buf, sizeof(buf), "\"epoch\":%d,\"batch\":%lld,\"speed\":%.1f", epoch_,
                  static_cast<long long>(batch + 1), last_speed_);
    Log(buf + Fields(train, "train-"));
    window_samples_ = 0;
    window_start_ = now;
  }
  if (tty_ && batches_ > 0) {
    const int width = 30;
    const int done = static_cast<int>(width * (batch + 1) / batches_);
    std::printf("\r[%s%s] %3lld%% batch %lld/%lld", std::string(done, '=').c_str(),
                std::string(width - done, ' ').c_str(),
                static_cast<long long>(100 * (batch + 1) / batches_),
                static_cast<long long>(batch + 1), static_cast<long long>(batches_));
  }
  std::fflush(stdout);
}

void Progress::EndEpoch(const MetricValues& train, const MetricValues& validation,
                        const MetricValues& store) {
  const auto end = train_end_.value_or(clock_->Now());
  const double secs = std::chrono::duration<double>(end - epoch_start_).count();
  if (tty_) std::printf("\r\033[K");
  std::printf("Epoch[%d]%s%s%s Time cost=%.3f\n", epoch_, Text(train, "Train-").c_str(),
              Text(validation, "Validation-").c_str(), Text(store, "").c_str(), secs);
  std::fflush(stdout);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "\"epoch\":%d,\"time\":%.3f", epoch_, secs);
  Log(buf + Fields(train, "train-") + Fields(validation, "validation-") + Fields(store, ""));
}

}  // namespace kvtrain
