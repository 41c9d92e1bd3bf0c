// Inbox: the per-peer limits, groups, retired collectives and hellos,
// without sockets.
#include "transport/collective/inbox.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace kvtrain {
namespace collective {
namespace {

std::unique_ptr<Payload> Body(const std::string& s) {
  auto p = std::make_unique<Payload>();
  zmq_msg_init_size(&p->msg, s.size());
  if (!s.empty()) std::memcpy(zmq_msg_data(&p->msg), s.data(), s.size());
  return p;
}

std::string Text(const std::unique_ptr<Payload>& p) {
  return p == nullptr ? "(none)" : std::string(p->data(), p->size());
}

// Rank 0 of 3, the world group open.
struct World {
  Inbox inbox;
  explicit World(InboxLimits limits = {}) : inbox(0, 3, limits) {
    inbox.OpenGroup(kWorldGroup, {0, 1, 2});
  }
};

TEST(InboxTest, KeepsOrderPerKeyAndCountsWhatWaits) {
  World w;
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 7, Body("a")),
            Drop::kNone);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 7, Body("bb")),
            Drop::kNone);
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kUser, kWorldGroup, 7, Body("c")),
            Drop::kNone);
  EXPECT_EQ(w.inbox.queued_messages(1), 2u);
  EXPECT_EQ(w.inbox.queued_bytes(1), 3 + 2 * Inbox::kOverheadBytes);
  EXPECT_EQ(Text(w.inbox.Pop(1, MsgKind::kUser, kWorldGroup, 7)), "a");
  EXPECT_EQ(Text(w.inbox.Pop(1, MsgKind::kUser, kWorldGroup, 7)), "bb");
  EXPECT_EQ(w.inbox.Pop(1, MsgKind::kUser, kWorldGroup, 7), nullptr);
  EXPECT_EQ(w.inbox.Pop(1, MsgKind::kCollective, kWorldGroup, 7), nullptr);
  EXPECT_EQ(w.inbox.queued_messages(1), 0u);
  EXPECT_EQ(w.inbox.queued_bytes(1), 0u);
  EXPECT_EQ(w.inbox.queued_messages(2), 1u);
}

TEST(InboxTest, APeerPastItsLimitIsCutOff) {
  InboxLimits limits;
  limits.max_messages_per_peer = 3;
  World w(limits);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, i, Body("x")),
              Drop::kNone);
  }
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 9, Body("x")),
            Drop::kOverLimit);
  EXPECT_EQ(w.inbox.queued_messages(1), 3u);  // the caller decides
  w.inbox.CutOff(1);
  EXPECT_EQ(w.inbox.queued_messages(1), 0u);
  EXPECT_EQ(w.inbox.queued_bytes(1), 0u);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 0, Body("x")),
            Drop::kCutOff);
  EXPECT_EQ(w.inbox.dropped(Drop::kOverLimit), 1);
  EXPECT_EQ(w.inbox.dropped(Drop::kCutOff), 4);
  // Another peer has its own budget.
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kUser, kWorldGroup, 0, Body("x")),
            Drop::kNone);
}

TEST(InboxTest, TheByteLimitCountsOverheads) {
  InboxLimits limits;
  limits.max_bytes_per_peer = 2 * (10 + Inbox::kOverheadBytes);
  World w(limits);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 0,
                         Body(std::string(10, 'x'))),
            Drop::kNone);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 0,
                         Body(std::string(10, 'x'))),
            Drop::kNone);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, kWorldGroup, 0, Body("")),
            Drop::kOverLimit);
}

TEST(InboxTest, GroupsRetiredTagsAndHellos) {
  World w;
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kUser, 5, 0, Body("x")),
            Drop::kUnknownGroup);
  w.inbox.OpenGroup(5, {0, 1, 2});
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kCollective, 5, 0, Body("x")),
            Drop::kNone);
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kCollective, 5, 1, Body("x")),
            Drop::kNone);
  w.inbox.OpenGroup(5, {0, 2});  // narrowed: rank 1's message goes
  EXPECT_EQ(w.inbox.queued_messages(1), 0u);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kCollective, 5, 1, Body("x")),
            Drop::kUnknownGroup);
  w.inbox.Retire(5, 2);
  EXPECT_EQ(w.inbox.queued_messages(2), 0u);
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kCollective, 5, 1, Body("x")),
            Drop::kStaleTag);
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kCollective, 5, 2, Body("x")),
            Drop::kNone);
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kUser, 5, 0, Body("x")),
            Drop::kNone);  // never stale
  w.inbox.CloseGroup(5);
  EXPECT_EQ(w.inbox.queued_messages(2), 0u);
  EXPECT_EQ(w.inbox.Push(2, MsgKind::kUser, 5, 0, Body("x")),
            Drop::kUnknownGroup);
  EXPECT_EQ(w.inbox.dropped(Drop::kUnknownGroup), 6);
  EXPECT_EQ(w.inbox.dropped(Drop::kStaleTag), 2);

  EXPECT_EQ(w.inbox.Push(1, MsgKind::kHello, 0, 0, Body("")), Drop::kNone);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kHello, 0, 0, Body("")),
            Drop::kDuplicateHello);
  EXPECT_NE(w.inbox.Pop(1, MsgKind::kHello, 0, 0), nullptr);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kHello, 0, 0, Body("")),
            Drop::kDuplicateHello);
  EXPECT_EQ(w.inbox.Push(1, MsgKind::kHeartbeat, 0, 0, Body("")),
            Drop::kMalformed);
  EXPECT_EQ(w.inbox.Push(0, MsgKind::kUser, kWorldGroup, 0, Body("")),
            Drop::kUnknownConnection);
  EXPECT_EQ(w.inbox.Push(3, MsgKind::kUser, kWorldGroup, 0, Body("")),
            Drop::kUnknownConnection);
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain
