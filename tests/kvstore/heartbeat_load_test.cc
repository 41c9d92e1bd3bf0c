// Heartbeats under CURVE load: 2 workers and 2 servers (real processes,
// TCP between them as between hosts, so CURVE encrypts every byte) push and
// pull a 256 MB array for 20 s (KVTRAIN_HEARTBEAT_LOAD_SECONDS: six and more
// heartbeat timeouts) with PS_HEARTBEAT_TIMEOUT=3: every answer is exact and
// no node is declared dead.
#include <cstdio>
#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// CURVE encrypts on ZeroMQ's one I/O thread per process: a job moving
// 256 MB arrays (TCP between the processes, as between hosts) for 20 s
// with PS_HEARTBEAT_TIMEOUT=3 must not declare any node dead.
TEST(HeartbeatLoadTest, HeartbeatsKeepUpUnderCurveLoad) {
  LocalJobOptions o;
  o.binary = RunfilePath("tests/kvstore/kvstore_test_node");
  const char* seconds = std::getenv("KVTRAIN_HEARTBEAT_LOAD_SECONDS");
  o.args = {"--type=dist_sync", "--scenario=big_arrays", "--array_mb=256",
            std::string("--seconds=") + (seconds ? seconds : "20")};
  o.num_servers = 2;
  o.num_workers = 2;
  o.env = {{"PS_HEARTBEAT_TIMEOUT", "3"},
           {"KVTRAIN_SAME_HOST_IPC", "0"},
           {"KVTRAIN_STARTUP_TIMEOUT", "120"},
           {"OPENBLAS_NUM_THREADS", "1"}};
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(std::chrono::seconds(600))) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  for (JobNode& n : (*job)->nodes()) {
    const std::string log = n.process->ReadLog();
    EXPECT_THAT(log, Not(HasSubstr("dead"))) << n.name << ":\n" << log;
    if (n.role == Role::kWorker) {
      std::printf("%s: %s", n.name.c_str(), log.substr(log.find("big arrays")).c_str());
    }
  }
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
