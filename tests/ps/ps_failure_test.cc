// Kill tests: during push/pull traffic, SIGKILL a worker, a server or the
// scheduler; every survivor exits non-zero within the heartbeat timeout
// plus a few seconds, its log naming the dead node ("server 1
// (127.0.0.1:41233) is dead"). With a heartbeat timeout far longer than the
// bound, the dropped connection alone must report the death.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <string>

#include "transport/ps/ps.h"
#include "tests/ps/ps_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

constexpr int kHeartbeatTimeoutS = 3;
// "Within the timeout plus a few seconds": generous, for a loaded machine.
constexpr int kSlackS = 20;
// Longer than any bound here: only the drop rule can report in time.
constexpr int kLongHeartbeatTimeoutS = 120;

void KillDuringTraffic(Role victim_role, int victim_index,
                       int heartbeat_timeout_s = kHeartbeatTimeoutS,
                       const std::string& why = "") {
  const auto exit_bound = std::chrono::seconds(
      std::min(heartbeat_timeout_s, kHeartbeatTimeoutS) + kSlackS);
  LocalJobOptions o = PsJob(2, 2, {"--scenario=traffic"});
  o.env["PS_HEARTBEAT_INTERVAL"] = "0.2";
  o.env["PS_HEARTBEAT_TIMEOUT"] = std::to_string(heartbeat_timeout_s);
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(WaitForLog((*job)->worker(w).process.get(), "traffic running"))
        << (*job)->Report();
  }
  JobNode* victim = nullptr;
  for (JobNode& n : (*job)->nodes()) {
    if (n.role == victim_role && n.index == victim_index) victim = &n;
  }
  ASSERT_NE(victim, nullptr);
  const std::string dead = StartedName(victim->process.get());
  ASSERT_FALSE(dead.empty()) << (*job)->Report();
  const auto killed_at = Clock::now();
  ASSERT_TRUE(victim->process->Signal(SIGKILL).ok());
  for (JobNode& n : (*job)->nodes()) {
    if (&n == victim) continue;
    StatusOr<ExitInfo> e =
        n.process->Wait(exit_bound - (Clock::now() - killed_at));
    ASSERT_TRUE(e.ok()) << n.name << " did not exit after " << dead
                        << " was killed\n"
                        << (*job)->Report();
    EXPECT_TRUE(e->exited) << n.name << ": " << e->ToString();
    EXPECT_EQ(e->code, ps::kJobFailedExitCode)
        << n.name << ": " << e->ToString();
    EXPECT_THAT(n.process->ReadLog(), HasSubstr(dead + " is dead: " + why))
        << n.name;
    std::printf("%s exited %.2f s after %s was killed: %s\n", n.name.c_str(),
                std::chrono::duration<double>(e->at - killed_at).count(),
                dead.c_str(), e->ToString().c_str());
  }
}

TEST(PsFailureTest, KilledWorker) { KillDuringTraffic(Role::kWorker, 1); }
TEST(PsFailureTest, KilledServer) { KillDuringTraffic(Role::kServer, 1); }
TEST(PsFailureTest, KilledScheduler) { KillDuringTraffic(Role::kScheduler, 0); }

const char kDropped[] = "its connection dropped without a goodbye";

TEST(PsFailureTest, KilledWorkerIsSeenByItsDroppedConnection) {
  KillDuringTraffic(Role::kWorker, 0, kLongHeartbeatTimeoutS, kDropped);
}
TEST(PsFailureTest, KilledSchedulerIsSeenByItsDroppedConnection) {
  KillDuringTraffic(Role::kScheduler, 0, kLongHeartbeatTimeoutS, kDropped);
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
