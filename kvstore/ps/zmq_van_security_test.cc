// ZmqVans under the job's key: only the key is admitted over TCP, plain and
// secure peers do not mix, peers on one host talk over the same-host socket
// (no CURVE) while TCP still needs the key, and a process of another user
// id cannot get a message into a node through its same-host socket.
#include <dirent.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <poll.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "kvstore/ps/zmq_van.h"
#include "net/curve.h"
#include "net/same_host.h"

namespace kvtrain {
namespace ps {
namespace {

using ::testing::HasSubstr;
using net::JobKey;

// A ZmqVan that listens, and what its connecting peers saw.
struct Listener {
  explicit Listener(const JobKey& key) {
    ZmqVanOptions o;
    o.key = key;
    o.poll_interval = std::chrono::milliseconds(20);
    van = ZmqVan::Create("listener", o).value();
    port = *van->Bind(0);
  }
  // Receives for up to `timeout`; the first message's first frame, or "".
  std::string RecvOne(Duration timeout) {
    const auto deadline = Clock::now() + timeout;
    RawMessage m;
    while (Clock::now() < deadline) {
      StatusOr<bool> got = van->Recv(&m);
      if (got.ok() && *got && !m.frames.empty()) {
        return std::string(m.frames[0].data(), m.frames[0].size());
      }
    }
    return "";
  }
  std::unique_ptr<ZmqVan> van;
  int port = 0;
};

// A connecting ZmqVan that records refused handshakes.
struct Sender {
  // `token`: its routing id (one per peer of a node).
  explicit Sender(const JobKey& key, const std::string& token = "sender") {
    ZmqVanOptions o;
    o.key = key;
    van = ZmqVan::Create(token, o).value();
    van->SetHandshakeFailureHandler(
        [this](int, const std::string&, const std::string& w, int n,
               bool final) {
          std::lock_guard<std::mutex> l(mu);
          why = w;
          in_a_row = final ? 1000 : n;
        });
  }
  Status SendTo(int port, const std::string& text) {
    KV_RETURN_IF_ERROR(van->Connect(1, "127.0.0.1", port, ""));
    return van->Send(1, 0, {Blob::Copy(text.data(), text.size())});
  }
  bool WaitRefused(int times) {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (in_a_row >= times) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::unique_ptr<ZmqVan> van;
  std::mutex mu;
  std::string why;
  int in_a_row = 0;
};

TEST(ZmqVanCurveTest, TheJobKeyIsAdmitted) {
  const JobKey key = JobKey::Generate();
  Listener l(key);
  Sender s(key);
  ASSERT_TRUE(s.SendTo(l.port, "hello").ok());
  EXPECT_EQ(l.RecvOne(std::chrono::seconds(30)), "hello");
}

TEST(ZmqVanCurveTest, InsecureVansTalk) {
  Listener l(JobKey::Insecure());
  Sender s(JobKey::Insecure());
  ASSERT_TRUE(s.SendTo(l.port, "plain").ok());
  EXPECT_EQ(l.RecvOne(std::chrono::seconds(30)), "plain");
}

TEST(ZmqVanCurveTest, AnotherKeyIsRefused) {
  Listener l(JobKey::Generate());
  Sender s(JobKey::Generate());
  ASSERT_TRUE(s.SendTo(l.port, "rogue").ok());
  ASSERT_TRUE(s.WaitRefused(3));
  EXPECT_EQ(l.RecvOne(std::chrono::milliseconds(300)), "");
  std::lock_guard<std::mutex> lock(s.mu);
  EXPECT_THAT(s.why, HasSubstr("does not accept this process's job key"));
}

TEST(ZmqVanCurveTest, PlainPeersAndSecurePeersDoNotMix) {
  {
    Listener l(JobKey::Generate());
    Sender s(JobKey::Insecure());
    ASSERT_TRUE(s.SendTo(l.port, "plain").ok());
    ASSERT_TRUE(s.WaitRefused(2));
    EXPECT_EQ(l.RecvOne(std::chrono::milliseconds(300)), "");
    std::lock_guard<std::mutex> lock(s.mu);
    EXPECT_THAT(s.why, HasSubstr("KVTRAIN_INSECURE=1"));
  }
  {
    Listener l(JobKey::Insecure());
    Sender s(JobKey::Generate());
    ASSERT_TRUE(s.SendTo(l.port, "curve").ok());
    ASSERT_TRUE(s.WaitRefused(2));
    EXPECT_EQ(l.RecvOne(std::chrono::milliseconds(300)), "");
  }
}

std::unique_ptr<ZmqVan> MakeVan(const std::string& token, const JobKey& key) {
  ZmqVanOptions o;
  o.key = key;
  o.poll_interval = std::chrono::milliseconds(20);
  auto van = ZmqVan::Create(token, o);
  EXPECT_TRUE(van.ok()) << van.status();
  return std::move(*van);
}

// Receives for `d`; the message or nothing.
bool RecvWithin(ZmqVan* van, Duration d, RawMessage* msg) {
  const auto deadline = Clock::now() + d;
  while (Clock::now() < deadline) {
    StatusOr<bool> got = van->Recv(msg);
    EXPECT_TRUE(got.ok()) << got.status();
    if (got.ok() && *got) return true;
  }
  return false;
}


TEST(SameHostTest, SecureVansOnOneHostTalkOverTheSameHostSocket) {
  const JobKey key = JobKey::Generate();
  auto a = MakeVan("a-token", key);
  auto b = MakeVan("b-token", key);
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_FALSE(b->SameHostAddress().empty());
  ASSERT_TRUE(a->Connect(1, "127.0.0.1", *port, b->SameHostAddress()).ok());
  ASSERT_TRUE(a->Send(1, 0, {Blob::FromString("over ipc")}).ok());
  RawMessage msg;
  ASSERT_TRUE(RecvWithin(b.get(), std::chrono::seconds(20), &msg));
  EXPECT_EQ(msg.token, "a-token");
  ASSERT_EQ(msg.frames.size(), 1u);
  EXPECT_EQ(msg.frames[0].ToString(), "over ipc");
}

TEST(SameHostTest, TcpStillNeedsTheKeyAfterTheSameHostBind) {
  auto b = MakeVan("b-token", JobKey::Generate());
  StatusOr<int> port = b->Bind(0);
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_FALSE(b->SameHostAddress().empty());
  // A plain ZeroMQ client on the TCP port, and one holding another key.
  auto plain = MakeVan("plain", JobKey::Insecure());
  auto other = MakeVan("other", JobKey::Generate());
  ASSERT_TRUE(plain->Connect(1, "127.0.0.1", *port, "").ok());
  ASSERT_TRUE(other->Connect(1, "127.0.0.1", *port, "").ok());
  (void)plain->Send(1, 0, {Blob::FromString("plain")});
  (void)other->Send(1, 0, {Blob::FromString("other key")});
  RawMessage msg;
  EXPECT_FALSE(RecvWithin(b.get(), std::chrono::seconds(1), &msg))
      << "got a message from " << msg.token;
}

// The stranger runs in a child forked before any ZeroMQ thread exists: it
// reads the node's address from a pipe, drops to user `nobody`, connects
// to the same-host socket and sends.
TEST(SameHostTest, AnotherUserCannotSendThroughTheSameHostSocket) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as another user";
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[1]);
    char buf[256] = {};
    const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
    if (n <= 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    const std::string endpoint = net::SameHostEndpoint(std::string(buf, n));
    void* ctx = zmq_ctx_new();
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    const int linger = 2000;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_setsockopt(s, ZMQ_ROUTING_ID, "stranger", 8);
    if (endpoint.empty() || zmq_connect(s, endpoint.c_str()) != 0) _exit(3);
    zmq_send(s, "hello", 5, 0);
    usleep(500 * 1000);
    zmq_close(s);
    zmq_ctx_term(ctx);
    _exit(0);
  }
  close(fds[0]);
  auto b = MakeVan("b-token", JobKey::Generate());
  ASSERT_TRUE(b->Bind(0).ok());
  const std::string address = b->SameHostAddress();
  ASSERT_EQ(write(fds[1], address.data(), address.size()),
            static_cast<ssize_t>(address.size()));
  close(fds[1]);
  RawMessage msg;
  EXPECT_FALSE(RecvWithin(b.get(), std::chrono::seconds(2), &msg))
      << "a process of another user got a message in: " << msg.token;
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the stranger could not even try";
}

// ---- What a peer without the key can make a node hold ----

// This process's resident memory in bytes.
int64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

// A raw TCP connection to 127.0.0.1:port (blocking), or -1.
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Tried on the node before: a client with no key sends a ZMTP 3.0 greeting
// naming CURVE, then a frame that declares 4 GB, and streams into it; libzmq
// buffered it all before the handshake. Now the node closes each such
// connection at the frame's size, holding nothing.
TEST(InboundLimitsTest, AFrameDeclaredAboveTheLimitIsNeverBuffered) {
  auto node = MakeVan("node", JobKey::Generate());
  const int port = *node->Bind(0);
  const int64_t before = ResidentBytes();
  std::vector<char> chunk(1 << 20, 'x');
  int64_t sent_total = 0;
  int closed = 0;
  for (int c = 0; c < 4; ++c) {
    const int fd = RawConnect(port);
    ASSERT_GE(fd, 0);
    unsigned char greeting[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0};
    std::memcpy(greeting + 12, "CURVE", 5);
    ASSERT_EQ(send(fd, greeting, sizeof(greeting), MSG_NOSIGNAL), 64);
    // A long command frame of 4 GB: flags 0x06, then the size (big-endian).
    unsigned char head[9] = {0x06, 0, 0, 0, 1, 0, 0, 0, 0};
    ASSERT_EQ(send(fd, head, sizeof(head), MSG_NOSIGNAL), 9);
    // 64 MB into it, or until the node closes the connection.
    for (int i = 0; i < 64; ++i) {
      const ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n <= 0) {
        ++closed;
        break;
      }
      sent_total += n;
    }
    close(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t grown = ResidentBytes() - before;
  EXPECT_EQ(closed, 4) << "the node took " << sent_total << " bytes into declared frames";
  EXPECT_LT(grown, 32 << 20) << "the node's memory grew by " << grown << " bytes";
  // Still serving the job's peers.
  auto peer = MakeVan("peer", JobKey::Generate());
  (void)peer;
}

// A stranger opening 2,000 connections and never speaking cannot use up
// the node's descriptors: files can still be opened and a new peer gets in.
// The stranger runs in a child forked before this test's ZeroMQ threads; the
// node runs with a soft limit of 1,500 descriptors.
TEST(InboundLimitsTest, TwoThousandIdleConnectionsLeaveDescriptors) {
  const JobKey key = JobKey::Generate();
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_child[1]);
    close(from_child[0]);
    int port = 0;
    if (read(to_child[0], &port, sizeof(port)) != sizeof(port)) _exit(2);
    std::vector<int> held;
    for (int i = 0; i < 2000; ++i) {
      // Blocking connects, each completed before the next (1 s at most:
      // a node that stopped accepting leaves the rest in its backlog).
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0) _exit(3);
      timeval tv{1, 0};
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      held.push_back(fd);
    }
    const char done = 1;
    if (write(from_child[1], &done, 1) != 1) _exit(4);
    char stop;
    (void)read(to_child[0], &stop, 1);  // until the parent is done
    _exit(0);
  }
  close(to_child[0]);
  close(from_child[1]);
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  {
    auto node = MakeVan("node", key);  // raises the soft limit, once
    const int port = *node->Bind(0);
    rlimit low = saved;
    low.rlim_cur = 1500;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    ASSERT_EQ(write(to_child[1], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    char done = 0;
    ASSERT_EQ(read(from_child[0], &done, 1), 1);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    int open_fds = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
      while (readdir(d) != nullptr) ++open_fds;
      closedir(d);
    }
    // At most kMaxPendingHandshakes in their handshake, plus the node's own.
    EXPECT_LT(open_fds, 2 * net::kMaxPendingHandshakes + 100)
        << "the node holds " << open_fds << " descriptors";
    // A checkpoint's worth of files.
    std::vector<int> files;
    const char* dir = std::getenv("TEST_TMPDIR");
    for (int i = 0; i < 200; ++i) {
      const std::string path = std::string(dir ? dir : "/tmp") + "/f" + std::to_string(i);
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      EXPECT_GE(fd, 0) << "open " << path << ": " << std::strerror(errno);
      if (fd < 0) break;
      files.push_back(fd);
    }
    for (int fd : files) close(fd);
    // A new peer with the key gets a message in.
    auto peer = MakeVan("peer", key);
    ASSERT_TRUE(peer->Connect(1, "127.0.0.1", port, "").ok());
    ASSERT_TRUE(peer->Send(1, 0, {Blob::FromString("still here")}).ok());
    RawMessage msg;
    ASSERT_TRUE(RecvWithin(node.get(), std::chrono::seconds(30), &msg));
    EXPECT_EQ(msg.frames[0].ToString(), "still here");
  }
  const char stop = 1;
  (void)write(to_child[1], &stop, 1);
  close(to_child[1]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  setrlimit(RLIMIT_NOFILE, &saved);
}

// The start of a large job under attack: 100 connections without the key,
// each having sent one byte of a greeting and renewed whenever closed, hold
// the node's handshake slots while 64 peers with the key connect at once.
// Every peer gets its message in, and no peer ever sees its handshake fail:
// only the strangers' connections are shed.
TEST(InboundLimitsTest, SixtyFourPeersGetInPastAHundredStrangers) {
  const int kStrangers = 100;
  const JobKey key = JobKey::Generate();
  Listener node(key);
  std::atomic<bool> stop{false};
  std::promise<void> opened;
  std::atomic<int> renewed{0};
  std::thread strangers([&] {
    std::vector<int> fds;
    auto open_one = [&] {
      const int fd = RawConnect(node.port);
      if (fd >= 0) (void)send(fd, "\xFF", 1, MSG_NOSIGNAL);
      return fd;
    };
    for (int i = 0; i < kStrangers; ++i) fds.push_back(open_one());
    opened.set_value();
    while (!stop.load()) {
      for (int& fd : fds) {
        pollfd p{fd, POLLIN, 0};
        if (fd >= 0 && poll(&p, 1, 0) == 0) continue;  // still held
        if (fd >= 0) close(fd);
        fd = open_one();
        renewed.fetch_add(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the attacker's pace
    }
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  });
  opened.get_future().wait();
  // The shedding rule's own clock: past 2 s below a HELLO's bytes, the
  // strangers' connections are old enough to be shed, as in a job attacked
  // before it starts.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  std::vector<std::unique_ptr<Sender>> peers;
  for (int i = 0; i < 64; ++i) {
    peers.push_back(std::make_unique<Sender>(key, "sender" + std::to_string(i)));
  }
  std::vector<std::thread> starts;
  for (int i = 0; i < 64; ++i) {
    starts.emplace_back([&, i] {
      EXPECT_TRUE(peers[i]->SendTo(node.port, "peer " + std::to_string(i)).ok());
    });
  }
  for (auto& t : starts) t.join();
  std::set<std::string> got;
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (got.size() < 64 && Clock::now() < until) {
    const std::string m = node.RecvOne(std::chrono::milliseconds(500));
    if (!m.empty()) got.insert(m);
  }
  stop = true;
  strangers.join();
  EXPECT_EQ(got.size(), 64u);
  EXPECT_GT(renewed.load(), 0) << "no stranger was shed: the test did not attack";
  for (int i = 0; i < 64; ++i) {
    std::lock_guard<std::mutex> l(peers[i]->mu);
    EXPECT_EQ(peers[i]->in_a_row, 0) << "peer " << i << "'s handshake failed: " << peers[i]->why;
  }
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
