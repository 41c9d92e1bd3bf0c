// ThreadPool: chunking, coverage, nesting and concurrent callers.
#include "base/thread_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(ThreadPoolTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n;
      }
    }
  }
}

TEST(ThreadPoolTest, GrainLimitsTheNumberOfChunks) {
  ThreadPool pool(4);
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> chunks;
  pool.ParallelFor(10, 6, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.insert({b, e});
  });
  // 10 elements with a grain of 6 give two chunks.
  EXPECT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks.begin()->first, 0);
  EXPECT_EQ(chunks.rbegin()->second, 10);
}

TEST(ThreadPoolTest, UsesMoreThanOneThread) {
  ThreadPool pool(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Chunks long enough for the worker to wake up and claim the second one
  // while the caller still works on the first.
  for (int rep = 0; rep < 40 && ids.size() < 2; ++rep) {
    pool.ParallelFor(2, 1, [&](int64_t, int64_t) {
      {
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    });
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPoolTest, CallerTakesChunksOfASleepingWorker) {
  ThreadPool pool(2);
  // Let the worker fall asleep, then run a loop of tiny chunks: it finishes
  // even if the worker never gets to them.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 100; ++rep) {
    pool.ParallelFor(2, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 200);
}

TEST(ThreadPoolTest, NestedAndConcurrentCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  auto body = [&] {
    for (int rep = 0; rep < 200; ++rep) {
      pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
        pool.ParallelFor(e - b, 1, [&](int64_t b2, int64_t e2) {
          sum.fetch_add(e2 - b2);
        });
      });
    }
  };
  std::thread other(body);
  body();
  other.join();
  EXPECT_EQ(sum.load(), 2 * 200 * 8);
}

TEST(ThreadPoolTest, WorkersWakeAfterSleeping) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 3; ++rep) {
    // Longer than the spin period, so the workers are asleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.ParallelFor(300, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 900);
}

}  // namespace
}  // namespace kvtrain
