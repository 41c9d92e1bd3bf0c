// The rendezvous server against raw ZeroMQ clients on 127.0.0.1: messages
// with the wrong frame count, one connection claiming two ranks, floods.
#include "transport/collective/rendezvous.h"

#include <glog/logging.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "base/log_line_counter.h"

namespace kvtrain {
namespace collective {
namespace {

const auto kWait = std::chrono::seconds(10);

// A client that sends whatever frames the test wants.
class RawClient {
 public:
  explicit RawClient(int port)
      : ctx_(zmq_ctx_new()), s_(zmq_socket(ctx_, ZMQ_DEALER)) {
    zmq_connect(s_, ("tcp://127.0.0.1:" + std::to_string(port)).c_str());
  }
  ~RawClient() {
    const int zero = 0;
    zmq_setsockopt(s_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_close(s_);
    zmq_ctx_term(ctx_);
  }
  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(s_, frames[i].data(), frames[i].size(),
               i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }
  // The next frame received within `ms`, or "" (no reply).
  std::string Reply(int ms) {
    zmq_pollitem_t item{s_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, ms) <= 0) return "";
    char buf[4096];
    const int n = zmq_recv(s_, buf, sizeof(buf), 0);
    return n < 0 ? "" : std::string(buf, std::min<int>(n, sizeof(buf)));
  }

 private:
  void* ctx_;
  void* s_;
};

// Serves `size` ranks on a thread.
struct Served {
  std::unique_ptr<RendezvousServer> server;
  Status status = Status::Internal("not served");
  std::thread thread;

  // `wait`: how long the server and the ranks wait for each other; `key`:
  // the job's (insecure by default).
  explicit Served(int size, Clock::duration wait = kWait,
                  net::JobKey key = net::JobKey::Insecure())
      : wait(wait), key(key) {
    auto s = RendezvousServer::Bind(0, key);
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
    thread = std::thread(
        [this, size] { status = server->Serve(size, Clock::now() + this->wait); });
  }
  const Clock::duration wait;
  const net::JobKey key;
  ~Served() {
    if (thread.joinable()) thread.join();
  }
  Endpoint address() const { return {"127.0.0.1", server->port(), ""}; }
  StatusOr<std::vector<Endpoint>> Register(int rank, int size, int port) {
    return collective::Register(address(), rank, size, {"127.0.0.1", port, ""},
                                Clock::now() + wait, key);
  }
};

TEST(RendezvousTest, WrongFrameCountsDoNotPutTheServerOutOfStep) {
  Served s(2);
  RawClient rogue(s.server->port());
  rogue.Send({"garbage", "more"});
  rogue.Send({"register 0 2 10.0.0.9:1", "x"});
  rogue.Send({"register 1 2 10.0.0.9:2", "x", "y"});
  // The three are read, and dropped, before the ranks register.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (s.server->dropped() < 3 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(s.server->dropped(), 3);
  StatusOr<std::vector<Endpoint>> got[2] = {Status::Internal(""),
                                            Status::Internal("")};
  std::thread r1([&] { got[1] = s.Register(1, 2, 2001); });
  got[0] = s.Register(0, 2, 2000);
  r1.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
    ASSERT_EQ(got[r]->size(), 2u);
    EXPECT_EQ((*got[r])[0].ToString(), "127.0.0.1:2000");
    EXPECT_EQ((*got[r])[1].ToString(), "127.0.0.1:2001");
  }
  s.thread.join();
  EXPECT_TRUE(s.status.ok()) << s.status;
}

TEST(RendezvousTest, OneConnectionRegistersOneRank) {
  Served s(2);
  RawClient first(s.server->port());
  first.Send({"register 0 2 10.0.0.9:1"});
  first.Send({"register 0 2 10.0.0.9:1"});  // a repeat is harmless
  first.Send({"register 1 2 10.0.0.9:2"});
  const std::string refused = first.Reply(5000);
  EXPECT_NE(refused.find("error "), std::string::npos) << refused;
  EXPECT_NE(refused.find("already registered rank 0"), std::string::npos)
      << refused;
  auto got = s.Register(1, 2, 2001);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].ToString(), "10.0.0.9:1");
  EXPECT_EQ((*got)[1].ToString(), "127.0.0.1:2001");
  EXPECT_EQ(first.Reply(5000), "ok 10.0.0.9:1 127.0.0.1:2001");
  s.thread.join();
  EXPECT_TRUE(s.status.ok()) << s.status;
}

TEST(RendezvousTest, MalformedRegistrationsAreDroppedWithoutAnswer) {
  LogLineCounter lines("rendezvous.cc");
  Served s(2);
  RawClient rogue(s.server->port());
  for (int i = 0; i < 300; ++i) rogue.Send({"garbage " + std::to_string(i)});
  rogue.Send({"register 0 2 10.0.0.9:1 trailing"});
  rogue.Send({"register 0x 2 10.0.0.9:1"});
  rogue.Send({std::string(5000, 'r')});
  // The 5000 bytes never reach it: ZeroMQ refuses messages over
  // kMaxRegistrationBytes.
  for (auto until = Clock::now() + kWait;
       s.server->dropped() < 302 && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  StatusOr<std::vector<Endpoint>> got[2] = {Status::Internal(""),
                                            Status::Internal("")};
  std::thread r1([&] { got[1] = s.Register(1, 2, 2001); });
  got[0] = s.Register(0, 2, 2000);
  r1.join();
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  ASSERT_TRUE(got[1].ok()) << got[1].status();
  EXPECT_EQ(rogue.Reply(300), "");
  s.thread.join();
  EXPECT_EQ(s.server->dropped(), 302);
  EXPECT_GE(lines.lines(), 1);
  EXPECT_LE(lines.lines(), 10);
}

// The rendezvous port is watched as every node's: 200 connections that
// never speak are shed beyond the bound on handshakes, and the ranks, with
// the job's key, still register. (Unwatched, it held every one until its
// handshake deadline.)
TEST(RendezvousTest, SilentStrangersAreShed) {
  Served s(2, std::chrono::seconds(45), net::JobKey::Generate());
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.server->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    fds.push_back(fd);
  }
  const int64_t want = 200 - net::kMaxPendingHandshakes;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (s.server->shed() < want && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(s.server->shed(), want);
  StatusOr<std::vector<Endpoint>> got[2] = {Status::Internal(""),
                                            Status::Internal("")};
  std::thread r1([&] { got[1] = s.Register(1, 2, 2001); });
  got[0] = s.Register(0, 2, 2000);
  r1.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].status();
  }
  s.thread.join();
  EXPECT_TRUE(s.status.ok()) << s.status;
  for (int fd : fds) close(fd);
}

TEST(RendezvousTest, RegistrationsParseStrictly) {
  auto parse = [](std::vector<std::string_view> frames) {
    return ParseRegisterRequest(frames);
  };
  auto ok = parse({"register 3 4 10.0.0.2:4000@b00t.1@kvtrain-mesh-9"});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->rank, 3);
  EXPECT_EQ(ok->size, 4);
  EXPECT_EQ(ok->endpoint.ToString(), "10.0.0.2:4000");
  EXPECT_EQ(EncodeRegisterRequest(*ok),
            "register 3 4 10.0.0.2:4000@b00t.1@kvtrain-mesh-9");
  for (const std::vector<std::string_view>& bad :
       std::vector<std::vector<std::string_view>>{
           {},
           {"register 0 2 h:1", ""},
           {"register 0 2 h:1 x"},
           {"register  0 2 h:1"},
           {"register 0 2 h:1 "},
           {"register -1 2 h:1"},
           {"register +1 2 h:1"},
           {"register 0 0 h:1"},
           {"register 0 65536 h:1"},
           {"register 99999999999 2 h:1"},
           {"register 0 2 h:0"},
           {"register 0 2\th:1"},
           {"Register 0 2 h:1"},
           {std::string_view("register 0 2 h:1\0", 17)}}) {
    EXPECT_FALSE(parse(bad).ok())
        << (bad.empty() ? "(no frames)" : std::string(bad[0]));
  }
}

TEST(RendezvousTest, AnswersParseStrictly) {
  auto table = ParseRendezvousAnswer({"ok h:1 h:2@b00t.1@kvtrain-mesh-9"}, 2);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)[1].port, 2);
  EXPECT_EQ((*table)[1].same_host, "b00t.1@kvtrain-mesh-9");
  auto error = ParseRendezvousAnswer({"error rendezvous: no"}, 2);
  EXPECT_EQ(error.status().code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(error.status().message(), "rendezvous: no");
  for (const std::vector<std::string_view>& bad :
       std::vector<std::vector<std::string_view>>{{},
                                                  {"ok h:1 h:2", "x"},
                                                  {"ok h:1"},
                                                  {"ok h:1 h:2 h:3"},
                                                  {"ok  h:1 h:2"},
                                                  {"okay h:1 h:2"},
                                                  {"ok h:1 h:x"}}) {
    EXPECT_EQ(ParseRendezvousAnswer(bad, 2).status().code(),
              Status::Code::kDataLoss)
        << (bad.empty() ? "(no frames)" : std::string(bad[0]));
  }
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain
