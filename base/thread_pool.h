// ThreadPool: a fixed set of worker threads for data-parallel loops inside
// operators (ParallelFor). Chunks are claimed dynamically: the caller works
// too, and takes over chunks a sleeping worker has not woken up for, so a
// slow wake-up never stalls a loop. Workers spin briefly before sleeping, so
// the many short loops of one training step find them awake.
#ifndef KVTRAIN_BASE_THREAD_POOL_H_
#define KVTRAIN_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtrain {

// Thread-safe. One ParallelFor runs on the pool at a time; a call made while
// another is running (from another thread, or nested inside `fn`) runs its
// loop inline on the calling thread instead of waiting.
class ThreadPool {
 public:
  // `num_threads` counts the calling thread: ThreadPool(1) starts no thread
  // and runs every loop inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Splits [0, n) into at most num_threads() contiguous chunks of at least
  // `grain` elements (fewer chunks when n is small) and runs fn(begin, end)
  // on each, on the caller and the workers. Returns when every chunk is done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

  // Workers polling for the next loop go to sleep now instead of at the
  // end of their poll: the caller is about to wait on something else
  // (another process) that needs the cores more than a poll does.
  void Rest() { rest_.fetch_add(1, std::memory_order_relaxed); }

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  // One worker's doorbell: the caller bumps `epoch` to the job's
  // generation; the worker then claims chunks of that generation.
  struct Slot {
    std::atomic<uint64_t> epoch{0};
    std::atomic<bool> sleeping{false};
    std::atomic<bool> stop{false};
    std::mutex mu;  // only for sleeping on cv
    std::condition_variable cv;
  };

  void WorkerLoop(Slot* slot);
  // Claims and runs chunks of job `generation` until none is left.
  void RunChunks(uint64_t generation);

  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};
  std::atomic<uint64_t> rest_{0};  // bumped by Rest

  // The current job. `claim_` packs (generation << 32 | next chunk); a chunk
  // is claimed by a compare-and-swap, so a worker that wakes after its job
  // finished claims nothing. The fields are written before claim_ publishes
  // the generation and stay valid until every claimed chunk is done.
  std::atomic<uint64_t> claim_{0};
  uint64_t generation_ = 0;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunks_ = 0;
  std::atomic<int64_t> done_{0};
};

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_THREAD_POOL_H_
