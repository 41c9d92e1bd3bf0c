// 10,000 random and mutated messages thrown at each node of a running
// dist_sync KVStore job (scheduler, 2 servers, 2 workers of
// tests/kvstore:kvstore_test_node, real processes on 127.0.0.1), from a rogue
// ZeroMQ DEALER client in this test process: valid messages of every command
// with bytes flipped, truncated headers, missing and extra frames, huge and
// negative frame lengths, bogus commands, ids, ranks and keys, headers that
// disagree with their data frames, random bytes. The job must finish with
// every pulled value equal to the closed form, which is what a clean run
// computes (exact float sums), every node having stayed up.
//
// The job runs with KVTRAIN_INSECURE=1: these messages are meant for the
// decoders behind the connection handshake, so the transport's
// authentication must not stop them first.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <random>
#include <thread>

#include "transport/ps/wire.pb.h"
#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {
namespace {

using ::testing::HasSubstr;
using Frames = std::vector<std::string>;

constexpr int kMessagesPerNode = 10000;
constexpr int kSteps = 3000;

std::string Bytes(const std::vector<uint64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
}

// A well-formed message of a random command, as a node of the job would
// send it to node `to` (only the connection gives the rogue away).
Frames Valid(std::mt19937_64& rng, int to) {
  wire::Header h;
  h.set_sender(rng() % 2 ? 9 : 1);
  h.set_recipient(to);
  h.set_job_id("job-" + std::to_string(rng() % 3));
  Frames data;
  const int kind = rng() % 8;
  h.set_command(static_cast<wire::Command>(kind));
  wire::Control* c = h.mutable_control();
  switch (kind) {
    case wire::DATA: {
      h.set_request(true);
      h.set_push(rng() % 2);
      h.set_pull(!h.push() || rng() % 2);
      h.set_timestamp(static_cast<int64_t>(rng() % 100));
      std::vector<uint64_t> keys = {rng() % 8, 100 + rng() % 8};
      data.push_back(Bytes(keys));
      data.push_back(std::string(8 * (1 + rng() % 4), '\x01'));
      break;
    }
    case wire::REGISTER:
    case wire::NODE_TABLE:
      for (int i = 0; i < 1 + static_cast<int>(rng() % 4); ++i) {
        wire::NodeInfo* n = c->add_nodes();
        n->set_role(static_cast<wire::Role>(rng() % 4));
        n->set_rank(static_cast<int>(rng() % 4) - 1);
        n->set_id(static_cast<int>(rng() % 12));
        n->set_host("127.0.0.1");
        n->set_port(static_cast<int>(rng() % 65536));
        n->set_num_workers(2);
        n->set_num_servers(2);
        n->set_token("rogue-" + std::to_string(rng() % 4));
      }
      break;
    case wire::BARRIER:
    case wire::BARRIER_DONE:
      c->set_barrier_group(static_cast<int>(rng() % 8));
      c->set_barrier_seq(static_cast<int64_t>(rng() % 5));
      break;
    case wire::ABORT:
      c->set_reason("rogue abort");
      break;
    default:
      break;
  }
  for (const std::string& d : data) {
    wire::Frame* f = h.add_data();
    f->set_kind(data.size() == 1 || &d == &data[0] ? wire::KEYS : wire::VALUES);
    f->set_bytes(static_cast<int64_t>(d.size()));
  }
  Frames out = {h.SerializeAsString()};
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string RandomBytes(std::mt19937_64& rng, size_t max) {
  std::string s(rng() % (max + 1), '\0');
  for (char& ch : s) ch = static_cast<char>(rng());
  return s;
}

// One attack message: a valid one, mutated one of several ways.
Frames Attack(std::mt19937_64& rng, int to) {
  Frames m = Valid(rng, to);
  switch (rng() % 9) {
    case 0:  // random frames
      m.assign(1 + rng() % 3, "");
      for (std::string& f : m) f = RandomBytes(rng, 300);
      break;
    case 1:  // flipped bytes
      for (int i = 0; i < 1 + static_cast<int>(rng() % 8); ++i) {
        std::string& f = m[rng() % m.size()];
        if (!f.empty()) f[rng() % f.size()] ^= static_cast<char>(1 + rng() % 255);
      }
      break;
    case 2:  // truncated header
      m[0].resize(rng() % (m[0].size() + 1));
      break;
    case 3:  // a missing or an extra frame
      if (m.size() > 1 && rng() % 2) {
        m.pop_back();
      } else {
        m.push_back(RandomBytes(rng, 64));
      }
      break;
    case 4: {  // huge or negative frame lengths in an otherwise valid header
      wire::Header h;
      h.ParseFromString(m[0]);
      if (h.data_size() == 0) h.add_data()->set_kind(wire::KEYS), m.push_back("12345678");
      const int64_t lens[] = {int64_t{1} << 40, -8, INT64_MAX, INT64_MIN, 7};
      h.mutable_data(rng() % h.data_size())->set_bytes(lens[rng() % 5]);
      m[0] = h.SerializeAsString();
      break;
    }
    case 5: {  // bogus command, ids and app
      wire::Header h;
      h.ParseFromString(m[0]);
      h.set_command(static_cast<wire::Command>(rng() % 20));
      h.set_sender(static_cast<int>(rng() % 40) - 5);
      h.set_recipient(static_cast<int>(rng() % 40) - 5);
      h.set_app_id(static_cast<int>(rng() % 4));
      m[0] = h.SerializeAsString();
      break;
    }
    case 6: {  // keys frame that is not uint64s, unsorted keys, bad lens
      wire::Header h;
      h.ParseFromString(m[0]);
      h.set_command(wire::DATA);
      h.clear_data();
      Frames data = {Bytes({rng(), rng() % 5}), RandomBytes(rng, 40),
                     Bytes({rng(), uint64_t{1} << 63})};
      const wire::FrameKind kinds[] = {wire::KEYS, wire::VALUES, wire::LENS};
      for (int i = 0; i < 3; ++i) {
        if (i == 0 && rng() % 3 == 0) data[0].resize(5);
        h.add_data()->set_kind(kinds[i]);
        h.mutable_data(i)->set_bytes(static_cast<int64_t>(data[i].size()));
      }
      m = {h.SerializeAsString()};
      m.insert(m.end(), data.begin(), data.end());
      break;
    }
    case 7: {  // a header that describes other frames than follow
      wire::Header h;
      h.ParseFromString(m[0]);
      for (int i = 0; i < h.data_size(); ++i) h.mutable_data(i)->set_bytes(16);
      m[0] = h.SerializeAsString();
      break;
    }
    default:  // the valid message as is (from an unregistered connection)
      break;
  }
  return m;
}

TEST(MalformedJobTest, TenThousandBadMessagesPerNodeLeaveTheSumsExact) {
  LocalJobOptions o;
  o.binary = RunfilePath("tests/kvstore/kvstore_test_node");
  o.args = {"--type=dist_sync", "--scenario=closed_form", "--steps=" + std::to_string(kSteps)};
  o.num_servers = 2;
  o.num_workers = 2;
  o.fixed_node_ports = true;
  o.env = {{"PS_VERBOSE", "1"},
           {"KVTRAIN_INSECURE", "1"},
           {"PS_HEARTBEAT_INTERVAL", "0.5"},
           {"PS_HEARTBEAT_TIMEOUT", "60"},
           {"KVTRAIN_STARTUP_TIMEOUT", "120"},
           {"KVTRAIN_BIGARRAY_BOUND", "1000"}};
  auto job = LocalJob::Start(o);
  ASSERT_TRUE(job.ok()) << job.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (JobNode& n : (*job)->nodes()) {
    while (n.process->ReadLog().find("rank") == std::string::npos) {
      ASSERT_TRUE(n.process->Alive()) << (*job)->Report();
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << (*job)->Report();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  struct Target {
    JobNode* node;
    int port;
    int id;
  };
  std::vector<Target> targets = {{&(*job)->scheduler(), (*job)->root_port(), 1}};
  for (int i = 0; i < 2; ++i) {
    targets.push_back({&(*job)->server(i), (*job)->server(i).node_port, 8 + 2 * i});
    targets.push_back({&(*job)->worker(i), (*job)->worker(i).node_port, 9 + 2 * i});
  }
  void* ctx = zmq_ctx_new();
  std::vector<void*> sockets;
  for (const Target& t : targets) {
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    const int hwm = 2 * kMessagesPerNode, linger = 60000;
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    const std::string id = "rogue-" + std::to_string(t.port);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id.data(), id.size());
    ASSERT_EQ(zmq_connect(s, ("tcp://127.0.0.1:" + std::to_string(t.port)).c_str()), 0);
    sockets.push_back(s);
  }
  std::mt19937_64 rng(2024);
  for (int i = 0; i < kMessagesPerNode; ++i) {
    for (size_t t = 0; t < targets.size(); ++t) {
      const Frames m = Attack(rng, targets[t].id);
      for (size_t f = 0; f < m.size(); ++f) {
        ASSERT_GE(zmq_send(sockets[t], m[f].data(), m[f].size(),
                           f + 1 < m.size() ? ZMQ_SNDMORE : 0), 0)
            << zmq_strerror(zmq_errno());
      }
    }
  }
  // Closing waits (up to the linger) until every message went out.
  for (void* s : sockets) zmq_close(s);
  zmq_ctx_term(ctx);
  int running = 0;
  for (const Target& t : targets) running += t.node->process->Alive() ? 1 : 0;
  std::printf("%d messages sent to each of %zu nodes; %d nodes still running\n",
              kMessagesPerNode, targets.size(), running);

  ASSERT_TRUE((*job)->WaitAll(std::chrono::seconds(600))) << (*job)->Report();
  EXPECT_TRUE((*job)->AllSucceeded()) << (*job)->Report();
  // The attack hit a running job: the workers were still stepping.
  EXPECT_GE(running, 3) << "the job ended before the attack; raise kSteps";
  for (int w = 0; w < 2; ++w) {
    EXPECT_THAT((*job)->worker(w).process->ReadLog(),
                HasSubstr("closed form exact: " + std::to_string(kSteps) + " steps, 2 workers"));
  }
  for (const Target& t : targets) {
    const std::string log = t.node->process->ReadLog();
    EXPECT_THAT(log, HasSubstr("dropped a message from connection rogue-")) << t.node->name;
    // Rate-limited: a few lines, not one per message.
    size_t lines = 0;
    for (size_t at = log.find("dropped a message"); at != std::string::npos;
         at = log.find("dropped a message", at + 1)) {
      ++lines;
    }
    EXPECT_LT(lines, 200u) << t.node->name;
  }
}

}  // namespace
}  // namespace testutil
}  // namespace kvtrain
