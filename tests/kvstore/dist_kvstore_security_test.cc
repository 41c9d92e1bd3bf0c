// A dist_sync KVStore job (2 workers, 2 servers, real processes on
// 127.0.0.1, CURVE on as under launch.py) while rogue clients that know
// every node's port keep connecting without the key or with another job's
// key and sending pushes: the closed-form result is still exact, and every
// node logs the rogue's address, rate-limited.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <atomic>
#include <thread>

#include "net/curve.h"
#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;

// Connects to every port again and again (no key, then another key),
// sending bytes, until `stop`. Returns the number of connections tried.
int64_t Attack(const std::vector<int>& ports, const std::atomic<bool>& stop) {
  void* ctx = zmq_ctx_new();
  int64_t tries = 0;
  const std::string junk(1024, '\x42');
  for (int round = 0; !stop.load(); ++round) {
    std::vector<void*> sockets;
    for (int port : ports) {
      void* s = zmq_socket(ctx, ZMQ_DEALER);
      const int zero = 0;
      zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
      if (round % 2 == 1) {
        CHECK(net::SecureSocket(s, net::JobKey::Generate(), false).ok());
      }
      const std::string ep = "tcp://127.0.0.1:" + std::to_string(port);
      zmq_connect(s, ep.c_str());
      zmq_send(s, junk.data(), junk.size(), ZMQ_DONTWAIT);
      sockets.push_back(s);
      ++tries;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    for (void* s : sockets) zmq_close(s);
  }
  zmq_ctx_term(ctx);
  return tries;
}

TEST(DistKVStoreSecurityTest, RoguesDoNotChangeTheClosedForm) {
  LocalJobOptions o;
  o.binary = RunfilePath("tests/kvstore/kvstore_test_node");
  o.args = {"--type=dist_sync", "--scenario=closed_form", "--steps=40"};
  o.num_servers = 2;
  o.num_workers = 2;
  o.fixed_node_ports = true;
  o.env = {{"PS_HEARTBEAT_INTERVAL", "0.5"},
           {"PS_HEARTBEAT_TIMEOUT", "60"},
           {"KVTRAIN_STARTUP_TIMEOUT", "120"},
           {"KVTRAIN_BIGARRAY_BOUND", "1000"}};
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<int> ports = {(*job)->root_port()};
  for (const JobNode& n : (*job)->nodes()) {
    if (n.role != Role::kScheduler) ports.push_back(n.node_port);
  }
  const auto began = std::chrono::steady_clock::now();
  std::atomic<bool> stop{false};
  int64_t tries = 0;
  std::thread rogue([&] { tries = Attack(ports, stop); });
  const bool done = (*job)->WaitAll(std::chrono::seconds(240));
  stop.store(true);
  rogue.join();
  ASSERT_TRUE(done) << (*job)->Report();
  ASSERT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  for (int w = 0; w < 2; ++w) {
    EXPECT_THAT((*job)->worker(w).process->ReadLog(),
                HasSubstr("closed form exact: 40 steps, 2 workers"));
  }
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - began)
                             .count();
  const int64_t tries_per_node = tries / static_cast<int64_t>(ports.size());
  EXPECT_GT(tries_per_node, 10);
  for (const JobNode& n : (*job)->nodes()) {
    const std::string log = n.process->ReadLog();
    EXPECT_THAT(log, HasSubstr("refused a connection from 127.0.0.1:")) << n.name;
    // Rate-limited: two limiters (handshakes, ZAP) of 10 lines per 10 s.
    int lines = 0;
    for (size_t p = log.find("refused a connection"); p != std::string::npos;
         p = log.find("refused a connection", p + 1)) {
      ++lines;
    }
    EXPECT_LE(lines, 2 * 10 * (static_cast<int>(seconds / 10) + 1)) << n.name;
    if (tries_per_node > 40) {
      EXPECT_LT(lines, tries_per_node) << n.name;
    }
  }
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
