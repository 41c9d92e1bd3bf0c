// Postoffice control plane over the in-process van: start-up and ranks,
// barriers, finalize, failure detection, start-up deadline, rejected nodes,
// and messages from strangers.
#include <atomic>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "transport/ps/answer_poll.h"
#include "transport/ps/inproc_job.h"
#include "transport/ps/message.h"
#include "transport/ps/postoffice_impl.h"
#include "transport/ps/scheduler.h"

namespace kvtrain {
namespace ps {
namespace {

using ::testing::HasSubstr;

constexpr auto kLong = std::chrono::seconds(20);

// Starts `job`'s scheduler and a node of config `odd`, which the scheduler
// refuses: its Start's error (checked to be an abort naming the refusal).
Status StartRejected(InprocJob* job, const NodeConfig& odd) {
  StatusOr<Postoffice*> sched = job->AddNode(job->ConfigFor(Role::kScheduler));
  StatusOr<Postoffice*> w = job->AddNode(odd);
  if (!sched.ok() || !w.ok()) return Status::Internal("nodes not created");
  std::thread scheduler([&] { EXPECT_FALSE((*sched)->Start().ok()); });
  Status s = (*w)->Start();
  scheduler.join();
  EXPECT_EQ(s.code(), Status::Code::kAborted);
  EXPECT_THAT(s.message(), HasSubstr("rejected"));
  return s;
}

TEST(PostofficeTest, StartAssignsRanksByAddressAndFinalizes) {
  InprocJobOptions o;
  o.num_servers = 3;
  o.num_workers = 2;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  // Ranks follow the bound ports (one host): sorted ports, rank 0 first.
  std::vector<int> server_ports;
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(job.server(r), nullptr) << "no server rank " << r;
    server_ports.push_back(job.server(r)->port());
    EXPECT_THAT(job.server(r)->name(),
                HasSubstr("server " + std::to_string(r) + " (127.0.0.1:"));
  }
  EXPECT_TRUE(std::is_sorted(server_ports.begin(), server_ports.end()));
  ASSERT_NE(job.worker(0), nullptr);
  ASSERT_NE(job.worker(1), nullptr);
  EXPECT_LT(job.worker(0)->port(), job.worker(1)->port());
  EXPECT_EQ(job.worker(1)->num_servers(), 3);
  EXPECT_EQ(job.worker(1)->num_workers(), 2);
  const std::vector<KeyRange> ranges = job.worker(0)->ServerKeyRanges();
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(ranges[0].begin, 0u);
  EXPECT_EQ(ranges[0].end, ranges[1].begin);
  EXPECT_EQ(ranges[2].end, UINT64_MAX);
  EXPECT_TRUE(job.FinalizeAll().ok());
  EXPECT_TRUE(job.Failures().empty());
}

// Servers and workers connect to the other role and the scheduler only:
// no server-server or worker-worker connection (n^2 at scale).
TEST(PostofficeTest, DisagreeingServerReplicasAreRejected) {
  InprocJobOptions o;
  o.startup_timeout_s = 1;
  InprocJob job(o);
  NodeConfig odd = job.ConfigFor(Role::kWorker);
  odd.server_replicas = 1;
  const Status s = StartRejected(&job, odd);
  EXPECT_THAT(s.message(), HasSubstr("KVTRAIN_SERVER_REPLICAS=1"));
}

// With server replicas R a server also connects to the servers within R
// ranks of its own (5 servers, R = 1: its two neighbours in the ring).
TEST(PostofficeTest, ServersWithReplicasConnectToTheirNeighbours) {
  InprocJobOptions o;
  o.num_servers = 5;
  o.num_workers = 1;
  o.server_replicas = 1;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  std::set<std::pair<int, int>> servers;
  for (const auto& [from, to] : job.net()->connections()) {
    int a = -1, b = -1;
    for (int r = 0; r < 5; ++r) {
      if (job.server(r)->port() == from) a = r;
      if (job.server(r)->port() == to) b = r;
    }
    if (a >= 0 && b >= 0) servers.insert({a, b});
  }
  std::set<std::pair<int, int>> want;
  for (int r = 0; r < 5; ++r) {
    want.insert({r, (r + 1) % 5});
    want.insert({r, (r + 4) % 5});
  }
  EXPECT_EQ(servers, want);
  EXPECT_TRUE(job.FinalizeAll().ok());
  EXPECT_TRUE(job.Failures().empty());
}

TEST(PostofficeTest, NodesConnectToTheOtherRoleAndTheSchedulerOnly) {
  InprocJobOptions o;
  o.num_servers = 2;
  o.num_workers = 3;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  std::map<int, Role> role_of;
  for (const auto& n : job.nodes()) role_of[n->port()] = n->role();
  std::set<std::pair<int, int>> want;
  for (const auto& [from, from_role] : role_of) {
    for (const auto& [to, to_role] : role_of) {
      if (from != to && (from_role != to_role || from_role == Role::kScheduler)) {
        want.insert({from, to});
      }
    }
  }
  EXPECT_EQ(job.net()->connections(), want);
  EXPECT_TRUE(job.FinalizeAll().ok());
  EXPECT_TRUE(job.Failures().empty());
}

// The job is on one host when every server and worker advertised a
// same-host address of one host identity; the scheduler does not count.
TEST(PostofficeTest, OnOneHostComparesTheServersAndWorkersHostIdentities) {
  auto node = [](Role role, const std::string& same_host) {
    NodeEntry n;
    n.role = role;
    n.same_host = same_host;
    return n;
  };
  const std::vector<NodeEntry> one = {node(Role::kScheduler, ""),
                                      node(Role::kServer, "boot1.ns7@kvtrain-ps-1-a"),
                                      node(Role::kWorker, "boot1.ns7@kvtrain-ps-2-b")};
  EXPECT_TRUE(OnOneHost(one));
  std::vector<NodeEntry> two = one;
  two.push_back(node(Role::kWorker, "boot1.ns8@kvtrain-ps-3-c"));  // another namespace
  EXPECT_FALSE(OnOneHost(two));
  std::vector<NodeEntry> tcp_only = one;
  tcp_only[2].same_host = "";  // KVTRAIN_SAME_HOST_IPC=0
  EXPECT_FALSE(OnOneHost(tcp_only));
  EXPECT_FALSE(OnOneHost({node(Role::kScheduler, "boot1.ns7@x")}));
  EXPECT_FALSE(OnOneHost({node(Role::kServer, "@x"), node(Role::kWorker, "@y")}));
}

// The in-process vans advertise no same-host address: not one host.
TEST(PostofficeTest, InprocJobsAreNotOnOneHost) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  EXPECT_FALSE(job.worker(0)->OneHost()) << "before Start";
  ASSERT_TRUE(job.StartAll().ok());
  EXPECT_FALSE(job.worker(0)->OneHost());
  EXPECT_EQ(job.worker(0)->impl()->wait_spin_us(), kWaitSpinUs);
  EXPECT_TRUE(job.FinalizeAll().ok());
}

// A worker's Wait polls for as long as set; unset, longer when the whole
// job is on one host (where requests of any size poll).
TEST(PostofficeTest, WaitSpinIsLongerOnOneHostUnlessSet) {
  EXPECT_EQ(WaitSpinUs(std::nullopt, false), kWaitSpinUs);
  EXPECT_EQ(WaitSpinUs(std::nullopt, true), kWaitSpinUsOneHost);
  EXPECT_GT(kWaitSpinUsOneHost, kWaitSpinUs);
  EXPECT_EQ(WaitSpinUs(0, true), 0);
  EXPECT_EQ(WaitSpinUs(50, false), 50);
}

// Launchers ask for ranks (DMLC_RANK): honoured when they are exactly 0..n-1
// within a role, otherwise ranks follow the addresses.
TEST(PostofficeTest, RequestedRanksWinWhenTheyArePermutations) {
  InprocJobOptions o;
  o.num_servers = 3;
  o.num_workers = 2;
  InprocJob job(o);
  ASSERT_TRUE(job.AddNode(job.ConfigFor(Role::kScheduler)).ok());
  // Created (and bound) in order, asking for ranks in reverse.
  std::vector<Postoffice*> servers;
  for (int i = 0; i < 3; ++i) {
    NodeConfig c = job.ConfigFor(Role::kServer);
    c.requested_rank = 2 - i;
    servers.push_back(*job.AddNode(c));
  }
  // Both workers ask for rank 0: not a permutation, so address order.
  for (int i = 0; i < 2; ++i) {
    NodeConfig c = job.ConfigFor(Role::kWorker);
    c.requested_rank = 0;
    ASSERT_TRUE(job.AddNode(c).ok());
  }
  ASSERT_TRUE(job.StartAll().ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(servers[i]->rank(), 2 - i);
  EXPECT_LT(job.worker(0)->port(), job.worker(1)->port());
  EXPECT_TRUE(job.FinalizeAll().ok());
}

TEST(PostofficeTest, SchedulerOnPortZeroWritesItsPort) {
  InprocJobOptions o;
  InprocJob job(o);
  NodeConfig c = job.ConfigFor(Role::kScheduler);
  c.root_port = 0;
  c.scheduler_port_file = std::string(std::getenv("TEST_TMPDIR")) + "/port";
  StatusOr<Postoffice*> sched = job.AddNode(c);
  ASSERT_TRUE(sched.ok()) << sched.status();
  std::ifstream in(c.scheduler_port_file);
  int port = -1;
  ASSERT_TRUE(in >> port);
  EXPECT_EQ(port, (*sched)->port());
  EXPECT_GT(port, 0);
}

TEST(PostofficeTest, BarriersOverGroupCombinations) {
  InprocJobOptions o;
  o.num_servers = 2;
  o.num_workers = 3;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  // Workers-only barrier: no worker passes before the last one enters.
  std::atomic<int> entered{0};
  std::atomic<bool> early_pass{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      entered++;
      Status s = job.worker(r)->Barrier(kWorkerGroup, kLong);
      EXPECT_TRUE(s.ok()) << s;
      if (entered.load() < 3) early_pass = true;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(early_pass.load());
  // Servers + scheduler, twice in a row.
  for (int round = 0; round < 2; ++round) {
    threads.clear();
    for (Postoffice* p : {job.scheduler(), job.server(0), job.server(1)}) {
      threads.emplace_back([p] {
        Status s = p->Barrier(kSchedulerGroup | kServerGroup, kLong);
        EXPECT_TRUE(s.ok()) << s;
      });
    }
    for (auto& t : threads) t.join();
  }
  Status not_member = job.worker(0)->Barrier(kServerGroup, kLong);
  EXPECT_EQ(not_member.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(not_member.message(), HasSubstr("not a member"));
  EXPECT_EQ(job.worker(0)->Barrier(9, kLong).code(),
            Status::Code::kInvalidArgument);
  // A barrier nobody else joins ends at its deadline, naming it.
  Status lonely =
      job.worker(0)->Barrier(kWorkerGroup, std::chrono::milliseconds(100));
  EXPECT_EQ(lonely.code(), Status::Code::kDeadlineExceeded);
  EXPECT_THAT(lonely.message(), HasSubstr("barrier over workers"));
}

TEST(PostofficeTest, DeadServerIsNamedByEveryone) {
  InprocJobOptions o;
  o.num_servers = 2;
  o.num_workers = 2;
  o.heartbeat_timeout_s = 0.5;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  Postoffice* dead = job.server(1);
  const std::string dead_name = dead->name();
  job.net()->Isolate(dead->port());
  // The scheduler notices; the others hear it from the scheduler. The
  // isolated server itself loses the scheduler.
  ASSERT_TRUE(job.WaitForFailures(5, kLong));
  const std::vector<std::string> f = job.Failures();
  int naming_dead = 0;
  for (const std::string& line : f) {
    if (line.find(dead_name + " is dead") != std::string::npos) {
      ++naming_dead;
    }
  }
  EXPECT_EQ(naming_dead, 4) << ::testing::PrintToString(f);
  // Calls after the failure return the reason.
  Status s = job.worker(0)->Barrier(kWorkerGroup, kLong);
  EXPECT_THAT(s.message(), HasSubstr(dead_name + " is dead"));
}

TEST(PostofficeTest, DeadSchedulerIsNamedByEveryone) {
  InprocJobOptions o;
  o.num_servers = 1;
  o.num_workers = 2;
  o.heartbeat_timeout_s = 0.5;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  const std::string sched = job.scheduler()->name();
  job.net()->Isolate(job.scheduler()->port());
  ASSERT_TRUE(job.WaitForFailures(3, kLong));
  int naming = 0;
  for (const std::string& line : job.Failures()) {
    if (line.find("scheduler (127.0.0.1:9000) is dead") !=
        std::string::npos) {
      ++naming;
    }
  }
  EXPECT_GE(naming, 3) << ::testing::PrintToString(job.Failures());
}

TEST(PostofficeTest, StartupDeadlineNamesMissingAndRegistered) {
  InprocJobOptions o;
  o.num_servers = 1;
  o.num_workers = 2;
  o.startup_timeout_s = 0.3;
  InprocJob job(o);
  ASSERT_TRUE(job.AddNode(job.ConfigFor(Role::kScheduler)).ok());
  ASSERT_TRUE(job.AddNode(job.ConfigFor(Role::kWorker)).ok());
  Status s = job.StartAll();
  EXPECT_EQ(s.code(), Status::Code::kDeadlineExceeded) << s;
  ASSERT_TRUE(job.WaitForFailures(2, kLong));
  for (const std::string& line : job.Failures()) {
    EXPECT_THAT(line, HasSubstr("1 of 2 workers and 1 of 1 servers missing"));
    EXPECT_THAT(line, HasSubstr("registered: worker at 127.0.0.1:"));
  }
}

TEST(PostofficeTest, MismatchedJobShapeIsRejected) {
  InprocJobOptions o;
  o.startup_timeout_s = 1;
  InprocJob job(o);
  NodeConfig odd = job.ConfigFor(Role::kWorker);
  odd.num_workers = 3;
  const Status s = StartRejected(&job, odd);
  EXPECT_THAT(s.message(), HasSubstr("DMLC_NUM_WORKER=3"));
}

TEST(PostofficeTest, StrangersAndGarbageAreDroppedAndTheJobGoesOn) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  Postoffice* server = job.server(0);
  InprocVan rogue(job.net(), "rogue");
  ASSERT_TRUE(rogue.Bind(0).ok());
  ASSERT_TRUE(rogue.Connect(1, "127.0.0.1", server->port(), "").ok());
  ASSERT_TRUE(rogue.Connect(2, "127.0.0.1", job.scheduler()->port(), "").ok());
  Message m;
  m.meta.set_command(wire::BARRIER);
  m.meta.set_sender(kSchedulerId);
  std::vector<std::vector<Blob>> junk = {
      {},
      {Blob::FromString("\xff\xff\xff garbage")},
      EncodeMessage(&m),
  };
  m.AddFrame(wire::KEYS, Blob::FromString("12345678"));
  std::vector<Blob> wrong_count = EncodeMessage(&m);
  wrong_count.pop_back();
  junk.push_back(wrong_count);
  for (int conn : {1, 2}) {
    for (const auto& frames : junk)
      ASSERT_TRUE(rogue.Send(conn, 0, frames).ok());
  }
  // Still serving: a barrier over everyone completes, nobody failed.
  ASSERT_TRUE(job.FinalizeAll().ok());
  EXPECT_TRUE(job.Failures().empty())
      << ::testing::PrintToString(job.Failures());
}

// A message a Van could not read (RawMessage::error): malformed input is
// dropped and the job goes on; a peer's message this node cannot read at
// all (its shared memory) fails the job at once, naming the peer, rather
// than leaving the peer to wait for an answer that cannot come.
TEST(PostofficeTest, AMessageFromAPeerThatCannotBeReadFailsTheJob) {
  InprocJobOptions o;
  o.num_workers = 1;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  const int worker = job.worker(0)->port(), scheduler = job.scheduler()->port();
  const std::string worker_name = job.worker(0)->name();
  std::atomic<int> marked{0};
  job.net()->SetEdit([&](int from, int to, RawMessage* msg) {
    if (from == worker && to == scheduler && marked.fetch_add(1) == 0) {
      msg->error = Status::InvalidArgument("shared-memory table names frame 9");
    }
  });
  while (marked.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(job.Failures().empty()) << ::testing::PrintToString(job.Failures());

  job.net()->SetEdit([&](int from, int to, RawMessage* msg) {
    if (from == worker && to == scheduler) {
      msg->error = Status::Unavailable(
          "cannot open the sender's shared memory /proc/1/fd/3: Permission denied");
    }
  });
  ASSERT_TRUE(job.WaitForFailures(3, kLong));
  job.net()->SetEdit(nullptr);
  for (const std::string& line : job.Failures()) {
    EXPECT_THAT(line, HasSubstr("cannot read a message from " + worker_name +
                                ": cannot open the sender's shared memory /proc/1/fd/3: "
                                "Permission denied (KVTRAIN_SHM_BYTES=0 turns shared memory off)"));
  }
}

TEST(PostofficeTest, AbortReachesEveryNode) {
  InprocJobOptions o;
  o.num_servers = 1;
  o.num_workers = 2;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  job.worker(1)->Abort("out of disk");
  ASSERT_TRUE(job.WaitForFailures(4, kLong));
  for (const std::string& line : job.Failures()) {
    EXPECT_THAT(line, HasSubstr("worker 1 (127.0.0.1:"));
    EXPECT_THAT(line, HasSubstr("out of disk"));
  }
}

TEST(PostofficeTest, CallsOutOfOrderAreErrors) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  Postoffice* w = job.nodes().back().get();
  EXPECT_EQ(w->Barrier(kWorkerGroup, kLong).code(),
            Status::Code::kFailedPrecondition);
  EXPECT_EQ(w->Finalize(kLong).code(), Status::Code::kFailedPrecondition);
  ASSERT_TRUE(job.StartAll().ok());
  EXPECT_EQ(w->Start().code(), Status::Code::kFailedPrecondition);
  ASSERT_TRUE(job.FinalizeAll().ok());
  EXPECT_TRUE(w->Finalize(kLong).ok());  // idempotent
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
