#include "base/logging.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(LogRateLimiterTest, LetsBurstThroughThenCountsSuppressed) {
  FakeClock clock;
  LogRateLimiter limiter(3, std::chrono::milliseconds(200), &clock);
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(limiter.Allow(&suppressed));
  // Just short of the interval: still refused.
  clock.Advance(std::chrono::milliseconds(199));
  EXPECT_FALSE(limiter.Allow(&suppressed));
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 8);
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 0);
}

TEST(LogRateLimiterTest, SuppressedNote) {
  EXPECT_EQ(SuppressedNote(0), "");
  EXPECT_EQ(SuppressedNote(12), "(12 similar messages suppressed) ");
}

TEST(LogRateLimiterTest, MacroLogsOnlyWhenAllowed) {
  LogRateLimiter limiter(2, std::chrono::seconds(60));
  int evaluated = 0;
  for (int i = 0; i < 5; ++i) {
    KV_LOG_LIMITED(INFO, limiter) << "line " << ++evaluated;
  }
  // The streamed expression runs only for lines that are logged.
  EXPECT_EQ(evaluated, 2);
}

}  // namespace
}  // namespace kvtrain
