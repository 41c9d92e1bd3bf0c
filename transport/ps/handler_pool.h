// HandlerPool: runs server request handlers on a fixed set of threads, one
// FIFO lane per thread, choosing the lane by key so that the requests of one
// key run one at a time and in arrival order.
#ifndef KVTRAIN_TRANSPORT_PS_HANDLER_POOL_H_
#define KVTRAIN_TRANSPORT_PS_HANDLER_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"

namespace kvtrain {
namespace ps {

// Thread-safe. With 0 threads, Submit runs the task on the caller's thread.
class HandlerPool {
 public:
  explicit HandlerPool(int threads);
  // Runs every task already submitted, then joins the threads.
  ~HandlerPool();

  void Submit(uint64_t key, std::function<void()> task);
  int threads() const { return static_cast<int>(lanes_.size()); }
  // The lane a key maps to (for tests).
  size_t LaneOf(uint64_t key) const;

 private:
  struct Lane {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks GUARDED_BY(mu);
    bool stop GUARDED_BY(mu) = false;
    std::thread thread;
  };
  static void Run(Lane* lane);

  std::vector<std::unique_ptr<Lane>> lanes_;
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_HANDLER_POOL_H_
