// The mesh's sealed lane between two real ranks over 127.0.0.1 with
// security on: messages of every size arrive whole over it, either rank
// may have it off (then CURVE carries everything), and what a stranger
// sends to the lane's port is dropped and counted while the ranks go on.
#include <gtest/gtest.h>
#include <zmq.h>

#include <string>
#include <thread>

#include "transport/collective/mesh.h"

namespace kvtrain {
namespace collective {
namespace {

struct Pair {
  std::unique_ptr<Mesh> mesh[2];

  Pair(const net::JobKey& key, bool lane0, bool lane1) {
    for (int r = 0; r < 2; ++r) {
      MeshOptions o;
      o.key = key;
      o.same_host_ipc = false;  // TCP, as between hosts
      o.sealed_lane = r == 0 ? lane0 : lane1;
      o.startup_timeout_s = 20;
      auto m = Mesh::Bind(r, 2, o);
      EXPECT_TRUE(m.ok()) << m.status();
      mesh[r] = std::move(*m);
    }
    const std::vector<Endpoint> table = {mesh[0]->Self("127.0.0.1"),
                                         mesh[1]->Self("127.0.0.1")};
    Status connected[2];
    std::thread t0([&] { connected[0] = mesh[0]->Connect(table); });
    std::thread t1([&] { connected[1] = mesh[1]->Connect(table); });
    t0.join();
    t1.join();
    EXPECT_TRUE(connected[0].ok()) << connected[0];
    EXPECT_TRUE(connected[1].ok()) << connected[1];
  }

  // Sends `body` from rank `from` to the other and returns what arrived.
  std::string RoundTrip(int from, const std::string& body, uint64_t tag) {
    const int to = 1 - from;
    EXPECT_TRUE(mesh[from]
                    ->Send(to, MsgKind::kUser, kWorldGroup, tag, body.data(),
                           body.size())
                    .ok());
    auto got = mesh[to]->Recv(from, MsgKind::kUser, kWorldGroup, tag,
                              Clock::now() + std::chrono::seconds(20));
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? std::string((*got)->data(), (*got)->size()) : "";
  }
};

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 13 + seed);
  return s;
}

void ExpectRoundTrips(Pair* p) {
  uint64_t tag = 1;
  for (size_t size :
       {size_t{0}, size_t{1}, size_t{70000},
        static_cast<size_t>(net::kMaxFramePayloadBytes) * 2 + 5}) {
    for (int from : {0, 1}) {
      const std::string body = Pattern(size, static_cast<int>(tag));
      EXPECT_EQ(p->RoundTrip(from, body, tag), body)
          << size << " bytes from " << from;
      ++tag;
    }
  }
}

TEST(MeshLaneTest, SecureRanksOverTcpSwitchToTheLane) {
  Pair p(net::JobKey::Generate(), true, true);
  EXPECT_GT(p.mesh[0]->lane_port(), 0);
  EXPECT_TRUE(p.mesh[0]->Sealed(1));
  EXPECT_TRUE(p.mesh[1]->Sealed(0));
  ExpectRoundTrips(&p);
  EXPECT_EQ(p.mesh[0]->Stats().lane_refused, 0);
  EXPECT_EQ(p.mesh[0]->Stats().dropped_total, 0);
}

TEST(MeshLaneTest, EitherRankWithoutItKeepsCurve) {
  Pair p(net::JobKey::Generate(), true, false);
  EXPECT_EQ(p.mesh[1]->lane_port(), 0);
  // Rank 1 has no lane to send to, and offers none to seal into.
  EXPECT_FALSE(p.mesh[0]->Sealed(1));
  EXPECT_FALSE(p.mesh[1]->Sealed(0));
  ExpectRoundTrips(&p);
}

TEST(MeshLaneTest, NoLaneWithoutSecurity) {
  Pair p(net::JobKey::Insecure(), true, true);
  EXPECT_EQ(p.mesh[0]->lane_port(), 0);
  EXPECT_FALSE(p.mesh[0]->Sealed(1));
  ExpectRoundTrips(&p);
}

// A connection to the lane without a lane's token (none, or one of a key
// rank 0 was never offered) is refused at its handshake: nothing it sends
// is read, and the ranks go on.
TEST(MeshLaneTest, AStrangerCannotConnectToTheLane) {
  Pair p(net::JobKey::Generate(), true, true);
  void* ctx = zmq_ctx_new();
  const std::string ep =
      "tcp://127.0.0.1:" + std::to_string(p.mesh[0]->lane_port());
  auto other = net::LaneWriter::Create().value();  // a lane never offered
  std::vector<void*> strangers;
  for (const bool token : {false, true}) {
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    if (token) {
      ASSERT_TRUE(net::SecureLaneClient(s, other->key()).ok());
    }
    ASSERT_EQ(zmq_connect(s, ep.c_str()), 0);
    const std::string probe = other->Probe();
    zmq_send(s, probe.data(), probe.size(), ZMQ_DONTWAIT);
    strangers.push_back(s);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (p.mesh[0]->Stats().handshakes_refused < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(p.mesh[0]->Stats().handshakes_refused, 2);
  EXPECT_EQ(p.mesh[0]->Stats().lane_refused, 0) << "a stranger's message was read";
  ExpectRoundTrips(&p);
  const int zero = 0;
  for (void* s : strangers) {
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain
