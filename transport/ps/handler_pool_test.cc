// HandlerPool: inline mode, per-key order across threads, drain on exit.
#include "transport/ps/handler_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace kvtrain {
namespace ps {
namespace {

TEST(HandlerPoolTest, ZeroThreadsRunsInline) {
  HandlerPool pool(0);
  std::thread::id ran;
  pool.Submit(1, [&] { ran = std::this_thread::get_id(); });
  EXPECT_EQ(ran, std::this_thread::get_id());
}

TEST(HandlerPoolTest, KeysKeepTheirOrderAndSpreadOverLanes) {
  std::mutex mu;
  std::map<uint64_t, std::vector<int>> seen;
  std::set<std::thread::id> threads;
  {
    HandlerPool pool(4);
    std::set<size_t> lanes;
    for (uint64_t k = 0; k < 16; ++k) lanes.insert(pool.LaneOf(k));
    EXPECT_GT(lanes.size(), 1u);
    for (int i = 0; i < 200; ++i) {
      for (uint64_t k = 0; k < 16; ++k) {
        pool.Submit(k, [&, k, i] {
          std::lock_guard<std::mutex> l(mu);
          seen[k].push_back(i);
          threads.insert(std::this_thread::get_id());
        });
      }
    }
  }  // the destructor drains every lane
  for (uint64_t k = 0; k < 16; ++k) {
    ASSERT_EQ(seen[k].size(), 200u);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(seen[k][i], i);
  }
  EXPECT_GT(threads.size(), 1u);
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
