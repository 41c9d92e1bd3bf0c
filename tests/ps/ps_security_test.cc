// CURVE in real jobs on 127.0.0.1, and misconfigured jobs.
//  - A rogue that knows the scheduler's, a server's and a worker's ports
//    tries, with no key, with another job's key, and with the job's public
//    key but its own secret key, to register, push, pull and send control
//    messages (barrier, terminate, abort) while a job runs: every handshake
//    fails, nothing comes back, the nodes log the rogue's address (rate-
//    limited), and the job's sums stay exact.
//  - A worker of another job (another key; or, insecure, another
//    KVTRAIN_JOB_ID), a worker without CURVE, and a worker whose
//    DMLC_NUM_WORKER disagrees fail with a clear error, no hang.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "net/curve.h"
#include "transport/ps/wire.pb.h"
#include "tests/ps/ps_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

// The messages a rogue would send if it got through: a registration, a push
// and a pull claiming to be worker 0, and control messages.
std::vector<std::vector<std::string>> RogueMessages() {
  std::vector<std::vector<std::string>> msgs;
  wire::Header reg;
  reg.set_command(wire::REGISTER);
  wire::NodeInfo* n = reg.mutable_control()->add_nodes();
  n->set_role(wire::WORKER);
  n->set_host("127.0.0.1");
  n->set_port(1);
  n->set_num_workers(2);
  n->set_num_servers(2);
  n->set_token("w-rogue");
  msgs.push_back({reg.SerializeAsString()});
  for (bool push : {true, false}) {
    wire::Header h;
    h.set_command(wire::DATA);
    h.set_sender(9);
    h.set_recipient(8);
    h.set_request(true);
    h.set_push(push);
    h.set_pull(!push);
    wire::Frame* f = h.add_data();
    f->set_kind(wire::KEYS);
    f->set_bytes(8);
    std::vector<std::string> m = {h.SerializeAsString(), std::string(8, '\0')};
    if (push) {
      wire::Frame* v = h.add_data();
      v->set_kind(wire::VALUES);
      v->set_bytes(4096);
      m = {h.SerializeAsString(), std::string(8, '\0'),
           std::string(4096, '\x7f')};
    }
    msgs.push_back(m);
  }
  for (wire::Command c : {wire::BARRIER, wire::TERMINATE, wire::ABORT}) {
    wire::Header h;
    h.set_command(c);
    h.set_sender(9);
    h.set_recipient(1);
    h.mutable_control()->set_barrier_group(7);
    h.mutable_control()->set_barrier_seq(1);
    h.mutable_control()->set_reason("rogue says stop");
    msgs.push_back({h.SerializeAsString()});
  }
  return msgs;
}

enum class Rogue { kNoKey, kOtherJobKey, kLeakedPublicKey };

// One rogue connection to `port`; it reconnects every 10 ms when refused.
void* RogueSocket(void* ctx, int port, Rogue kind,
                  const net::JobKey& job) {
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  const int zero = 0, ivl = 10, timeout = 10;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof(ivl));
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  zmq_setsockopt(s, ZMQ_ROUTING_ID, "w-rogue", 7);
  const net::JobKey own = net::JobKey::Generate();
  if (kind == Rogue::kOtherJobKey) {
    CHECK(net::SecureSocket(s, own, /*is_server=*/false).ok());
  } else if (kind == Rogue::kLeakedPublicKey) {
    const std::string& pub = job.public_z85();
    zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, pub.c_str(), pub.size() + 1);
    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, own.public_z85().c_str(), 41);
    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, own.secret_z85().c_str(), 41);
  }
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
  CHECK_EQ(zmq_connect(s, ep.c_str()), 0);
  return s;
}

int CountLines(const std::string& log, const std::string& text) {
  int n = 0;
  for (size_t p = log.find(text); p != std::string::npos;
       p = log.find(text, p + 1)) {
    ++n;
  }
  return n;
}

TEST(PsSecurityTest, RogueWithoutTheKeyGetsNothingThroughAndIsLogged) {
  LocalJobOptions o = PsJob(2, 2, {"--rounds=10", "--pause_ms=500"});
  o.fixed_node_ports = true;
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  for (JobNode& n : (*job)->nodes()) {
    ASSERT_TRUE(WaitForLog(n.process.get(), " started\n")) << (*job)->Report();
  }
  const auto began = Clock::now();
  const net::JobKey key =
      net::JobKey::FromSecretZ85((*job)->job_key(), "the job's key").value();
  const int targets[] = {(*job)->root_port(), (*job)->server(0).node_port,
                         (*job)->worker(0).node_port};
  void* ctx = zmq_ctx_new();
  std::vector<void*> rogues;
  for (int port : targets) {
    for (Rogue kind :
         {Rogue::kNoKey, Rogue::kOtherJobKey, Rogue::kLeakedPublicKey}) {
      rogues.push_back(RogueSocket(ctx, port, kind, key));
    }
  }
  // Attack for 3 s: every message, over and over; listen for any answer.
  int answers = 0;
  const std::vector<std::vector<std::string>> msgs = RogueMessages();
  for (auto end = Clock::now() + std::chrono::seconds(3); Clock::now() < end;) {
    for (void* s : rogues) {
      for (const auto& m : msgs) {
        for (size_t i = 0; i < m.size(); ++i) {
          zmq_send(s, m[i].data(), m[i].size(),
                   (i + 1 < m.size() ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
        }
      }
      char buf[64];
      if (zmq_recv(s, buf, sizeof(buf), ZMQ_DONTWAIT) >= 0) ++answers;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(answers, 0);
  for (void* s : rogues) zmq_close(s);
  zmq_ctx_term(ctx);

  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  for (int w = 0; w < 2; ++w) {
    const std::string log = (*job)->worker(w).process->ReadLog();
    EXPECT_THAT(log, HasSubstr("single key round 10: 1 keys, 4096 values exact"));
    EXPECT_THAT(log, HasSubstr("one big key round 10"));
  }
  const double seconds =
      std::chrono::duration<double>(Clock::now() - began).count();
  Process* attacked[] = {(*job)->scheduler().process.get(),
                         (*job)->server(0).process.get(),
                         (*job)->worker(0).process.get()};
  for (Process* p : attacked) {
    const std::string log = p->ReadLog();
    // Nothing the rogue sent reached the node's message layer.
    EXPECT_THAT(log, ::testing::Not(HasSubstr("w-rogue"))) << log;
    EXPECT_THAT(log, ::testing::Not(HasSubstr("rogue says stop")));
    // Each kind of refusal is logged with the rogue's address.
    EXPECT_TRUE(std::regex_search(
        log, std::regex("refused a connection from 127\\.0\\.0\\.1:[0-9]+: "
                        "its CURVE handshake is not made with this job's "
                        "key")))
        << log;
    // The rogue without CURVE: whichever side notices the mismatch first.
    EXPECT_TRUE(
        log.find("it does not use CURVE (it has no job key") !=
            std::string::npos ||
        log.find("it closed the connection during the handshake (as a peer "
                 "without CURVE") != std::string::npos)
        << log;
    EXPECT_THAT(log, HasSubstr("refused a connection from 127.0.0.1: its "
                               "CURVE key is not this job's key"));
    // Rate-limited: two limiters (handshakes, ZAP) of 10 lines per 10 s,
    // although the rogue was refused hundreds of times.
    const int lines = CountLines(log, "refused a connection from");
    const int windows = static_cast<int>(seconds / 10) + 1;
    EXPECT_LE(lines, 2 * 10 * windows) << log;
    EXPECT_GE(lines, 3);
  }
}

// The TCP ports process `pid` listens on (its descriptors' socket inodes
// matched against /proc/net/tcp and tcp6, state LISTEN).
std::set<int> ListeningPorts(pid_t pid) {
  std::set<std::string> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      char target[128];
      const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      const std::string t(target);
      if (t.rfind("socket:[", 0) == 0) inodes.insert(t.substr(8, t.size() - 9));
    }
    closedir(d);
  }
  std::set<int> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the heading
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >>
            timeout >> inode)) {
        continue;
      }
      if (state == "0A" && inodes.count(inode) != 0) {
        ports.insert(std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16));
      }
    }
  }
  return ports;
}

int64_t ResidentKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// ZeroMQ's NULL greeting and READY, as a keyless client sends them, then
// 1 MiB parts of a message it never finishes, 256 MiB in all. Returns the
// bytes the node took before it closed the connection.
int64_t FloodWithAnUnfinishedMessage(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return 0;
  }
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string hello(64, '\0');
  hello[0] = '\xFF';
  hello[9] = '\x7F';
  hello[10] = 3;
  std::memcpy(&hello[12], "NULL", 4);
  const std::string props = std::string("\x05READY\x0bSocket-Type\0\0\0\x06", 22) + "DEALER";
  hello += std::string{'\x04', static_cast<char>(props.size())} + props;
  std::string part(9 + (1 << 20), 'x');
  part[0] = '\x03';
  for (int i = 1; i < 9; ++i) part[i] = 0;
  part[6] = '\x10';  // 1 MiB, big-endian
  int64_t took = 0;
  auto send_all = [&](const std::string& b) {
    size_t at = 0;
    while (at < b.size()) {
      const ssize_t n = send(fd, b.data() + at, b.size() - at, MSG_NOSIGNAL);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
      took += n;
    }
    return true;
  };
  if (send_all(hello)) {
    for (int i = 0; i < 256 && send_all(part); ++i) {
    }
  }
  close(fd);
  return took;
}

// The keyless flood of #46 against a running job: the sealed lanes of the
// scheduler, a server and a worker (their second TCP port, found as a
// stranger on the host would) each get 256 MiB of a message that never
// ends. Before, each node took all of it and grew by as much; now each
// closes the connection at the greeting, stays within 64 MB of where it
// was, and the job's sums come out exact, as in an unattacked run.
TEST(PsSecurityTest, AKeylessFloodOnEveryLaneLeavesTheJobWhole) {
  LocalJobOptions o = PsJob(2, 2, {"--rounds=10", "--pause_ms=300"});
  o.fixed_node_ports = true;
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  for (JobNode& n : (*job)->nodes()) {
    ASSERT_TRUE(WaitForLog(n.process.get(), " started\n")) << (*job)->Report();
  }
  struct Target {
    Process* process;
    int node_port;
  };
  const Target targets[] = {{(*job)->scheduler().process.get(), (*job)->root_port()},
                            {(*job)->server(0).process.get(), (*job)->server(0).node_port},
                            {(*job)->worker(0).process.get(), (*job)->worker(0).node_port}};
  for (const Target& t : targets) {
    std::set<int> lanes = ListeningPorts(t.process->pid());
    lanes.erase(t.node_port);
    ASSERT_EQ(lanes.size(), 1u) << "the node's lane port, besides " << t.node_port;
    const int64_t before = ResidentKb(t.process->pid());
    const int64_t took = FloodWithAnUnfinishedMessage(*lanes.begin());
    const int64_t grown = ResidentKb(t.process->pid()) - before;
    EXPECT_LT(took, 64 << 20) << "the node took " << took << " bytes";
    EXPECT_LT(grown, 64 << 10) << "the node grew by " << grown << " KiB";
  }
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  for (int w = 0; w < 2; ++w) {
    const std::string log = (*job)->worker(w).process->ReadLog();
    EXPECT_THAT(log, HasSubstr("single key round 10: 1 keys, 4096 values exact"));
    EXPECT_THAT(log, HasSubstr("one big key round 10"));
  }
}

// A node started with `env` changes (role worker) against `job`'s scheduler.
std::unique_ptr<Process> StartWorker(LocalJob* job,
                                     std::map<std::string, std::string> env,
                                     const std::string& name) {
  ProcessOptions o;
  o.argv = {TestNodeBinary()};
  o.env = {{"DMLC_ROLE", "worker"},
           {"DMLC_PS_ROOT_URI", "127.0.0.1"},
           {"DMLC_PS_ROOT_PORT", std::to_string(job->root_port())},
           {"DMLC_NUM_WORKER", "1"},
           {"DMLC_NUM_SERVER", "1"},
           {"PS_HEARTBEAT_INTERVAL", "0.5"},
           {"KVTRAIN_STARTUP_TIMEOUT", "120"}};
  for (auto& [k, v] : env) o.env[k] = v;
  o.log_path = job->log_dir() + "/" + name + ".log";
  return Process::Spawn(o).value();
}

// A job of 1 server and 1 worker whose worker is not started: the scheduler
// waits (long) for one.
std::unique_ptr<LocalJob> WaitingJob(bool secure, const std::string& job_id) {
  LocalJobOptions o = PsJob(1, 1);
  o.workers_to_start = 0;
  o.secure = secure;
  if (!job_id.empty()) o.env["KVTRAIN_JOB_ID"] = job_id;
  return LocalJob::Start(o).value();
}

TEST(PsSecurityTest, WorkerWithAnotherJobsKeyFailsClearly) {
  auto job = WaitingJob(/*secure=*/true, "");
  auto w = StartWorker(
      job.get(), {{"KVTRAIN_JOB_KEY", net::JobKey::Generate().secret_z85()}},
      "other-key");
  // Well before the start-up deadline (120 s): refused 3 times, then exits.
  StatusOr<ExitInfo> e = w->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(e.ok()) << "the worker hangs:\n" << w->ReadLog();
  EXPECT_EQ(e->code, 3) << w->ReadLog();
  EXPECT_THAT(w->ReadLog(), HasSubstr("scheduler"));
  EXPECT_THAT(w->ReadLog(), HasSubstr("refused the connection"));
  EXPECT_THAT(w->ReadLog(),
              HasSubstr("does not accept this process's job key"));
  EXPECT_THAT(job->scheduler().process->ReadLog(),
              HasSubstr("its CURVE handshake is not made with this job's key"));
}

TEST(PsSecurityTest, WorkerWithoutCurveFailsClearly) {
  auto job = WaitingJob(/*secure=*/true, "");
  auto w = StartWorker(job.get(), {{"KVTRAIN_INSECURE", "1"}}, "insecure");
  StatusOr<ExitInfo> e = w->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(e.ok()) << "the worker hangs:\n" << w->ReadLog();
  EXPECT_EQ(e->code, 3) << w->ReadLog();
  EXPECT_THAT(w->ReadLog(), HasSubstr("KVTRAIN_INSECURE=1: CURVE security is off"));
  EXPECT_THAT(w->ReadLog(), HasSubstr("refused the connection"));
  EXPECT_THAT(w->ReadLog(), HasSubstr("it requires CURVE but this process "
                                      "runs with KVTRAIN_INSECURE=1"));
}

TEST(PsSecurityTest, NoKeyAtAllIsAClearError) {
  auto job = WaitingJob(/*secure=*/true, "");
  auto w = StartWorker(job.get(), {}, "no-key");
  StatusOr<ExitInfo> e = w->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(e.ok());
  EXPECT_NE(e->code, 0);
  EXPECT_THAT(w->ReadLog(), HasSubstr("no job key: set KVTRAIN_JOB_KEY"));
}

TEST(PsSecurityTest, InsecureWorkerOfAnotherJobIsRejectedByJobId) {
  auto job = WaitingJob(/*secure=*/false, "job-a");
  auto w = StartWorker(job.get(),
                       {{"KVTRAIN_INSECURE", "1"}, {"KVTRAIN_JOB_ID", "job-b"}},
                       "other-job");
  StatusOr<ExitInfo> e = w->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(e.ok()) << "the worker hangs:\n" << w->ReadLog();
  EXPECT_EQ(e->code, 3) << w->ReadLog();
  const std::string why =
      "it belongs to job \"job-b\" (KVTRAIN_JOB_ID) but this scheduler runs "
      "job \"job-a\"";
  EXPECT_THAT(w->ReadLog(), HasSubstr(why));
  EXPECT_THAT(job->scheduler().process->ReadLog(), HasSubstr(why));
}

TEST(PsSecurityTest, DisagreeingNumWorkerIsNamedAndNothingHangs) {
  LocalJobOptions o = PsJob(1, 2);
  o.env["KVTRAIN_STARTUP_TIMEOUT"] = "8";
  o.customize = [](Role role, int index,
                   std::map<std::string, std::string>* env) {
    if (role == Role::kWorker && index == 1) (*env)["DMLC_NUM_WORKER"] = "3";
  };
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  const std::string bad = (*job)->worker(1).process->ReadLog();
  EXPECT_NE((*job)->worker(1).process->exit_info()->code, 0);
  EXPECT_THAT(bad, HasSubstr("it was started with DMLC_NUM_WORKER=3 and "
                             "DMLC_NUM_SERVER=1 but the scheduler with 2 and "
                             "1"));
  // The others fail at the start-up deadline, naming who is missing.
  for (JobNode* n : {&(*job)->scheduler(), &(*job)->server(0),
                     &(*job)->worker(0)}) {
    EXPECT_NE(n->process->exit_info()->code, 0) << (*job)->Report();
    EXPECT_THAT(n->process->ReadLog(), HasSubstr("start-up deadline"))
        << (*job)->Report();
  }
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
