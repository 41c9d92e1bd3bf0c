// Training progress: the speedometer line every N batches
// ("Epoch[0] Batch[200] Speed: 41234 samples/sec accuracy=0.812"), a
// progress bar for the epoch when stdout is a terminal, and a
// machine-readable metrics log (one JSON object per line).
#ifndef KVTRAIN_TRAINER_PROGRESS_H_
#define KVTRAIN_TRAINER_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace kvtrain {

using MetricValues = std::vector<std::pair<std::string, double>>;

// Not thread-safe.
class Progress {
 public:
  // `disp_batches`: speedometer period (0: never); `metrics_file`: JSON
  // lines (empty: none); `rank`: added to log lines of distributed jobs
  // (-1: single process). A progress bar is drawn when stdout is a tty.
  // Times are `clock`'s (tests pass a FakeClock).
  static StatusOr<Progress> Create(int disp_batches, const std::string& metrics_file,
                                   int rank, const Clock* clock = Clock::Real());
  Progress(Progress&&) = default;

  void StartEpoch(int epoch, int64_t batches);
  // After each batch of `samples` examples, with the running train metrics.
  void Batch(int64_t batch, int64_t samples, const MetricValues& train);
  // The epoch's last batch is done: stops the epoch's clock, so "Time cost"
  // is training time only (as MXNet's; validation runs after this).
  void EndTraining();
  // The epoch summary: train and validation metrics, time cost (up to
  // EndTraining, or up to now when it was not called), and the store's
  // counters of the epoch (asynchronous stores: staleness).
  void EndEpoch(const MetricValues& train, const MetricValues& validation,
                const MetricValues& store = {});

 private:
  Progress() = default;
  void Log(const std::string& json);

  const Clock* clock_ = Clock::Real();
  int disp_ = 0;
  int rank_ = -1;
  bool tty_ = false;
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> log_;
  int epoch_ = 0;
  int64_t batches_ = 0;
  int64_t window_samples_ = 0;
  double last_speed_ = 0;
  Clock::TimePoint epoch_start_, window_start_;
  std::optional<Clock::TimePoint> train_end_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_TRAINER_PROGRESS_H_
