// Process and LocalJob, with /bin/sh as the child program.
#include "tests/util/process.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

constexpr auto kLong = std::chrono::seconds(30);

ProcessOptions Sh(const std::string& script, const std::string& log) {
  ProcessOptions o;
  o.argv = {"/bin/sh", "-c", script};
  o.log_path = log;
  return o;
}

TEST(ProcessTest, RunsWithEnvironmentAndCapturesOutput) {
  const std::string dir = NewTempDir("proc-");
  setenv("KV_PROCESS_TEST_GONE", "x", 1);
  ProcessOptions o =
      Sh("echo out $KV_A; echo err >&2; echo [$KV_PROCESS_TEST_GONE]; exit 7",
         dir + "/a.log");
  o.env["KV_A"] = "hello";
  o.unset_env.push_back("KV_PROCESS_TEST_GONE");
  auto p = Process::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  StatusOr<ExitInfo> e = (*p)->Wait(kLong);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->exited);
  EXPECT_EQ(e->code, 7);
  EXPECT_FALSE(e->ok());
  EXPECT_EQ(e->ToString(), "exit 7");
  EXPECT_EQ((*p)->ReadLog(), "out hello\nerr\n[]\n");
  EXPECT_FALSE((*p)->Alive());
}

TEST(ProcessTest, SignalsTimeoutsAndKill) {
  auto p = Process::Spawn(Sh("sleep 60", ""));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*p)->Alive());
  StatusOr<ExitInfo> e = (*p)->Wait(std::chrono::milliseconds(50));
  EXPECT_EQ(e.status().code(), Status::Code::kDeadlineExceeded);
  ASSERT_TRUE((*p)->Signal(SIGKILL).ok());
  e = (*p)->Wait(kLong);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->exited);
  EXPECT_EQ(e->signal, SIGKILL);
  EXPECT_THAT(e->ToString(), HasSubstr("killed by signal 9"));
  EXPECT_EQ((*p)->Signal(SIGTERM).code(), Status::Code::kFailedPrecondition);
}

TEST(ProcessTest, UnrunnableProgramIsAnError) {
  ProcessOptions o;
  o.argv = {"/nonexistent/program"};
  auto p = Process::Spawn(o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(),
              HasSubstr("cannot run /nonexistent/program"));
  EXPECT_FALSE(Process::Spawn(ProcessOptions()).ok());
}

TEST(ProcessTest, FreePortsAndListeners) {
  StatusOr<int> port = FreeTcpPort();
  ASSERT_TRUE(port.ok());
  EXPECT_GT(*port, 0);
  EXPECT_FALSE(PortAcceptsConnections(*port));
}

TEST(LocalJobTest, StartsEveryRoleWithTheJobEnvironment) {
  LocalJobOptions o;
  o.binary = "/bin/sh";
  o.args = {"-c",
            "echo $DMLC_ROLE $DMLC_NUM_SERVER $DMLC_NUM_WORKER "
            "$DMLC_PS_ROOT_URI port=$DMLC_NODE_PORT x=$X"};
  o.num_servers = 2;
  o.num_workers = 3;
  o.fixed_node_ports = true;
  o.wait_for_scheduler = false;
  o.env["X"] = "all";
  o.customize = [](Role role, int index,
                   std::map<std::string, std::string>* env) {
    if (role == Role::kWorker && index == 2) (*env)["X"] = "w2";
  };
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kLong));
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  ASSERT_EQ((*job)->nodes().size(), 6u);
  EXPECT_THAT((*job)->scheduler().process->ReadLog(),
              HasSubstr("scheduler 2 3 127.0.0.1 port= x=all"));
  JobNode& s1 = (*job)->server(1);
  EXPECT_GT(s1.node_port, 0);
  EXPECT_THAT(s1.process->ReadLog(),
              HasSubstr("server 2 3 127.0.0.1 port=" +
                        std::to_string(s1.node_port) + " x=all"));
  EXPECT_THAT((*job)->worker(2).process->ReadLog(), HasSubstr("x=w2"));
  EXPECT_THAT((*job)->Report(), HasSubstr("==== worker-1"));
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
