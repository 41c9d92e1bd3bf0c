#include "base/logging.h"

#include <thread>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(LogRateLimiterTest, LetsBurstThroughThenCountsSuppressed) {
  LogRateLimiter limiter(3, std::chrono::milliseconds(200));
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(limiter.Allow(&suppressed));
    EXPECT_EQ(suppressed, 0);
  }
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(limiter.Allow(&suppressed));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(limiter.Allow(&suppressed));
  EXPECT_EQ(suppressed, 7);
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
