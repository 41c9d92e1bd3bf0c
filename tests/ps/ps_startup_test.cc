// Start-up behaviour with real processes: the start-up deadline, a
// scheduler port in use, DMLC_INTERFACE (unknown name; lo), PS_VERBOSE.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/ps/ps.h"
#include "tests/ps/ps_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(PsStartupTest, DeadlineNamesWhoIsMissing) {
  LocalJobOptions o = PsJob(1, 2);
  o.workers_to_start = 1;
  o.env["KVTRAIN_STARTUP_TIMEOUT"] = "2";
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  for (JobNode& n : (*job)->nodes()) {
    const ExitInfo& e = *n.process->exit_info();
    EXPECT_EQ(e.code, ps::kJobFailedExitCode) << n.name << ": " << e.ToString();
    const std::string log = n.process->ReadLog();
    EXPECT_THAT(log, HasSubstr("start-up deadline of 2 s (KVTRAIN_STARTUP_"
                               "TIMEOUT) passed with 1 of 2 workers and 0 of "
                               "1 servers missing; registered: "))
        << n.name;
    EXPECT_THAT(log, HasSubstr("server at 127.0.0.1:")) << n.name;
    EXPECT_THAT(log, HasSubstr("worker at 127.0.0.1:")) << n.name;
  }
}

TEST(PsStartupTest, SchedulerPortInUseIsAClearError) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  LocalJobOptions o = PsJob(1, 1);
  o.root_port = port;
  o.wait_for_scheduler = false;
  o.servers_to_start = 0;
  o.workers_to_start = 0;
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  close(fd);
  const ExitInfo& e = *(*job)->scheduler().process->exit_info();
  EXPECT_EQ(e.code, 2) << e.ToString();
  EXPECT_THAT((*job)->scheduler().process->ReadLog(),
              HasSubstr("scheduler cannot listen on DMLC_PS_ROOT_PORT=" +
                        std::to_string(port) + ": port " +
                        std::to_string(port) + " is already in use"));
}

TEST(PsStartupTest, UnknownInterfaceListsTheInterfaces) {
  ProcessOptions o;
  o.argv = {TestNodeBinary()};
  o.env = {{"DMLC_ROLE", "worker"},    {"DMLC_PS_ROOT_URI", "127.0.0.1"},
           {"DMLC_PS_ROOT_PORT", "1"}, {"DMLC_NUM_WORKER", "1"},
           {"DMLC_NUM_SERVER", "1"},   {"DMLC_INTERFACE", "nosuch0"},
           {"KVTRAIN_INSECURE", "1"}};
  o.log_path = NewTempDir("iface-") + "/worker.log";
  auto p = Process::Spawn(o);
  ASSERT_TRUE(p.ok()) << p.status();
  StatusOr<ExitInfo> e = (*p)->Wait(kJobDeadline);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->code, 2) << e->ToString();
  EXPECT_THAT((*p)->ReadLog(),
              HasSubstr("DMLC_INTERFACE=\"nosuch0\": no such network "
                        "interface; interfaces: "));
  EXPECT_THAT((*p)->ReadLog(), HasSubstr("lo (127.0.0.1)"));
}

TEST(PsStartupTest, InterfaceLoWorks) {
  LocalJobOptions o = PsJob(1, 1, {"--rounds=1"});
  o.env["DMLC_INTERFACE"] = "lo";
  o.env["PS_VERBOSE"] = "1";
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  ASSERT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  EXPECT_THAT((*job)->worker(0).process->ReadLog(),
              HasSubstr("advertising 127.0.0.1 (worker (root 127.0.0.1:"));
  EXPECT_THAT((*job)->worker(0).process->ReadLog(), HasSubstr("interface lo"));
}

TEST(PsStartupTest, VerboseLevels) {
  LocalJobOptions o = PsJob(1, 2, {"--rounds=1"});
  o.customize = [](Role role, int index,
                   std::map<std::string, std::string>* env) {
    if (role == Role::kWorker) {
      (*env)["PS_VERBOSE"] = index == 0 ? "2" : "0";
    } else {
      (*env)["PS_VERBOSE"] = "1";
    }
  };
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  ASSERT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  const std::string sched = (*job)->scheduler().process->ReadLog();
  EXPECT_THAT(sched, HasSubstr("registered a server at 127.0.0.1:"));
  EXPECT_THAT(sched, HasSubstr("rank assigned: server 0 (127.0.0.1:"));
  EXPECT_THAT(sched, HasSubstr("rank assigned: worker 1 (127.0.0.1:"));
  EXPECT_THAT(sched, HasSubstr("barrier over scheduler+servers+workers #1 "
                               "complete (4 nodes)"));
  EXPECT_THAT(sched, HasSubstr("barrier over workers #1 complete"));
  const std::string server = (*job)->server(0).process->ReadLog();
  EXPECT_THAT(server, HasSubstr("connecting to worker 0 (127.0.0.1:"));
  EXPECT_THAT(server, HasSubstr("assigned rank 0 of 1 servers"));
  EXPECT_THAT(server, Not(HasSubstr("push request ts=")));
  const std::string w0 = (*job)->worker(0).process->ReadLog();
  EXPECT_THAT(w0, HasSubstr("passed barrier over workers #1"));
  EXPECT_THAT(w0, HasSubstr(" -> server 0 (127.0.0.1:"));
  EXPECT_THAT(w0, HasSubstr("push request ts=1 app=0 keys=1"));
  EXPECT_THAT(w0, HasSubstr(" <- server 0 (127.0.0.1:"));
  EXPECT_THAT(w0, HasSubstr("pull response ts="));
  const std::string w1 = (*job)->worker(1).process->ReadLog();
  EXPECT_THAT(w1, Not(HasSubstr("registering")));
  EXPECT_THAT(w1, Not(HasSubstr("push request")));
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
