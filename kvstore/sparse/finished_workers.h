// FinishedWorkers (dense keys and tables alike): the workers that called
// KVStore::Finalize, as a server learns of them (KV_WORKER_DONE). Under
// dist_sync a step of a key needs every worker's push: once a worker has
// finished, a step it never pushed can never complete, and whoever waits
// for it is answered with an error naming that worker instead of waiting
// for KVTRAIN_KVSTORE_TIMEOUT. Under bounded staleness a finished worker no
// longer holds the others back.
#ifndef KVTRAIN_KVSTORE_SPARSE_FINISHED_WORKERS_H_
#define KVTRAIN_KVSTORE_SPARSE_FINISHED_WORKERS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace kvtrain {
namespace kv {

class FinishedWorkers {
 public:
  explicit FinishedWorkers(int workers)
      : n_(workers), done_(new std::atomic<bool>[static_cast<size_t>(workers)]) {
    for (int r = 0; r < n_; ++r) done_[r] = false;
  }

  // Ranks outside [0, workers) are ignored.
  void Mark(int rank) {
    if (rank < 0 || rank >= n_) return;
    done_[rank] = true;
    any_ = true;
  }
  bool any() const { return any_; }
  bool done(int rank) const { return rank >= 0 && rank < n_ && done_[rank]; }

  // Why step `step` of key `key`, which has `completed` steps, can never
  // complete, or "" when it can. `pushed(rank)`: whether that worker has
  // pushed the step in progress (completed + 1).
  template <typename Pushed>
  std::string Blocking(const std::string& key, int64_t completed, Pushed pushed,
                       int64_t step) const {
    if (!any_) return "";
    for (int r = 0; r < n_; ++r) {
      if (!done_[r]) continue;
      const int64_t last = completed + (pushed(r) ? 1 : 0);
      if (step <= last) continue;
      return "worker " + std::to_string(r) + " finished (KVStore::Finalize) after pushing " +
             key + " " + std::to_string(last) + " times: step " + std::to_string(step) +
             ", which needs every worker's push under dist_sync, can never complete (every "
             "worker must push each key equally often: give every worker's data the same "
             "number of batches, e.g. with fit's epoch_size)";
    }
    return "";
  }

 private:
  const int n_;
  std::unique_ptr<std::atomic<bool>[]> done_;
  std::atomic<bool> any_{false};
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SPARSE_FINISHED_WORKERS_H_
