// ThreadPool: a fixed set of worker threads for data-parallel loops inside
// operators (ParallelFor). Workers spin briefly before sleeping, so the many
// short loops of one training step do not each pay a thread wake-up.
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
  // on each, the caller taking the first. Returns when every chunk is done.
  void ParallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)>& fn);

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

 private:
  // One worker's mailbox. The caller writes fn/begin/end, then bumps `epoch`;
  // the worker runs the chunk and sets `done`.
  struct Slot {
    std::atomic<uint64_t> epoch{0};
    std::atomic<bool> done{true};
    std::atomic<bool> sleeping{false};
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t begin = 0;
    int64_t end = 0;
    std::atomic<bool> stop{false};
    std::mutex mu;  // only for sleeping on cv
    std::condition_variable cv;
  };

  void WorkerLoop(Slot* slot);

  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};
};

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_THREAD_POOL_H_
