// Malformed input from a raw ZeroMQ client (and raw TCP bytes) sent to the
// scheduler, a server and a worker while a job runs: random bytes, a
// truncated header, a wrong frame count, frame sizes disagreeing with the
// header, an unknown command, a message from an unregistered peer, bogus
// registrations. The raw client holds the job's key (it is a job member gone
// bad; strangers are tests/ps/ps_security_test.cc's). Every node logs and
// drops them, keeps serving, and the job's sums stay exact.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "net/curve.h"
#include "net/shm.h"
#include "transport/ps/wire.pb.h"
#include "tests/ps/ps_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

using Frames = std::vector<std::string>;

std::string Header(wire::Command cmd, int data_frames, int64_t frame_bytes) {
  wire::Header h;
  h.set_command(cmd);
  h.set_sender(9);  // claims to be worker 0
  h.set_recipient(8);
  h.set_request(true);
  h.set_push(true);
  for (int i = 0; i < data_frames; ++i) {
    wire::Frame* f = h.add_data();
    f->set_kind(i == 0 ? wire::KEYS : wire::VALUES);
    f->set_bytes(frame_bytes);
  }
  return h.SerializeAsString();
}

// A header cut in half.
std::string TruncatedHeader() {
  wire::Header big;
  big.set_command(wire::DATA);
  big.set_body(std::string(200, 'b'));
  const std::string whole = big.SerializeAsString();
  return whole.substr(0, whole.size() / 2);
}

// A shared-memory table naming memory of no process we could read: over
// TCP it is dropped before anything is opened, not fatal.
std::string ForgedShmTable() {
  net::ShmRef arena;
  arena.pid = 1;
  arena.fd = 0;
  arena.arena_id = 7;
  arena.arena_bytes = 1 << 20;
  return net::EncodeShmTable(arena, {{0, 128, 4096}});
}

// The attack. A node logs up to 10 drops per 10 s (the rest are counted as
// suppressed), so one burst is logged whole.
std::vector<Frames> BadMessages() {
  wire::Header unknown;
  unknown.set_command(static_cast<wire::Command>(99));
  return {
      {std::string(64, '\xff')},                         // random bytes
      {TruncatedHeader()},                               // truncated
      {Header(wire::DATA, 2, 8), std::string(8, 'k')},   // frame count
      {Header(wire::DATA, 1, 16), std::string(8, 'k')},  // frame size
      {unknown.SerializeAsString()},                     // command 99
      {Header(wire::DATA, 2, 8), std::string(8, '\1'), std::string(8, '\2')},
      {""},
      Frames(300, ""),  // empty first frame: no shared-memory table
      {"", "KVS1 but not a table"},
      {"", ForgedShmTable(), ""},
  };
}

void SendAll(void* socket, const std::vector<Frames>& msgs) {
  for (const Frames& f : msgs) {
    for (size_t i = 0; i < f.size(); ++i) {
      zmq_send(socket, f[i].data(), f[i].size(),
               i + 1 < f.size() ? ZMQ_SNDMORE : 0);
    }
  }
}

void SendRawTcp(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string junk(1000, '\x42');
    ssize_t unused = write(fd, junk.data(), junk.size());
    (void)unused;
  }
  close(fd);
}

std::vector<Frames> BadRegistrations(int num_workers, int num_servers) {
  wire::Header empty;
  empty.set_command(wire::REGISTER);
  wire::Header late;
  late.set_command(wire::REGISTER);
  wire::NodeInfo* n = late.mutable_control()->add_nodes();
  n->set_role(wire::WORKER);
  n->set_host("127.0.0.1");
  n->set_port(1);
  n->set_num_workers(num_workers);
  n->set_num_servers(num_servers);
  n->set_token("w-rogue");
  return {{empty.SerializeAsString()}, {late.SerializeAsString()}};
}

TEST(PsMalformedTest, BadInputIsDroppedAndTheSumsStayExact) {
  LocalJobOptions o = PsJob(2, 2, {"--rounds=4", "--pause_ms=400"});
  o.fixed_node_ports = true;
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  for (JobNode& n : (*job)->nodes()) {
    ASSERT_TRUE(WaitForLog(n.process.get(), " started\n")) << (*job)->Report();
  }
  const int targets[] = {(*job)->root_port(), (*job)->server(0).node_port,
                         (*job)->worker(0).node_port};
  void* ctx = zmq_ctx_new();
  std::vector<void*> sockets;
  StatusOr<net::JobKey> key =
      net::JobKey::FromSecretZ85((*job)->job_key(), "the job's key");
  ASSERT_TRUE(key.ok()) << key.status();
  for (int port : targets) {
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    ASSERT_TRUE(net::SecureSocket(s, *key, /*is_server=*/false).ok());
    const std::string id = "w-rogue";
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id.data(), id.size());
    const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
    ASSERT_EQ(zmq_connect(s, ep.c_str()), 0);
    sockets.push_back(s);
  }
  Process* attacked[] = {(*job)->scheduler().process.get(),
                         (*job)->server(0).process.get(),
                         (*job)->worker(0).process.get()};
  // First burst, logged whole; wait for it before sending anything else.
  for (size_t i = 0; i < sockets.size(); ++i)
    SendAll(sockets[i], BadMessages());
  for (Process* p : attacked) {
    EXPECT_TRUE(WaitForLog(p, "a shared-memory table over TCP")) << p->ReadLog();
  }
  // More while the job goes on: raw TCP bytes (a failed handshake), repeats,
  // bogus registrations.
  for (int burst = 0; burst < 3; ++burst) {
    for (size_t i = 0; i < sockets.size(); ++i) {
      SendRawTcp(targets[i]);
      SendAll(sockets[i], BadMessages());
    }
    SendAll(sockets[0], BadRegistrations(2, 2));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_TRUE((*job)->WaitAll(kJobDeadline)) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  for (void* s : sockets) {
    const int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
  for (Process* p : attacked) {
    const std::string log = p->ReadLog();
    EXPECT_THAT(log,
                HasSubstr("dropped a message from connection w-rogue: "
                          "header frame (64 bytes) is not a valid header"));
    EXPECT_THAT(log, HasSubstr("is not a valid header"));
    EXPECT_THAT(log, HasSubstr("wrong frame count: the header describes 2 "
                               "data frames but 1 follow"));
    EXPECT_THAT(log, HasSubstr("data frame 0 has 8 bytes but the header "
                               "says 16"));
    EXPECT_THAT(log, HasSubstr("unknown command 99"));
    EXPECT_THAT(log, HasSubstr("header frame (" +
                               std::to_string(TruncatedHeader().size()) +
                               " bytes) is not a valid header"));
    EXPECT_THAT(log, HasSubstr("dropped a message from connection w-rogue: "
                               "unregistered peer"));
  }
  const std::string sched = (*job)->scheduler().process->ReadLog();
  EXPECT_THAT(sched, HasSubstr("dropped a malformed registration from "
                               "connection w-rogue"));
  EXPECT_THAT(sched, HasSubstr("rejected the registration of a worker at "
                               "127.0.0.1:1: the job already has all its "
                               "nodes"));
  for (int w = 0; w < 2; ++w) {
    EXPECT_THAT((*job)->worker(w).process->ReadLog(),
                HasSubstr("one big key round 4"));
  }
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
