// The dist KVStores with real processes on 127.0.0.1 (tests/util LocalJob):
// closed-form sums for 1/1, 2/2 and 4 workers/3 servers, every dist type,
// async totals, optimizer states saved from one job and restored in another,
// bad input, and dist_sync with n workers at batch b == local at n*b.
#include <cmath>
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

constexpr auto kDeadline = std::chrono::seconds(240);

std::string Node() { return RunfilePath("tests/kvstore/kvstore_test_node"); }

LocalJobOptions Job(int servers, int workers, std::vector<std::string> args) {
  LocalJobOptions o;
  o.binary = Node();
  o.args = std::move(args);
  o.num_servers = servers;
  o.num_workers = workers;
  o.env = {{"PS_HEARTBEAT_INTERVAL", "0.5"},
           {"PS_HEARTBEAT_TIMEOUT", "60"},
           {"KVTRAIN_STARTUP_TIMEOUT", "120"},
           {"KVTRAIN_BIGARRAY_BOUND", "1000"}};
  return o;
}

// Runs a job to completion; every process must exit 0.
std::unique_ptr<LocalJob> RunJob(const LocalJobOptions& o) {
  auto job = LocalJob::Start(o);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return nullptr;
  EXPECT_TRUE((*job)->WaitAll(kDeadline)) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  return std::move(job).value();
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

void ClosedForm(int servers, int workers, const std::string& type) {
  auto job = RunJob(Job(servers, workers, {"--type=" + type, "--scenario=closed_form"}));
  ASSERT_NE(job, nullptr);
  for (int w = 0; w < workers; ++w) {
    EXPECT_THAT(job->worker(w).process->ReadLog(),
                HasSubstr("closed form exact: 5 steps, " + std::to_string(workers) +
                          " workers"));
  }
  // A server refuses worker calls with a clear error, then serves.
  EXPECT_THAT(job->server(0).process->ReadLog(),
              HasSubstr("KVStore::Push called in a process whose role is server"));
}

TEST(DistKVStoreProcessTest, SyncOneWorkerOneServer) { ClosedForm(1, 1, "dist_sync"); }
TEST(DistKVStoreProcessTest, SyncTwoWorkersTwoServers) { ClosedForm(2, 2, "dist_sync"); }
TEST(DistKVStoreProcessTest, SyncFourWorkersThreeServers) { ClosedForm(3, 4, "dist_sync"); }
TEST(DistKVStoreProcessTest, DeviceSync) { ClosedForm(2, 2, "dist_device_sync"); }

TEST(DistKVStoreProcessTest, AsyncTotalIsTheSumOfAllPushes) {
  auto job = RunJob(Job(2, 3, {"--type=dist_async", "--scenario=async_total",
                               "--steps=30"}));
  ASSERT_NE(job, nullptr);
  EXPECT_THAT(job->worker(2).process->ReadLog(), HasSubstr("async total exact: 180 and 90"));
}

TEST(DistKVStoreProcessTest, OptimizerStatesSurviveAJobRestart) {
  const std::string dir = NewTempDir("kvstates");
  const std::vector<std::string> common = {
      "--type=dist_sync", "--states_path=" + dir + "/states",
      "--weights_path=" + dir + "/weights"};
  auto args = [&](const std::string& scenario, const std::string& out) {
    std::vector<std::string> a = common;
    a.push_back("--scenario=" + scenario);
    a.push_back("--out=" + dir + "/" + out);
    return a;
  };
  ASSERT_NE(RunJob(Job(2, 2, args("save_states", "straight"))), nullptr);
  ASSERT_NE(RunJob(Job(2, 2, args("load_states", "resumed"))), nullptr);
  const std::vector<float> straight = ReadFloats(dir + "/straight");
  const std::vector<float> resumed = ReadFloats(dir + "/resumed");
  ASSERT_EQ(straight.size(), 3000u);
  EXPECT_EQ(resumed, straight);  // bit for bit: same arithmetic on restored state
  // The states mattered: resuming without them gives other weights.
  std::vector<std::string> fresh = args("load_states", "fresh");
  fresh.push_back("--skip_load");
  ASSERT_NE(RunJob(Job(2, 2, fresh)), nullptr);
  EXPECT_NE(ReadFloats(dir + "/fresh"), straight);
}

TEST(DistKVStoreProcessTest, BadInputIsReportedAndServersKeepServing) {
  auto job = RunJob(Job(2, 2, {"--type=dist_sync", "--scenario=bad_input"}));
  ASSERT_NE(job, nullptr);
  const std::string log = job->worker(1).process->ReadLog();
  EXPECT_THAT(log, HasSubstr("key v: was never initialised (call Init first)"));
  EXPECT_THAT(log, HasSubstr("bad input handled, servers still serving"));
}

// MXNet's promise: dist_sync with n workers at batch b trains exactly like
// one process at batch n*b (same data order), up to float rounding.
TEST(DistKVStoreProcessTest, DistSyncEqualsLocalWithTheCombinedBatch) {
  const std::string dir = NewTempDir("kvequiv");
  ProcessOptions local;
  local.argv = {Node(), "--type=local", "--scenario=linreg", "--batch=60",
                "--out=" + dir + "/local"};
  local.log_path = dir + "/local.log";
  auto p = Process::Spawn(local);
  ASSERT_TRUE(p.ok()) << p.status();
  auto exit = (*p)->Wait(kDeadline);
  ASSERT_TRUE(exit.ok() && exit->ok()) << (*p)->ReadLog();
  ASSERT_NE(RunJob(Job(2, 2, {"--type=dist_sync", "--scenario=linreg", "--batch=30",
                               "--out=" + dir + "/dist"})), nullptr);
  const std::vector<float> a = ReadFloats(dir + "/local"), b = ReadFloats(dir + "/dist");
  ASSERT_EQ(a.size(), 16u);
  ASSERT_EQ(b.size(), 16u);
  float biggest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(a[i]))) << "weight " << i;
    biggest = std::max(biggest, std::fabs(a[i]));
  }
  EXPECT_GT(biggest, 0.5f);  // it trained: weights moved away from zero
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
