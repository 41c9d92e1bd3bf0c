// Outbox: the window lets messages straight through until full; then they
// wait and leave highest priority first, FIFO within a priority.
#include "transport/ps/outbox.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace ps {
namespace {

OutMessage Msg(int priority, int64_t bytes, const std::string& tag) {
  OutMessage m;
  m.priority = priority;
  m.bytes = bytes;
  m.frames.push_back(Blob::FromString(tag));
  return m;
}

TEST(OutboxTest, DirectWhileTheWindowHasRoom) {
  Outbox box(100);
  OutMessage a = Msg(0, 60, "a"), b = Msg(0, 40, "b"), c = Msg(9, 1, "c");
  EXPECT_TRUE(box.Offer(&a));
  EXPECT_TRUE(box.Offer(&b));
  EXPECT_FALSE(box.Offer(&c));  // full: waits, whatever its priority
  EXPECT_EQ(box.in_flight_bytes(), 100);
  EXPECT_EQ(box.queued(), 1u);
  EXPECT_FALSE(box.HasReady());
  box.Released(60);
  OutMessage next;
  ASSERT_TRUE(box.Next(&next));
  EXPECT_EQ(next.frames[0].ToString(), "c");
}

TEST(OutboxTest, AMessageLargerThanTheWindowGoesAlone) {
  Outbox box(10);
  OutMessage big = Msg(0, 1000, "big"), small = Msg(0, 1, "small");
  EXPECT_TRUE(box.Offer(&big));
  EXPECT_FALSE(box.Offer(&small));
  box.Released(1000);
  OutMessage next;
  EXPECT_TRUE(box.Next(&next));
  EXPECT_FALSE(box.Next(&next));
}

TEST(OutboxTest, BacklogLeavesByPriorityThenArrival) {
  Outbox box(1);
  OutMessage first = Msg(0, 5, "first");
  ASSERT_TRUE(box.Offer(&first));
  const std::vector<std::pair<int, std::string>> offered = {
      {0, "low1"},  {5, "high1"}, {0, "low2"},
      {5, "high2"}, {-3, "neg"},  {7, "top"}};
  for (const auto& [prio, tag] : offered) {
    OutMessage m = Msg(prio, 5, tag);
    ASSERT_FALSE(box.Offer(&m));
  }
  // A message offered while others wait queues even if it would fit.
  box.Released(5);
  std::vector<std::string> order;
  OutMessage m;
  while (box.Next(&m)) {
    order.push_back(m.frames[0].ToString());
    box.Released(m.bytes);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"top", "high1", "high2", "low1",
                                             "low2", "neg"}));
  EXPECT_EQ(box.in_flight_messages(), 0);
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
