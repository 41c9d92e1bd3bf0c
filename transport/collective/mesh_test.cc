// Mesh receive path against a rank played by raw ZeroMQ sockets on
// 127.0.0.1: forged senders, malformed messages, floods, and the log.
#include "transport/collective/mesh.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cstring>
#include <vector>
#include <thread>

#include "base/log_line_counter.h"

namespace kvtrain {
namespace collective {
namespace {

std::string Header(MsgKind kind, int32_t sender, uint64_t group, uint64_t tag,
                   int32_t recipient = 0) {
  std::string h(32, '\0');
  const uint32_t k = static_cast<uint32_t>(kind);
  std::memcpy(&h[0], &k, 4);
  std::memcpy(&h[4], &sender, 4);
  std::memcpy(&h[8], &group, 8);
  std::memcpy(&h[16], &tag, 8);
  std::memcpy(&h[24], &recipient, 4);
  return h;
}

std::string RoutingId(int32_t rank) {
  return std::string(reinterpret_cast<char*>(&rank), 4);
}

// A rank played by the test: it speaks the mesh's wire form over its own
// sockets, so it can send what a real rank never would.
class RawRank {
 public:
  RawRank() : ctx_(zmq_ctx_new()) {
    router_ = zmq_socket(ctx_, ZMQ_ROUTER);
    zmq_bind(router_, "tcp://127.0.0.1:*");
    char last[256];
    size_t len = sizeof(last);
    zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, last, &len);
    port_ = std::atoi(std::strrchr(last, ':') + 1);
  }
  ~RawRank() {
    const int zero = 0;
    for (void* s : dealers_) {
      zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
      zmq_close(s);
    }
    zmq_setsockopt(router_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(router_);
    zmq_ctx_term(ctx_);
  }
  Endpoint endpoint() const { return {"127.0.0.1", port_, ""}; }

  // A connection to a mesh's port with this routing id; returns its index.
  int Connect(int port, const std::string& routing_id) {
    void* s = zmq_socket(ctx_, ZMQ_DEALER);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, routing_id.data(), routing_id.size());
    zmq_connect(s, ("tcp://127.0.0.1:" + std::to_string(port)).c_str());
    dealers_.push_back(s);
    return static_cast<int>(dealers_.size()) - 1;
  }
  void Send(int conn, const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(dealers_[conn], frames[i].data(), frames[i].size(),
               i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }

 private:
  void* ctx_;
  void* router_;
  int port_ = 0;
  std::vector<void*> dealers_;
};

// Ranks 0 and 1 are real meshes, rank 2 is a RawRank whose connection to
// rank 0 is conn 0 (routing id 2, as a real rank 2's would be).
struct Trio {
  std::unique_ptr<Mesh> mesh[2];
  RawRank raw;
  int to0 = -1;

  explicit Trio(MeshOptions o = {}) {
    o.key = net::JobKey::Insecure();
    o.same_host_ipc = false;
    o.liveness.heartbeat_interval_s = 0;
    o.startup_timeout_s = 20;
    for (int r = 0; r < 2; ++r) {
      auto m = Mesh::Bind(r, 3, o);
      EXPECT_TRUE(m.ok()) << m.status();
      mesh[r] = std::move(*m);
    }
    const std::vector<Endpoint> table = {
        mesh[0]->Self("127.0.0.1"), mesh[1]->Self("127.0.0.1"), raw.endpoint()};
    Status connected[2];
    std::thread t0([&] { connected[0] = mesh[0]->Connect(table); });
    std::thread t1([&] { connected[1] = mesh[1]->Connect(table); });
    to0 = raw.Connect(mesh[0]->port(), RoutingId(2));
    const int to1 = raw.Connect(mesh[1]->port(), RoutingId(2));
    raw.Send(to0, {Header(MsgKind::kHello, 2, 0, 0), ""});
    raw.Send(to1, {Header(MsgKind::kHello, 2, 0, 0, 1), ""});
    t0.join();
    t1.join();
    EXPECT_TRUE(connected[0].ok()) << connected[0];
    EXPECT_TRUE(connected[1].ok()) << connected[1];
  }

  // The body of rank 0's next message from `peer` under (kind, group, tag).
  StatusOr<std::string> Recv0(int peer, MsgKind kind, uint64_t group,
                              uint64_t tag, std::chrono::milliseconds wait) {
    KV_ASSIGN_OR_RETURN(
        std::unique_ptr<Payload> p,
        mesh[0]->Recv(peer, kind, group, tag, Clock::now() + wait));
    return std::string(p->data(), p->size());
  }
};

constexpr uint64_t kWorld = kWorldGroup;
const auto kShort = std::chrono::milliseconds(300);
const auto kLong = std::chrono::milliseconds(10000);

int64_t Dropped(Mesh* m, Drop why) {
  return m->Stats().dropped[static_cast<int>(why)];
}

// Waits (up to 10 s) until rank 0 has dropped `n` messages in all.
void AwaitDropped(Mesh* m, int64_t n) {
  const auto deadline = Clock::now() + kLong;
  while (m->Stats().dropped_total < n && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(m->Stats().dropped_total, n);
}

// Bodies above net::kMaxFramePayloadBytes travel in pieces and arrive
// whole; pieces of another size are malformed.
TEST(MeshTest, LargeBodiesTravelInPieces) {
  Trio t;
  std::string big(net::kMaxFramePayloadBytes * 2 + 5, 'a');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(t.mesh[1]->Send(0, MsgKind::kUser, kWorld, 3, big.data(), big.size(), false).ok());
  StatusOr<std::unique_ptr<Payload>> got =
      t.mesh[0]->Recv(1, MsgKind::kUser, kWorld, 3, Clock::now() + kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ((*got)->size(), big.size());
  EXPECT_EQ(std::memcmp((*got)->data(), big.data(), big.size()), 0);
  const std::string head = Header(MsgKind::kUser, 2, kWorld, 7);
  t.raw.Send(t.to0, {head, "short", "piece"});
  t.raw.Send(t.to0, {head, "good"});
  auto next = t.Recv0(2, MsgKind::kUser, kWorld, 7, kLong);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, "good");
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kMalformed), 1);
}

// A connection that declares a frame above net::kMaxFrameBytes (here 4 GB,
// before any handshake) is closed at the frame's size: nothing is buffered.
TEST(MeshTest, AFrameDeclaredAboveTheLimitClosesTheConnection) {
  Trio t;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(t.mesh[0]->port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  unsigned char greeting[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0};
  std::memcpy(greeting + 12, "NULL", 4);
  ASSERT_EQ(send(fd, greeting, sizeof(greeting), MSG_NOSIGNAL), 64);
  unsigned char head[9] = {0x06, 0, 0, 0, 1, 0, 0, 0, 0};  // a 4 GB command
  ASSERT_EQ(send(fd, head, sizeof(head), MSG_NOSIGNAL), 9);
  std::vector<char> chunk(1 << 20, 'x');
  bool closed = false;
  for (int i = 0; i < 64 && !closed; ++i) {
    closed = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) <= 0;
  }
  close(fd);
  EXPECT_TRUE(closed) << "rank 0 took 64 MB into a frame declared as 4 GB";
}

// A connection redirected to another rank of the job (which holds the
// same key, so CURVE admits it): rank 2's message addressed to rank 1
// reaches rank 0 and is dropped, named, while what is addressed to rank 0
// is taken.
TEST(MeshTest, AMessageForAnotherRankIsDropped) {
  Trio t;
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 5, /*recipient=*/1), "for rank 1"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 6), "for rank 0"});
  auto mine = t.Recv0(2, MsgKind::kUser, kWorld, 6, kLong);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(*mine, "for rank 0");
  auto other = t.Recv0(2, MsgKind::kUser, kWorld, 5, kShort);
  EXPECT_EQ(other.status().code(), Status::Code::kDeadlineExceeded)
      << (other.ok() ? "took \"" + *other + "\"" : other.status().ToString());
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kMisdirected), 1);
}

TEST(MeshTest, ForgedSenderIsNotTakenForAnotherRank) {
  Trio t;
  // Rank 2's connection claims to be rank 1, then speaks as itself.
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 1, kWorld, 5), "forged"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 5), "real"});
  auto real = t.Recv0(2, MsgKind::kUser, kWorld, 5, kLong);
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ(*real, "real");
  auto forged = t.Recv0(1, MsgKind::kUser, kWorld, 5, kShort);
  EXPECT_EQ(forged.status().code(), Status::Code::kDeadlineExceeded)
      << (forged.ok() ? "got \"" + *forged + "\" as rank 1's"
                      : forged.status().ToString());
  // A connection with no rank's routing id is nobody, whatever it claims.
  const int stranger = t.raw.Connect(t.mesh[0]->port(), "rogue");
  t.raw.Send(stranger, {Header(MsgKind::kUser, 1, kWorld, 6), "stranger"});
  t.raw.Send(stranger, {Header(MsgKind::kUser, 2, kWorld, 6), "stranger"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 7), "sync"});
  ASSERT_TRUE(t.Recv0(2, MsgKind::kUser, kWorld, 7, kLong).ok());
  for (int peer : {1, 2}) {
    auto got = t.Recv0(peer, MsgKind::kUser, kWorld, 6, kShort);
    EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded)
        << "as rank " << peer;
  }
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kForgedSender), 1);
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kUnknownConnection), 2);
  // A second connection with rank 1's routing id is refused by ZeroMQ (the
  // first connection to claim an id keeps it).
  const int impostor = t.raw.Connect(t.mesh[0]->port(), RoutingId(1));
  t.raw.Send(impostor, {Header(MsgKind::kUser, 1, kWorld, 10), "impostor"});
  EXPECT_EQ(t.Recv0(1, MsgKind::kUser, kWorld, 10, kShort).status().code(),
            Status::Code::kDeadlineExceeded);
  // The real ranks still talk.
  ASSERT_TRUE(t.mesh[1]->Send(0, MsgKind::kUser, kWorld, 8, "one", 3).ok());
  auto one = t.Recv0(1, MsgKind::kUser, kWorld, 8, kLong);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(*one, "one");
}

TEST(MeshTest, MalformedMessagesDoNotPutTheReceiverOutOfStep) {
  Trio t;
  const std::string head = Header(MsgKind::kUser, 2, kWorld, 7);
  t.raw.Send(t.to0, {head, "bad", "extra"});  // 3 frames
  t.raw.Send(t.to0, {head});                  // no body
  t.raw.Send(t.to0, {"short", "x"});          // header of 5 bytes
  t.raw.Send(t.to0, {Header(static_cast<MsgKind>(99), 2, kWorld, 7), "x"});
  t.raw.Send(t.to0, {Header(MsgKind::kHello, 2, kWorld, 7), ""});
  t.raw.Send(t.to0, {head, "good"});
  auto got = t.Recv0(2, MsgKind::kUser, kWorld, 7, kLong);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "good");
  auto more = t.Recv0(2, MsgKind::kUser, kWorld, 7, kShort);
  EXPECT_FALSE(more.ok()) << "then \"" << *more << "\"";
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kMalformed), 5);
  EXPECT_EQ(t.mesh[0]->Stats().dropped_total, 5);
  EXPECT_EQ(t.mesh[0]->Stats().queued_messages[2], 0u);
}

TEST(MeshTest, FloodForAnUnknownGroupIsDropped) {
  Trio t;
  for (int i = 0; i < 2000; ++i) {
    t.raw.Send(t.to0,
               {Header(MsgKind::kUser, 2, 999, i % 7), std::string(100, 'x')});
    t.raw.Send(t.to0, {Header(MsgKind::kCollective, 2, 998, i),
                       std::string(100, 'x')});
  }
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 1), "sync"});
  ASSERT_TRUE(t.Recv0(2, MsgKind::kUser, kWorld, 1, kLong).ok());
  auto got = t.Recv0(2, MsgKind::kUser, 999, 0, kShort);
  EXPECT_EQ(got.status().code(), Status::Code::kDeadlineExceeded);
  const MeshStats s = t.mesh[0]->Stats();
  EXPECT_EQ(s.dropped[static_cast<int>(Drop::kUnknownGroup)], 4000);
  EXPECT_EQ(s.queued_messages[2], 0u);
  EXPECT_EQ(s.queued_bytes[2], 0u);
}

TEST(MeshTest, AFloodPastTheQueueLimitCutsThePeerOff) {
  for (bool by_bytes : {false, true}) {
    SCOPED_TRACE(by_bytes ? "bytes" : "messages");
    MeshOptions o;
    o.limits.max_messages_per_peer = by_bytes ? 1000 : 100;
    o.limits.max_bytes_per_peer =
        by_bytes ? 100 * (1000 + Inbox::kOverheadBytes) : 1 << 30;
    Trio t(o);
    // Known group, any tag: only the limit stops it.
    for (int i = 0; i < 150; ++i) {
      t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, i % 3),
                         std::string(1000, 'x')});
    }
    // 100 queued then dropped, 1 over the limit, 49 after it.
    AwaitDropped(t.mesh[0].get(), 150);
    const MeshStats s = t.mesh[0]->Stats();
    EXPECT_EQ(s.dropped[static_cast<int>(Drop::kOverLimit)], 1);
    EXPECT_EQ(s.dropped[static_cast<int>(Drop::kCutOff)], 149);
    EXPECT_EQ(s.queued_messages[2], 0u);
    EXPECT_EQ(s.queued_bytes[2], 0u);
    auto got = t.Recv0(2, MsgKind::kUser, kWorld, 0, kShort);
    EXPECT_EQ(got.status().code(), Status::Code::kUnavailable);
    EXPECT_NE(got.status().message().find("rank 2 (127.0.0.1:"),
              std::string::npos)
        << got.status();
    EXPECT_NE(got.status().message().find("was cut off"), std::string::npos)
        << got.status();
    EXPECT_NE(got.status().message().find(
                  by_bytes ? "1000 messages, 125600 bytes per peer"
                           : "limits 100 messages"),
              std::string::npos)
        << got.status();
    EXPECT_FALSE(t.mesh[0]->PeerStatus(2).ok());
    // Rank 1 is not affected.
    ASSERT_TRUE(t.mesh[1]->Send(0, MsgKind::kUser, kWorld, 0, "one", 3).ok());
    EXPECT_TRUE(t.Recv0(1, MsgKind::kUser, kWorld, 0, kLong).ok());
  }
}

// A rank that leaves after another failed says why in its bye: a rank still
// waiting on it learns of the failure it had not noticed itself.
TEST(MeshTest, AByeNamesTheFailureItsSenderLeftFor) {
  MeshOptions o;
  o.limits.max_messages_per_peer = 10;
  Trio t(o);
  for (int i = 0; i < 20; ++i) {
    t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 0), std::string(10, 'x')});
  }
  AwaitDropped(t.mesh[0].get(), 20);
  ASSERT_FALSE(t.mesh[0]->PeerStatus(2).ok());
  t.mesh[0]->Close();
  auto got = t.mesh[1]->Recv(0, MsgKind::kUser, kWorld, 0,
                             Clock::now() + kLong);
  ASSERT_EQ(got.status().code(), Status::Code::kUnavailable) << got.status();
  const std::string m = got.status().message();
  EXPECT_NE(m.find("rank 0 (127.0.0.1:"), std::string::npos) << m;
  EXPECT_NE(m.find("has left (closed its communicator): rank 2 (127.0.0.1:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("was cut off"), std::string::npos) << m;
}

TEST(MeshTest, LeftoversOfFinishedCollectivesAreDropped) {
  Trio t;
  t.raw.Send(t.to0, {Header(MsgKind::kCollective, 2, kWorld, 3), "late"});
  t.raw.Send(t.to0, {Header(MsgKind::kCollective, 2, kWorld, 4), "next"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 3), "user"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 9), "sync"});
  ASSERT_TRUE(t.Recv0(2, MsgKind::kUser, kWorld, 9, kLong).ok());
  t.mesh[0]->Retire(kWorld, 4);
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kStaleTag), 1);
  t.raw.Send(t.to0, {Header(MsgKind::kCollective, 2, kWorld, 3), "later"});
  AwaitDropped(t.mesh[0].get(), 2);
  auto next = t.Recv0(2, MsgKind::kCollective, kWorld, 4, kLong);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, "next");
  EXPECT_FALSE(t.Recv0(2, MsgKind::kCollective, kWorld, 3, kShort).ok());
  // User tags are the user's: never retired.
  auto user = t.Recv0(2, MsgKind::kUser, kWorld, 3, kLong);
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_EQ(*user, "user");
}

TEST(MeshTest, GroupsTakeMessagesFromTheirMembersOnly) {
  Trio t;
  const uint64_t sub = 77;
  t.raw.Send(t.to0,
             {Header(MsgKind::kUser, 2, sub, 1), "early"});  // not open yet
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 9), "sync"});
  ASSERT_TRUE(t.Recv0(2, MsgKind::kUser, kWorld, 9, kLong).ok());
  t.mesh[0]->OpenGroup(sub, {0, 2});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, sub, 1), "member"});
  ASSERT_TRUE(t.mesh[1]->Send(0, MsgKind::kUser, sub, 1, "outsider", 8).ok());
  auto member = t.Recv0(2, MsgKind::kUser, sub, 1, kLong);
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_EQ(*member, "member");
  AwaitDropped(t.mesh[0].get(), 2);
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kUnknownGroup), 2);
  // Closing drops what waits and what comes later.
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, sub, 2), "queued"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 9), "sync"});
  ASSERT_TRUE(t.Recv0(2, MsgKind::kUser, kWorld, 9, kLong).ok());
  EXPECT_EQ(t.mesh[0]->Stats().queued_messages[2], 1u);
  t.mesh[0]->CloseGroup(sub);
  EXPECT_EQ(t.mesh[0]->Stats().queued_messages[2], 0u);
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kUnknownGroup), 3);
}

TEST(MeshTest, ASecondHelloIsDropped) {
  Trio t;
  for (int i = 0; i < 100; ++i)
    t.raw.Send(t.to0, {Header(MsgKind::kHello, 2, 0, 0), ""});
  AwaitDropped(t.mesh[0].get(), 100);
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kDuplicateHello), 100);
  EXPECT_EQ(t.mesh[0]->Stats().queued_messages[2], 0u);
}

TEST(MeshTest, WarningsAboutBadInputAreRateLimited) {
  Trio t;
  LogLineCounter lines("mesh_recv.cc");
  for (int i = 0; i < 500; ++i) t.raw.Send(t.to0, {"short", "x"});
  t.raw.Send(t.to0, {Header(MsgKind::kUser, 2, kWorld, 1), "sync"});
  ASSERT_TRUE(t.Recv0(2, MsgKind::kUser, kWorld, 1, kLong).ok());
  EXPECT_EQ(Dropped(t.mesh[0].get(), Drop::kMalformed), 500);
  EXPECT_GE(lines.lines(), 1);
  EXPECT_LE(lines.lines(), 10);
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain
