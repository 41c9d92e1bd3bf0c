// HandlerPool: per-key ordered task lanes.
#include "transport/ps/handler_pool.h"

namespace kvtrain {
namespace ps {

HandlerPool::HandlerPool(int threads) {
  for (int i = 0; i < threads; ++i) {
    lanes_.push_back(std::make_unique<Lane>());
    Lane* lane = lanes_.back().get();
    lane->thread = std::thread([lane] { Run(lane); });
  }
}

HandlerPool::~HandlerPool() {
  for (auto& lane : lanes_) {
    std::lock_guard<std::mutex> l(lane->mu);
    lane->stop = true;
    lane->cv.notify_one();
  }
  for (auto& lane : lanes_) lane->thread.join();
}

size_t HandlerPool::LaneOf(uint64_t key) const {
  if (lanes_.empty()) return 0;
  // splitmix64 finaliser: neighbouring keys spread over the lanes.
  uint64_t z = key + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<size_t>(z % lanes_.size());
}

void HandlerPool::Submit(uint64_t key, std::function<void()> task) {
  if (lanes_.empty()) {
    task();
    return;
  }
  Lane* lane = lanes_[LaneOf(key)].get();
  std::lock_guard<std::mutex> l(lane->mu);
  lane->tasks.push_back(std::move(task));
  lane->cv.notify_one();
}

void HandlerPool::Run(Lane* lane) {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> l(lane->mu);
      lane->cv.wait(l, [lane] { return lane->stop || !lane->tasks.empty(); });
      if (lane->tasks.empty()) return;  // stopped and drained
      task = std::move(lane->tasks.front());
      lane->tasks.pop_front();
    }
    task();
  }
}

}  // namespace ps
}  // namespace kvtrain
