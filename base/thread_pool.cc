// ThreadPool: doorbell per worker, chunks claimed by compare-and-swap,
// spin-then-sleep waiting.
#include "base/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KV_CPU_RELAX() _mm_pause()
#else
#define KV_CPU_RELAX() std::this_thread::yield()
#endif

namespace kvtrain {
namespace {

// How long a worker polls for the next loop before it sleeps. Long enough to
// bridge the gap between two operators of one step, short enough not to burn
// a core while the process waits on something else. The poll yields the core
// as it goes, so other threads of the process lose nothing to it.
constexpr auto kSpin = std::chrono::microseconds(200);

constexpr uint64_t kChunkMask = 0xffffffffull;

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) {
    slots_.push_back(std::make_unique<Slot>());
  }
  for (auto& slot : slots_) {
    workers_.emplace_back([this, s = slot.get()] { WorkerLoop(s); });
  }
}

ThreadPool::~ThreadPool() {
  for (auto& slot : slots_) {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->stop.store(true);
    slot->epoch.fetch_add(1);
    slot->cv.notify_one();
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks(uint64_t generation) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  while ((c >> 32) == (generation & kChunkMask)) {
    const int64_t chunk = static_cast<int64_t>(c & kChunkMask);
    const int64_t chunks = chunks_;
    if (chunk >= chunks) return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) {
      continue;  // c holds the fresh value
    }
    (*fn_)(chunk * n_ / chunks, (chunk + 1) * n_ / chunks);
    done_.fetch_add(1, std::memory_order_acq_rel);
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(Slot* slot) {
  uint64_t seen = 0;
  while (true) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpin;
    const uint64_t rest = rest_.load(std::memory_order_relaxed);
    int polls = 0;
    while (slot->epoch.load() == seen) {
      KV_CPU_RELAX();
      // Every 64 polls the core goes to any other thread that is ready to
      // run on it (the trainer's loop, a batch prefetcher, a server of the
      // same host): a poll must not delay work the next loop waits for.
      // With nothing else ready, the yield returns at once.
      if (polls % 64 == 63) std::this_thread::yield();
      if (++polls % 64 != 0 || (std::chrono::steady_clock::now() < spin_until &&
                                rest_.load(std::memory_order_relaxed) == rest)) {
        continue;
      }
      std::unique_lock<std::mutex> lock(slot->mu);
      // seq_cst: either the caller sees `sleeping` and notifies under mu, or
      // this thread sees the new epoch and does not wait.
      slot->sleeping.store(true);
      slot->cv.wait(lock, [&] { return slot->epoch.load() != seen; });
      slot->sleeping.store(false);
    }
    seen = slot->epoch.load();
    if (slot->stop.load()) return;
    RunChunks(seen);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks =
      std::min<int64_t>(num_threads(), (n + grain - 1) / grain);
  bool expected = false;
  if (chunks <= 1 ||
      !busy_.compare_exchange_strong(expected, true,
                                     std::memory_order_acquire)) {
    fn(0, n);
    return;
  }
  const uint64_t generation = ++generation_;
  fn_ = &fn;
  n_ = n;
  chunks_ = chunks;
  done_.store(0, std::memory_order_relaxed);
  claim_.store((generation & kChunkMask) << 32, std::memory_order_release);
  for (int64_t w = 0; w < chunks - 1; ++w) {
    Slot* slot = slots_[w].get();
    slot->epoch.store(generation);
    if (slot->sleeping.load()) {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->cv.notify_one();
    }
  }
  RunChunks(generation);
  int polls = 0;
  while (done_.load(std::memory_order_acquire) < chunks) {
    KV_CPU_RELAX();
    if (++polls > 4096) std::this_thread::yield();
  }
  busy_.store(false, std::memory_order_release);
}

}  // namespace kvtrain
