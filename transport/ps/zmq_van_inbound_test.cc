// What a peer without the job's key can make a node hold: declared frames
// above the limit, keyless floods on the sealed lane, commands no HELLO
// needs, shared-memory tables over TCP, idle connections by the thousand,
// and real peers getting in past a hundred strangers.
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

#include "transport/ps/zmq_van.h"
#include "transport/ps/zmq_van_security_testlib.h"
#include "net/curve.h"
#include "net/same_host.h"
#include "net/shm.h"

namespace kvtrain {
namespace ps {
namespace {

using ::testing::HasSubstr;
using net::JobKey;
using security_test::Listener;
using security_test::MakeVan;
using security_test::RecvWithin;
using security_test::Sender;

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
  // Each connection was closed by the node (the send failed): whatever it
  // had buffered for them would be resident now.
  const int64_t grown = ResidentBytes() - before;
  EXPECT_EQ(closed, 4) << "the node took " << sent_total << " bytes into declared frames";
  EXPECT_LT(grown, 32 << 20) << "the node's memory grew by " << grown << " bytes";
  // Still serving the job's peers.
  auto peer = MakeVan("peer", JobKey::Generate());
  (void)peer;
}

// A ZMTP 3.0 greeting naming `mechanism`, as a client's.
std::string Greeting(const std::string& mechanism) {
  std::string g(64, '\0');
  g[0] = '\xFF';
  g[9] = '\x7F';
  g[10] = 3;
  std::memcpy(&g[12], mechanism.data(), mechanism.size());
  return g;
}

// A short ZMTP command frame: flags 0x04, size, "\x05NAME" and `body`.
std::string Command(const std::string& name, const std::string& body) {
  std::string c = std::string(1, static_cast<char>(name.size())) + name + body;
  return std::string{'\x04', static_cast<char>(c.size())} + c;
}

// Sends all of `data` on a blocking socket; false once the peer closed.
bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t k = send(fd, data, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    data += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The attack on the sealed lane, as a process without the job's key can
// make it: a connection opens a handshake (`hello`, after the greeting),
// then streams 1 MiB frames marked "more to follow", never the last one,
// 256 MiB in all. Returns the bytes the node took before it closed the
// connection (all of them if it never did).
int64_t FloodLane(int port, const std::string& greeting, const std::string& hello) {
  const int fd = RawConnect(port);
  EXPECT_GE(fd, 0);
  timeval tv{5, 0};  // a node that stops reading without closing: stop too
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int64_t sent = 0;
  std::string frame(9 + (1 << 20), 'x');
  frame[0] = '\x03';  // more, long size
  for (int i = 0; i < 8; ++i) frame[1 + i] = 0;
  frame[1 + 5] = '\x10';  // 1 MiB, big-endian
  if (SendAll(fd, greeting.data(), greeting.size()) &&
      SendAll(fd, hello.data(), hello.size())) {
    sent = static_cast<int64_t>(greeting.size() + hello.size());
    for (int i = 0; i < 256; ++i) {
      if (!SendAll(fd, frame.data(), frame.size())) break;
      sent += static_cast<int64_t>(frame.size());
    }
  }
  close(fd);
  return sent;
}

// Tried on a node before: a keyless client on the sealed lane's port
// (ZeroMQ's NULL mechanism then) streamed 256 MiB of an unfinished message
// and the node held all of it. Now the lane admits a connection only with
// a lane's token: the NULL client is closed at its greeting, a PLAIN
// client with a made-up token at its HELLO, and the node's memory stays
// where it was.
TEST(InboundLimitsTest, AKeylessFloodOnTheLaneHoldsNothing) {
  const JobKey key = JobKey::Generate();
  Listener node(key);
  const int lane = node.van->lane_port();
  ASSERT_GT(lane, 0);
  const int64_t before = ResidentBytes();
  const std::string ready =
      Command("READY", std::string("\x0bSocket-Type\0\0\0\x06", 16) + "DEALER");
  const int64_t null_took = FloodLane(lane, Greeting("NULL"), ready);
  const std::string user = net::kLaneUser;
  const std::string token(32, 'a');
  const int64_t plain_took = FloodLane(
      lane, Greeting("PLAIN"),
      Command("HELLO", std::string(1, static_cast<char>(user.size())) + user +
                           std::string(1, static_cast<char>(token.size())) + token));
  const int64_t grown = ResidentBytes() - before;
  EXPECT_LT(null_took, 64 << 20) << "the node took " << null_took << " bytes from a NULL client";
  EXPECT_LT(plain_took, 64 << 20) << "the node took " << plain_took << " bytes from a made-up token";
  EXPECT_LT(grown, 64 << 20) << "the node's memory grew by " << grown << " bytes";
  // The job's own peers still get in.
  Sender peer(key);
  ASSERT_TRUE(peer.SendTo(node.port, "still here").ok());
  EXPECT_EQ(node.RecvOne(std::chrono::seconds(30)), "still here");
}

// A client with no key declares a first command just under the frame
// limit, as no HELLO needs, and streams into it: ZeroMQ would buffer each
// until the handshake deadline (10 s). 40 such connections held 160 MiB.
// Now a connection past a HELLO's bytes without the node's WELCOME is
// closed at once.
TEST(InboundLimitsTest, ACommandNoHelloNeedsIsClosedAtOnce) {
  auto node = MakeVan("node", JobKey::Generate());
  const int port = *node->Bind(0);
  const int64_t before = ResidentBytes();
  const size_t declared = (4u << 20) - 64;
  std::vector<char> body(declared - 1024, 'x');
  std::vector<int> fds;
  for (int c = 0; c < 40; ++c) {
    const int fd = RawConnect(port);
    ASSERT_GE(fd, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    const std::string greeting = Greeting("CURVE");
    unsigned char head[9] = {0x06, 0, 0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 8; ++i) head[8 - i] = static_cast<unsigned char>(declared >> (8 * i));
    (void)(SendAll(fd, greeting.data(), greeting.size()) &&
           SendAll(fd, reinterpret_cast<const char*>(head), sizeof(head)) &&
           SendAll(fd, body.data(), body.size()));
    fds.push_back(fd);  // held open, never finished
  }
  // Each is closed by the node (its greeting read, then the end), not at
  // the 10 s handshake deadline.
  int closed = 0;
  for (int fd : fds) {
    const auto until = Clock::now() + std::chrono::seconds(3);
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - Clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) != 1) break;
      char b[256];
      if (recv(fd, b, sizeof(b), MSG_DONTWAIT) <= 0) {
        ++closed;
        break;
      }
    }
  }
  const int64_t grown = ResidentBytes() - before;
  for (int fd : fds) close(fd);
  EXPECT_EQ(closed, 40) << "connections the node kept open past their HELLO's bytes";
  // Held, they would be 160 MiB; freed, the allocator may keep some.
  EXPECT_LT(grown, 128 << 20) << "the node's memory grew by " << grown << " bytes";
}

// A key holder over TCP (another host, or this one's) sends a table naming
// shared memory of a process on the node's host: before, the node opened
// /proc/<pid>/fd/<fd> and read it as the message's frame. Now only a peer
// on the same-host socket may name shared memory; this one is dropped.
TEST(SameHostTest, ASharedMemoryTableOverTcpIsRefused) {
  const JobKey key = JobKey::Generate();
  ZmqVanOptions o;
  o.key = key;
  o.sealed_lane = false;  // every message over CURVE, where tables are read
  o.poll_interval = std::chrono::milliseconds(20);
  auto node = ZmqVan::Create("node", o).value();
  const int port = *node->Bind(0);
  auto arena = net::ShmArena::Create(1 << 20).value();
  const std::string secret = "bytes of a process on the node's host";
  net::ShmRef ref;
  ASSERT_TRUE(arena->Put(secret.data(), secret.size(), &ref));
  net::ShmPlaced placed;
  placed.frame = 0;
  placed.offset = ref.offset;
  placed.size = ref.size;
  const std::string table = net::EncodeShmTable(ref, {placed});
  auto peer = MakeVan("peer", key);
  ASSERT_TRUE(peer->Connect(1, "127.0.0.1", port, "").ok());
  ASSERT_TRUE(peer->Send(1, 0, {Blob(), Blob::Copy(table.data(), table.size()), Blob()}).ok());
  RawMessage msg;
  ASSERT_TRUE(RecvWithin(node.get(), std::chrono::seconds(30), &msg));
  EXPECT_FALSE(msg.same_host);
  EXPECT_EQ(msg.error.code(), Status::Code::kInvalidArgument) << msg.error;
  EXPECT_THAT(std::string(msg.error.message()), HasSubstr("over TCP"));
  for (const Blob& b : msg.frames) {
    EXPECT_NE(b.ToString(), secret) << "the node read another process's memory";
  }
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
    if (read(to_child[0], &stop, 1) < 0) _exit(5);  // until the parent is done
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
    // Silent connections are shed 3 s after they came: once the stranger's
    // last one is that old, at most kMaxPendingHandshakes are in their
    // handshake, plus the node's own descriptors.
    auto count_fds = [] {
      int n = 0;
      if (DIR* d = opendir("/proc/self/fd")) {
        while (readdir(d) != nullptr) ++n;
        closedir(d);
      }
      return n;
    };
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    int open_fds = count_fds();
    while (open_fds >= 2 * net::kMaxPendingHandshakes + 100 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      open_fds = count_fds();
    }
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
  EXPECT_EQ(write(to_child[1], &stop, 1), 1);
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
