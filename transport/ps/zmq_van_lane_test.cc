// The sealed lane between ZmqVans over TCP with security on: messages
// travel sealed and arrive whole and in order across the switch from CURVE,
// the lane is off when security or the option is, a stranger cannot
// connect to the lane, and what a replay puts on it is dropped while the
// node goes on and a lost message is reported. The last test
// speaks the lane's wire format by hand, as a job member would, to try what
// the van itself never sends.
#include <gtest/gtest.h>
#include <zmq.h>

#include <dirent.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <map>
#include <sstream>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "transport/ps/zmq_van.h"
#include "net/curve.h"
#include "net/seal.h"

namespace kvtrain {
namespace ps {
namespace {

using net::JobKey;

struct Got {
  std::vector<std::string> frames;
  std::string error;
};

// A listening van whose receive thread records every message.
class Node {
 public:
  Node(const JobKey& key, bool sealed_lane = true) {
    ZmqVanOptions o;
    o.key = key;
    o.sealed_lane = sealed_lane;
    o.poll_interval = std::chrono::milliseconds(20);
    van = ZmqVan::Create("node", o).value();
    port = *van->Bind(0);
    thread_ = std::thread([this] {
      while (!stop_) {
        RawMessage m;
        StatusOr<bool> got = van->Recv(&m);
        if (!got.ok() || !*got) continue;
        Got g;
        for (const Blob& b : m.frames)
          g.frames.emplace_back(b.data(), b.size());
        g.error = std::string(m.error.message());
        std::lock_guard<std::mutex> l(mu_);
        got_.push_back(std::move(g));
      }
    });
  }
  ~Node() {
    stop_ = true;
    thread_.join();
  }
  // Waits until `n` messages came (or 30 s) and returns them.
  std::vector<Got> WaitFor(size_t n) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (got_.size() >= n || Clock::now() > deadline) return got_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  bool WaitHeld(int64_t n) {
    return WaitCount([this] { return van->lane_messages_held(); }, n);
  }
  bool WaitRefused(int64_t n) {
    return WaitCount([this] { return van->lane_messages_refused(); }, n);
  }

  std::unique_ptr<ZmqVan> van;
  int port = 0;

 private:
  // Whether the van's counter reaches `n` within 30 s.
  template <typename Count>
  static bool WaitCount(Count count, int64_t n) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (count() < n && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return count() >= n;
  }

  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<Got> got_;
  std::thread thread_;
};

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 31 + seed);
  return s;
}

std::vector<Blob> Message(int i) {
  const std::string meta = "m" + std::to_string(i);
  const std::string big = Pattern(100000 + i, i);
  const std::string small = Pattern(100, i + 1);
  return {Blob::Copy(meta.data(), meta.size()),
          Blob::Copy(big.data(), big.size()),
          Blob::Copy(small.data(), small.size())};
}

std::unique_ptr<ZmqVan> SenderVan(const JobKey& key, int port) {
  ZmqVanOptions o;
  o.key = key;
  auto van = ZmqVan::Create("sender", o).value();
  // "" as the same-host address: TCP (with CURVE), as to another host.
  EXPECT_TRUE(van->Connect(1, "127.0.0.1", port, "").ok());
  return van;
}

TEST(ZmqVanLaneTest, MessagesTravelSealedAndArriveWholeInOrder) {
  const JobKey key = JobKey::Generate();
  Node node(key);
  ASSERT_GT(node.van->lane_port(), 0);
  auto sender = SenderVan(key, node.port);
  // The lane is ready after two round trips; messages before it go over
  // CURVE, and the switch keeps them in order with those after it.
  int sent = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (sender->lane_messages_sent() == 0 && Clock::now() < deadline) {
    ASSERT_TRUE(sender->Send(1, 0, Message(sent++)).ok());
  }
  ASSERT_GT(sender->lane_messages_sent(), 0);
  for (int k = 0; k < 20; ++k)
    ASSERT_TRUE(sender->Send(1, 0, Message(sent++)).ok());
  const std::vector<Got> got = node.WaitFor(sent);
  ASSERT_EQ(got.size(), static_cast<size_t>(sent));
  for (int i = 0; i < sent; ++i) {
    ASSERT_EQ(got[i].error, "") << i;
    std::vector<std::string> want;
    for (const Blob& b : Message(i)) want.emplace_back(b.data(), b.size());
    EXPECT_EQ(got[i].frames, want) << "message " << i;
  }
  EXPECT_GE(sender->lane_messages_sent(), 20);
  EXPECT_EQ(node.van->lane_messages_refused(), 0);
  sender->Flush(std::chrono::seconds(5));
}

TEST(ZmqVanLaneTest, NoLaneWithoutSecurityOrWhenTurnedOff) {
  Node plain(JobKey::Insecure());
  EXPECT_EQ(plain.van->lane_port(), 0);
  // A receiver without a lane answers the offer with none: the sender
  // keeps every frame on CURVE.
  const JobKey key = JobKey::Generate();
  Node off(key, /*sealed_lane=*/false);
  EXPECT_EQ(off.van->lane_port(), 0);
  auto sender = SenderVan(key, off.port);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(sender->Send(1, 0, Message(i)).ok());
  const std::vector<Got> got = off.WaitFor(10);
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got[9].frames[1], Pattern(100009, 9));
  EXPECT_EQ(sender->lane_messages_sent(), 0);
}

// A peer keeping the lane busy cannot starve the node's socket (where
// heartbeats and answers come): the lane and the socket take turns. Before,
// every lane message waiting was read first, and the socket's message came
// after all 5,000 of them.
TEST(ZmqVanLaneTest, ABusyLaneDoesNotStarveTheSocket) {
  const JobKey key = JobKey::Generate();
  ZmqVanOptions o;
  o.key = key;
  o.poll_interval = std::chrono::milliseconds(20);
  auto node = ZmqVan::Create("node", o).value();
  const int port = *node->Bind(0);
  auto busy = SenderVan(key, port);
  // Until the lane is ready (its first message may still go over CURVE).
  int sent = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  RawMessage m;
  while (busy->lane_messages_sent() == 0 && Clock::now() < deadline) {
    ASSERT_TRUE(busy->Send(1, 0, {Blob::FromString("warm")}).ok());
    ++sent;
    StatusOr<bool> got = node->Recv(&m);
    ASSERT_TRUE(got.ok());
  }
  ASSERT_GT(busy->lane_messages_sent(), 0);
  // Another peer without a lane: its message comes on the node's socket,
  // sent (and taken by the network) before the lane's burst.
  ZmqVanOptions plain;
  plain.key = key;
  plain.sealed_lane = false;
  auto other = ZmqVan::Create("other", plain).value();
  ASSERT_TRUE(other->Connect(1, "127.0.0.1", port, "").ok());
  ASSERT_TRUE(other->Send(1, 0, {Blob::FromString("socket")}).ok());
  other->Flush(std::chrono::seconds(30));
  const int kBurst = 5000;
  for (int i = 0; i < kBurst; ++i) {
    ASSERT_TRUE(busy->Send(1, 0, {Blob::FromString("lane")}).ok());
  }
  busy->Flush(std::chrono::seconds(30));
  int lane_before = 0;
  bool socket_seen = false;
  while (!socket_seen && Clock::now() < deadline + std::chrono::seconds(30)) {
    StatusOr<bool> got = node->Recv(&m);
    ASSERT_TRUE(got.ok());
    if (!*got || m.frames.empty()) continue;
    const std::string f = m.frames[0].ToString();
    if (f == "socket") socket_seen = true;
    if (f == "lane") ++lane_before;
  }
  EXPECT_TRUE(socket_seen);
  EXPECT_LT(lane_before, 100) << "the socket's message waited behind the lane's";
}

// The local TCP sockets of this process connected to `port` on 127.0.0.1
// (from /proc/self/fd and /proc/net/tcp).
std::vector<int> SocketsConnectedTo(int port) {
  std::map<std::string, int> fd_of_inode;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char target[128];
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      const std::string t(target);
      if (t.rfind("socket:[", 0) == 0) fd_of_inode[t.substr(8, t.size() - 9)] = std::atoi(e->d_name);
    }
    closedir(d);
  }
  std::vector<int> fds;
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
    if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
          inode)) {
      continue;
    }
    const int remote_port = std::stoi(remote.substr(remote.find(':') + 1), nullptr, 16);
    auto it = fd_of_inode.find(inode);
    if (state == "01" && remote_port == port && it != fd_of_inode.end()) fds.push_back(it->second);
  }
  return fds;
}

// The lane's sending socket is watched: when its connection drops (here
// cut under it), the van reports the drop of the connection it belongs to,
// as for the CURVE connection, so a message lost with it does not leave the
// job waiting. Before, nothing was reported.
TEST(ZmqVanLaneTest, ALaneConnectionThatDropsIsReported) {
  const JobKey key = JobKey::Generate();
  Node node(key);
  auto sender = SenderVan(key, node.port);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> dropped;
  sender->SetDropHandler([&](int conn) {
    std::lock_guard<std::mutex> l(mu);
    dropped.push_back(conn);
    cv.notify_all();
  });
  int sent = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (sender->lane_messages_sent() == 0 && Clock::now() < deadline) {
    ASSERT_TRUE(sender->Send(1, 0, Message(sent++)).ok());
  }
  ASSERT_GT(sender->lane_messages_sent(), 0);
  ASSERT_EQ(node.WaitFor(sent).size(), static_cast<size_t>(sent));
  const std::vector<int> lane = SocketsConnectedTo(node.van->lane_port());
  ASSERT_EQ(lane.size(), 1u) << "the sender's lane connection";
  shutdown(lane[0], SHUT_RDWR);
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return !dropped.empty(); }))
      << "the lane's drop was not reported";
  EXPECT_EQ(dropped[0], 1) << "reported as connection 1's drop";
}

// A DEALER connected to the node's lane: with the token of `lane_key`
// (net::LaneToken), as a job member's, or with none ("").
void* LaneDealer(void* ctx, int lane_port, const std::string& lane_key) {
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  if (!lane_key.empty()) {
    EXPECT_TRUE(net::SecureLaneClient(s, lane_key).ok());
  }
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(lane_port);
  EXPECT_EQ(zmq_connect(s, ep.c_str()), 0);
  return s;
}

std::string Sealed(net::Sealer* sealer, uint64_t lane, uint64_t seq,
                   net::SealKind kind, const std::string& payload,
                   uint16_t part = 0) {
  net::SealHeader h;
  h.kind = kind;
  h.part = part;
  h.lane = lane;
  h.seq = seq;
  h.size = payload.size();
  std::string out(net::SealedSize(payload.size()), '\0');
  EXPECT_TRUE(sealer->Seal(h, payload.data(), &out[0]).ok());
  return out;
}

// Without a lane's token no connection to the lane gets past its
// handshake: not one without a token, not one with a token of a key the
// node was never offered. Nothing they send is read, and the job's own
// sender still gets through the lane.
TEST(ZmqVanLaneTest, StrangersCannotConnectToTheLane) {
  const JobKey key = JobKey::Generate();
  Node node(key);
  void* ctx = zmq_ctx_new();
  void* none = LaneDealer(ctx, node.van->lane_port(), "");
  void* forged = LaneDealer(ctx, node.van->lane_port(),
                            net::SealRandomBytes(net::kSealKeyBytes));
  for (void* s : {none, forged}) zmq_send(s, "junk", 4, ZMQ_DONTWAIT);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (node.van->handshakes_refused() < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(node.van->handshakes_refused(), 2);
  EXPECT_EQ(node.van->lane_messages_refused(), 0) << "a stranger's message was read";
  auto sender = SenderVan(key, node.port);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(sender->Send(1, 0, Message(i)).ok());
  ASSERT_EQ(node.WaitFor(5).size(), 5u);
  const int zero = 0;
  for (void* s : {none, forged}) {
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
}

// The lane's wire format, as zmq_van_lane.cc writes it.
std::string U64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

void SendParts(void* s, const std::vector<std::string>& parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_GE(zmq_send(s, parts[i].data(), parts[i].size(),
                       i + 1 < parts.size() ? ZMQ_SNDMORE : 0),
              0);
  }
}

std::string RecvLast(void* s) {
  std::string last;
  zmq_msg_t m;
  zmq_msg_init(&m);
  do {
    if (zmq_msg_recv(&m, s, 0) < 0) break;
    last.assign(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
  } while (zmq_msg_more(&m));
  zmq_msg_close(&m);
  return last;
}

TEST(ZmqVanLaneTest, ALaneThatNeverAnswersLeavesMessagesOnCurve) {
  // The receiver is played by hand: it answers the offer with a port no one
  // listens on (as behind a firewall), so the probe never gets an answer.
  const JobKey key = JobKey::Generate();
  void* ctx = zmq_ctx_new();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  const int timeout = 30000;
  zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  ASSERT_TRUE(net::SecureSocket(router, key, /*is_server=*/true).ok());
  ASSERT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
  char last[256];
  size_t len = sizeof(last);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, last, &len);
  const int port = std::atoi(std::strrchr(last, ':') + 1);
  auto sender = SenderVan(key, port);
  auto recv_all = [&] {
    std::vector<std::string> parts;
    zmq_msg_t m;
    zmq_msg_init(&m);
    do {
      if (zmq_msg_recv(&m, router, 0) < 0) break;
      parts.emplace_back(static_cast<const char*>(zmq_msg_data(&m)),
                         zmq_msg_size(&m));
    } while (zmq_msg_more(&m));
    zmq_msg_close(&m);
    return parts;
  };
  const std::vector<std::string> offer = recv_all();
  ASSERT_EQ(offer.size(), 3u);  // routing id, empty, the offer
  ASSERT_EQ(offer[2].substr(0, 8), "kvLaneO1");
  const std::string answer = "kvLaneP1" + offer[2].substr(8, 8) + U64(1);
  SendParts(router, {offer[0], "", answer});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(sender->Send(1, 0, Message(i)).ok());
    const std::vector<std::string> got = recv_all();
    ASSERT_EQ(got.size(), 4u) << i;
    EXPECT_EQ(got[2], Pattern(100000 + i, i));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(sender->lane_messages_sent(), 0);
  sender.reset();
  const int zero = 0;
  zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_close(router);
  zmq_ctx_term(ctx);
}

TEST(ZmqVanLaneTest, AMessageIsTakenOnceWholeAndInOrder) {
  const JobKey key = JobKey::Generate();
  Node node(key);
  void* ctx = zmq_ctx_new();
  // A job member's CURVE connection, speaking the lane's protocol by hand.
  void* curve = zmq_socket(ctx, ZMQ_DEALER);
  zmq_setsockopt(curve, ZMQ_ROUTING_ID, "member", 6);
  const int timeout = 30000;
  zmq_setsockopt(curve, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  ASSERT_TRUE(net::SecureSocket(curve, key, /*is_server=*/false).ok());
  const std::string ep = "tcp://127.0.0.1:" + std::to_string(node.port);
  ASSERT_EQ(zmq_connect(curve, ep.c_str()), 0);
  const uint64_t lane = 77;
  const std::string lane_key = net::SealRandomBytes(net::kSealKeyBytes);
  auto sealer = net::Sealer::Create(lane_key).value();
  SendParts(curve, {"", "kvLaneO1" + U64(lane) + lane_key});
  ASSERT_EQ(RecvLast(curve),
            "kvLaneP1" + U64(lane) + U64(node.van->lane_port()));

  void* wire = LaneDealer(ctx, node.van->lane_port(), lane_key);
  zmq_setsockopt(wire, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  SendParts(wire, {Sealed(sealer.get(), lane, 1, net::SealKind::kProbe, "")});
  std::string ready = RecvLast(wire);
  net::SealHeader h;
  ASSERT_TRUE(sealer->Open(&ready[0], ready.size(), &h).ok());
  EXPECT_EQ(h.kind, net::SealKind::kReady);
  EXPECT_EQ(h.dir, net::SealDir::kToSender);

  // A lane message waits for the switch mark, behind what came over CURVE.
  const std::string data = Pattern(20000, 3);
  const std::vector<std::string> first = {
      Sealed(sealer.get(), lane, 2, net::SealKind::kData, "meta"),
      Sealed(sealer.get(), lane, 3, net::SealKind::kLast, data, 1)};
  SendParts(wire, first);
  ASSERT_TRUE(node.WaitHeld(1));
  EXPECT_EQ(node.WaitFor(0).size(), 0u);
  SendParts(curve, {"over CURVE"});
  SendParts(curve, {"", "kvLaneS1" + U64(lane)});
  std::vector<Got> got = node.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].frames, std::vector<std::string>{"over CURVE"});
  EXPECT_EQ(got[1].error, "");
  EXPECT_EQ(got[1].frames, (std::vector<std::string>{"meta", data}));

  // Played again, on another connection (with the token, which travels in
  // the clear): dropped.
  void* replay = LaneDealer(ctx, node.van->lane_port(), lane_key);
  SendParts(replay, first);
  EXPECT_TRUE(node.WaitRefused(1));
  // Altered on the way, or cut before its last part: dropped whole.
  std::string altered =
      Sealed(sealer.get(), lane, 5, net::SealKind::kLast, data);
  altered[net::kSealHeaderBytes + 5] ^= 1;
  SendParts(wire, {Sealed(sealer.get(), lane, 4, net::SealKind::kData, "meta"),
                   altered});
  EXPECT_TRUE(node.WaitRefused(2));
  SendParts(wire, {Sealed(sealer.get(), lane, 6, net::SealKind::kData, "cut")});
  EXPECT_TRUE(node.WaitRefused(3));
  // A message whose leading part is missing (numbered from 1): dropped.
  SendParts(wire, {Sealed(sealer.get(), lane, 7, net::SealKind::kData, "x", 1),
                   Sealed(sealer.get(), lane, 8, net::SealKind::kLast, "y", 2)});
  EXPECT_TRUE(node.WaitRefused(4));
  // The lane's next message comes, after word that frames were lost on the
  // way (the messages dropped above): the node does not go on as if the
  // lane were whole.
  const std::string data2 = Pattern(30000, 4);
  SendParts(wire, {Sealed(sealer.get(), lane, 9, net::SealKind::kData, "next"),
                   Sealed(sealer.get(), lane, 10, net::SealKind::kLast, data2, 1)});
  got = node.WaitFor(4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NE(got[2].error.find("lost 5 frames"), std::string::npos) << got[2].error;
  EXPECT_TRUE(got[2].frames.empty());
  EXPECT_EQ(got[3].frames, (std::vector<std::string>{"next", data2}));
  EXPECT_EQ(node.van->lane_messages_refused(), 4);

  for (void* s : {curve, wire, replay}) {
    const int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s);
  }
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
