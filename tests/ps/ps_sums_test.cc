// Real processes on 127.0.0.1: 1 worker/1 server, 2/2 and 4 workers/3
// servers push known integer-valued floats (one key, many small keys, one
// key larger than all others together), pull them back, and the sums are
// exact (checked inside every worker; here: every node exits 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/ps/ps_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

void RunSums(int servers, int workers) {
  auto job = LocalJob::Start(PsJob(servers, workers, {"--rounds=2"}));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  ASSERT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  for (int w = 0; w < workers; ++w) {
    const std::string log = (*job)->worker(w).process->ReadLog();
    EXPECT_THAT(log,
                HasSubstr("single key round 2: 1 keys, 4096 values exact"));
    EXPECT_THAT(log, HasSubstr("many small keys round 2"));
    EXPECT_THAT(log, HasSubstr("one big key round 2"));
  }
}

TEST(PsSumsTest, OneWorkerOneServer) { RunSums(1, 1); }
TEST(PsSumsTest, TwoWorkersTwoServers) { RunSums(2, 2); }
TEST(PsSumsTest, FourWorkersThreeServers) { RunSums(3, 4); }

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
