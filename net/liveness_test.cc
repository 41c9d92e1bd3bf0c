// PeerLiveness: the dead-peer rule on a hand-driven clock.
#include "net/liveness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvtrain {
namespace net {
namespace {

using ::testing::HasSubstr;
constexpr int64_t kSec = 1000000000;

LivenessOptions Opts(double interval, double timeout) {
  LivenessOptions o;
  o.heartbeat_interval_s = interval;
  o.heartbeat_timeout_s = timeout;
  o.disconnect_grace_s = 0.5;
  return o;
}

TEST(PeerLivenessTest, SilencePastTheTimeoutKillsOnceAndHearingKeepsAlive) {
  PeerLiveness l(3, Opts(1, 10), 0);
  l.SetWatched(0, false);  // the owner itself
  EXPECT_TRUE(l.Check(9 * kSec).empty());
  l.Heard(1, 9 * kSec);
  std::vector<PeerLiveness::Death> d = l.Check(11 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].peer, 2);
  EXPECT_THAT(d[0].why, HasSubstr("nothing heard for 11 s"));
  EXPECT_THAT(d[0].why, HasSubstr("PS_HEARTBEAT_TIMEOUT=10 s"));
  EXPECT_TRUE(l.Check(12 * kSec).empty()) << "a death is reported once";
  d = l.Check(20 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].peer, 1);
}

// In a large job's start, a node may take longer than the heartbeat
// timeout to take in the table and send its first message: until a peer
// has been heard once, and until the job has started, its silence is
// judged by the start-up timeout. After both, the heartbeat timeout holds;
// a drop is seen at once either way.
TEST(PeerLivenessTest, BeforeItsFirstMessageAPeerHasTheStartupTimeout) {
  LivenessOptions o = Opts(1, 10);
  o.first_message_timeout_s = 60;
  PeerLiveness l(4, o, 0);
  l.SetWatched(0, false);
  l.Heard(1, 1 * kSec);
  l.Dropped(3, 2 * kSec);
  // While the job starts, peer 1 (heard once) has the start-up timeout
  // too: a scheduler sending a large job its node table can be silent
  // longer than a heartbeat timeout. A drop counts at once.
  std::vector<PeerLiveness::Death> d = l.Check(12 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].peer, 3);
  l.EndStartup();
  d = l.Check(13 * kSec);
  ASSERT_EQ(d.size(), 1u) << "peer 1, heard once, once the job has started";
  EXPECT_EQ(d[0].peer, 1);
  EXPECT_THAT(d[0].why, HasSubstr("PS_HEARTBEAT_TIMEOUT=10 s"));
  EXPECT_TRUE(l.Check(59 * kSec).empty()) << "peer 2 has not spoken yet";
  d = l.Check(61 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].peer, 2);
  EXPECT_THAT(d[0].why, HasSubstr("nothing heard since the job started, for 61 s"));
  EXPECT_THAT(d[0].why, HasSubstr("KVTRAIN_STARTUP_TIMEOUT=60 s"));
  // A peer heard once and then silent past the start-up timeout while the
  // job is still starting is dead all the same.
  PeerLiveness m(2, o, 0);
  m.SetWatched(0, false);
  m.Heard(1, 1 * kSec);
  EXPECT_TRUE(m.Check(60 * kSec).empty());
  d = m.Check(62 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_THAT(d[0].why, HasSubstr("nothing heard while the job starts, for 61 s"));
}

TEST(PeerLivenessTest, HeartbeatsOffTurnsTheSilenceRuleOff) {
  PeerLiveness l(2, Opts(0, 10), 0);
  EXPECT_TRUE(l.Check(100 * kSec).empty());
  EXPECT_FALSE(l.HeartbeatDue(100 * kSec));
  l.Dropped(1, 100 * kSec);  // the drop rule still holds
  EXPECT_EQ(l.Check(101 * kSec).size(), 1u);
}

TEST(PeerLivenessTest, ADropWithoutGoodbyeKillsAfterTheGrace) {
  PeerLiveness l(3, Opts(1, 10), 0);
  l.SetWatched(0, false);
  l.Dropped(1, 2 * kSec);
  l.Dropped(2, 2 * kSec);
  EXPECT_TRUE(l.Check(2 * kSec + kSec / 4).empty()) << "within the grace";
  l.SaidGoodbye(2);  // its goodbye was still queued behind the drop
  std::vector<PeerLiveness::Death> d = l.Check(3 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].peer, 1);
  EXPECT_THAT(d[0].why, HasSubstr("connection dropped without a goodbye"));
  EXPECT_TRUE(l.said_goodbye(2));
  EXPECT_TRUE(l.Check(60 * kSec).empty()) << "a goodbye is never a death";
}

TEST(PeerLivenessTest, UnwatchedPeersAndBadIndexesAreIgnored) {
  PeerLiveness l(2, Opts(1, 1), 0);
  l.SetWatched(1, false);
  l.Heard(7, kSec);
  l.Dropped(-1, kSec);
  l.SaidGoodbye(2);
  std::vector<PeerLiveness::Death> d = l.Check(5 * kSec);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].peer, 0);
  l.SetWatched(1, true);
  EXPECT_EQ(l.Check(5 * kSec).size(), 1u);
}

TEST(PeerLivenessTest, HeartbeatScheduleAndTick) {
  PeerLiveness l(1, Opts(1, 10), 0);
  EXPECT_TRUE(l.HeartbeatDue(0));
  EXPECT_FALSE(l.HeartbeatDue(kSec / 2));
  EXPECT_TRUE(l.HeartbeatDue(kSec));
  EXPECT_DOUBLE_EQ(PeerLiveness::TickSeconds(Opts(1, 10)), 0.25);
  EXPECT_DOUBLE_EQ(PeerLiveness::TickSeconds(Opts(0.2, 1)), 0.05);
  EXPECT_DOUBLE_EQ(PeerLiveness::TickSeconds(Opts(0, 1)), 0.25);
}

TEST(PeerLivenessTest, OneMessageFormat) {
  EXPECT_EQ(DeathMessage("worker 1 (127.0.0.1:4000)", "why"),
            "worker 1 (127.0.0.1:4000) is dead: why");
  EXPECT_EQ(FormatSeconds(0.5), "0.5 s");
  EXPECT_EQ(FormatSeconds(12.34), "12.3 s");
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
