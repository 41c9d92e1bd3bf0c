// AnswerPoll: polls while answers come in time, backs off after misses.
#include "transport/ps/answer_poll.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvtrain {
namespace ps {
namespace {

TEST(AnswerPollTest, ZeroNeverPolls) {
  AnswerPoll p(0);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(p.Next(), 0);
}

TEST(AnswerPollTest, PollsWhileAnswersComeInTime) {
  AnswerPoll p(200);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(p.Next(), 200);
    p.Polled(true);
  }
}

TEST(AnswerPollTest, EachMissDoublesTheSkippedWaitsAndAHitResets) {
  AnswerPoll p(200);
  auto skipped_before_next_poll = [&] {
    int n = 0;
    while (p.Next() == 0) ++n;
    return n;
  };
  ASSERT_EQ(p.Next(), 200);
  p.Polled(false);
  EXPECT_EQ(skipped_before_next_poll(), 1);
  p.Polled(false);
  EXPECT_EQ(skipped_before_next_poll(), 3);
  p.Polled(false);
  EXPECT_EQ(skipped_before_next_poll(), 7);
  for (int i = 0; i < 10; ++i) {
    p.Polled(false);
    skipped_before_next_poll();
  }
  p.Polled(false);
  EXPECT_EQ(skipped_before_next_poll(), 63) << "the back-off is capped";
  p.Polled(true);
  EXPECT_EQ(p.Next(), 200);
}

TEST(PollForAnswerTest, SeesAnAnswerCompletedByAnotherThread) {
  std::mutex mu;
  std::atomic<uint64_t> finished{0};
  bool done = false;
  std::unique_lock<std::mutex> l(mu);
  std::thread answerer([&] {
    std::lock_guard<std::mutex> g(mu);  // waits until the poll lets go
    done = true;
    finished.fetch_add(1, std::memory_order_release);
  });
  EXPECT_TRUE(PollForAnswer(&l, finished, 10 * 1000 * 1000, [&] { return done; }));
  EXPECT_TRUE(l.owns_lock());
  l.unlock();
  answerer.join();
}

TEST(PollForAnswerTest, GivesUpAfterItsTimeWithTheLockHeld) {
  std::mutex mu;
  std::atomic<uint64_t> finished{0};
  std::unique_lock<std::mutex> l(mu);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(PollForAnswer(&l, finished, 2000, [] { return false; }));
  EXPECT_TRUE(l.owns_lock());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::microseconds(2000));
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
