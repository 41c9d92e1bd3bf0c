// Load: 16 workers and 4 servers (real processes on 127.0.0.1) run 500
// dist_sync steps on 20 keys of mixed sizes (1 float to 1M floats, the
// largest split across every server) with integer-valued pushes: every
// pulled value of every step equals the closed form, so nothing was lost or
// applied twice. The same keys under dist_async: the totals are exact. Every
// process reports its RSS a quarter of the way through the run and at the
// end; growth must stay under 20% + 16 MB.
#include <cstdio>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

constexpr int kServers = 4;
constexpr int kWorkers = 16;
constexpr auto kDeadline = std::chrono::seconds(900);

LocalJobOptions Job(std::vector<std::string> args) {
  LocalJobOptions o;
  o.binary = RunfilePath("tests/kvstore/kvstore_test_node");
  o.args = std::move(args);
  o.args.push_back("--report_rss");
  o.num_servers = kServers;
  o.num_workers = kWorkers;
  // 21 processes on a loaded machine must not look like dead peers.
  o.env = {{"PS_HEARTBEAT_TIMEOUT", "120"},
           {"KVTRAIN_STARTUP_TIMEOUT", "180"},
           {"KVTRAIN_KVSTORE_TIMEOUT", "600"},
           {"KVTRAIN_NUM_THREADS", "1"}};
  return o;
}

// Prints every process's RSS and checks it stayed flat.
void CheckRss(LocalJob* job) {
  const std::regex re("rss kB: start (\\d+) end (\\d+)");
  int64_t total_start = 0, total_end = 0;
  for (JobNode& n : job->nodes()) {
    const std::string log = n.process->ReadLog();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, re)) << n.name << ":\n" << log;
    const int64_t start = std::stoll(m[1]), end = std::stoll(m[2]);
    total_start += start;
    total_end += end;
    std::printf("%-10s RSS %7.1f MB -> %7.1f MB\n", n.name.c_str(), start / 1024.0,
                end / 1024.0);
    EXPECT_LE(end, start * 1.2 + 16 * 1024) << n.name << " grew";
  }
  std::printf("all %zu processes: RSS %.1f MB -> %.1f MB\n", job->nodes().size(),
              total_start / 1024.0, total_end / 1024.0);
}

std::unique_ptr<LocalJob> RunLoadJob(std::vector<std::string> args) {
  auto job = LocalJob::Start(Job(std::move(args)));
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  EXPECT_TRUE((*job)->WaitAll(kDeadline)) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  return std::move(job).value();
}

TEST(LoadTest, DistSyncSixteenWorkersFourServersExact) {
  auto job = RunLoadJob({"--type=dist_sync", "--scenario=load", "--steps=500"});
  ASSERT_NE(job, nullptr);
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_THAT(job->worker(w).process->ReadLog(),
                HasSubstr("load exact: 500 steps, 20 keys"));
  }
  CheckRss(job.get());
}

TEST(LoadTest, DistAsyncSixteenWorkersFourServersTotalsExact) {
  auto job = RunLoadJob({"--type=dist_async", "--scenario=load_async", "--steps=500"});
  ASSERT_NE(job, nullptr);
  for (int w = 0; w < kWorkers; ++w) {
    EXPECT_THAT(job->worker(w).process->ReadLog(),
                HasSubstr("async load exact: 500 pushes from each of 16 workers"));
  }
  CheckRss(job.get());
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
