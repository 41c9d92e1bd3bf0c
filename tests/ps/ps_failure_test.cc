// Kill tests: during push/pull traffic, SIGKILL a worker, a server or the
// scheduler; every survivor exits non-zero within the heartbeat timeout
// plus a few seconds, its log naming the dead node ("server 1
// (127.0.0.1:41233) stopped responding").
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "kvstore/ps/ps.h"
#include "tests/ps/ps_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

constexpr double kHeartbeatTimeoutS = 3;
// "Within the timeout plus a few seconds": generous, for a loaded machine.
constexpr auto kExitBound =
    std::chrono::seconds(static_cast<int>(kHeartbeatTimeoutS) + 20);

void KillDuringTraffic(Role victim_role, int victim_index) {
  LocalJobOptions o = PsJob(2, 2, {"--scenario=traffic"});
  o.env["PS_HEARTBEAT_INTERVAL"] = "0.2";
  o.env["PS_HEARTBEAT_TIMEOUT"] = std::to_string(kHeartbeatTimeoutS);
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
        n.process->Wait(kExitBound - (Clock::now() - killed_at));
    ASSERT_TRUE(e.ok()) << n.name << " did not exit after " << dead
                        << " was killed\n"
                        << (*job)->Report();
    EXPECT_TRUE(e->exited) << n.name << ": " << e->ToString();
    EXPECT_EQ(e->code, ps::kJobFailedExitCode)
        << n.name << ": " << e->ToString();
    EXPECT_THAT(n.process->ReadLog(), HasSubstr(dead + " stopped responding"))
        << n.name;
    std::printf("%s exited %.2f s after %s was killed: %s\n", n.name.c_str(),
                std::chrono::duration<double>(e->at - killed_at).count(),
                dead.c_str(), e->ToString().c_str());
  }
}

TEST(PsFailureTest, KilledWorker) { KillDuringTraffic(Role::kWorker, 1); }
TEST(PsFailureTest, KilledServer) { KillDuringTraffic(Role::kServer, 1); }
TEST(PsFailureTest, KilledScheduler) { KillDuringTraffic(Role::kScheduler, 0); }

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
