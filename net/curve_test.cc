// CURVE: Z85 (agreeing with tracker/launch.py's encoder), JobKey from the
// environment and key files, and a ZAP handler that admits only the job's
// key (transport/ps/zmq_van_security_test drives it through Vans).
#include "net/curve.h"
#include "net/handshake_monitor.h"

#include "base/clock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

namespace kvtrain {
namespace net {
namespace {

using ::testing::HasSubstr;

// tracker/launch.py's z85_encode(bytes(range(32))); launch_test.py checks
// the same pair.
constexpr char kBytes0To31Z85[] = "009c61o!#m2NH?C3>iWS5d]J*6CRx17-skh9337x";

TEST(Z85Test, RfcVectorAndLauncherAgreement) {
  const std::string hello("\x86\x4F\xD2\x6F\xB5\x59\xF7\x5B", 8);
  EXPECT_EQ(Z85Encode(hello), "HelloWorld");
  EXPECT_EQ(*Z85Decode("HelloWorld"), hello);
  std::string bytes;
  for (int i = 0; i < 32; ++i) bytes.push_back(static_cast<char>(i));
  EXPECT_EQ(Z85Encode(bytes), kBytes0To31Z85);
  EXPECT_EQ(*Z85Decode(kBytes0To31Z85), bytes);
  EXPECT_FALSE(Z85Decode("Hello").ok() && Z85Decode("Hell").ok());
  EXPECT_FALSE(Z85Decode("HelloWorl~").ok());
}

TEST(JobKeyTest, FromZ85DerivesThePublicKey) {
  const JobKey g = JobKey::Generate();
  ASSERT_TRUE(g.secure());
  StatusOr<JobKey> k = JobKey::FromSecretZ85(g.secret_z85(), "test");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->public_z85(), g.public_z85());
  EXPECT_EQ(k->Fingerprint(), g.public_z85().substr(0, 8));
  StatusOr<JobKey> bad = JobKey::FromSecretZ85("short", "KVTRAIN_JOB_KEY");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("KVTRAIN_JOB_KEY"));
  EXPECT_THAT(bad.status().message(), HasSubstr("40 characters"));
  EXPECT_THAT(bad.status().message(), ::testing::Not(HasSubstr("short")));
}

std::string WriteKeyFile(const std::string& text, mode_t mode) {
  char path[] = "/tmp/kvtrain-key-XXXXXX";
  const int fd = mkstemp(path);
  CHECK_GE(fd, 0);
  CHECK_EQ(write(fd, text.data(), text.size()),
           static_cast<ssize_t>(text.size()));
  close(fd);
  chmod(path, mode);
  return path;
}

TEST(JobKeyTest, FromEnv) {
  const JobKey g = JobKey::Generate();
  // The variable.
  StatusOr<JobKey> k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY", g.secret_z85()}}));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->public_z85(), g.public_z85());
  // A 0600 file (with a trailing newline) works, and the variable wins.
  const std::string good = WriteKeyFile(g.secret_z85() + "\n", 0600);
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", good}}));
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->public_z85(), g.public_z85());
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY", JobKey::Generate().secret_z85()},
                              {"KVTRAIN_JOB_KEY_FILE", good}}));
  ASSERT_TRUE(k.ok());
  EXPECT_NE(k->public_z85(), g.public_z85());
  // A file others may read is refused, naming the file and its mode.
  const std::string open_file = WriteKeyFile(g.secret_z85(), 0644);
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", open_file}}));
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr(open_file));
  EXPECT_THAT(k.status().message(), HasSubstr("mode 0644"));
  EXPECT_THAT(k.status().message(), HasSubstr("0600"));
  const std::string group_file = WriteKeyFile(g.secret_z85(), 0640);
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", group_file}}));
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr("mode 0640"));
  // A symbolic link to a good key file is refused: the checks are made on
  // the file that is read, and a link can be swapped between them.
  const std::string link = good + ".link";
  ASSERT_EQ(symlink(good.c_str(), link.c_str()), 0);
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", link}}));
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr(link));
  EXPECT_THAT(k.status().message(), HasSubstr("symbolic link"));
  // So is a 0600 file of another user's (they could replace it).
  const std::string foreign = WriteKeyFile(g.secret_z85(), 0600);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
    k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", foreign}}));
    ASSERT_FALSE(k.ok());
    EXPECT_THAT(k.status().message(), HasSubstr("belongs to uid 65534"));
  }
  // And a directory, and a file far too long to be a key.
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", "/tmp"}}));
  ASSERT_FALSE(k.ok());
  const std::string huge = WriteKeyFile(std::string(10000, 'k'), 0600);
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", huge}}));
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr("too long"));
  for (const std::string& p : {link, foreign, huge}) unlink(p.c_str());
  // A missing file names itself.
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_JOB_KEY_FILE", "/nonexistent/key"}}));
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr("/nonexistent/key"));
  // Neither: an error saying what to set.
  k = JobKey::FromEnv(MapEnv({}));
  ASSERT_FALSE(k.ok());
  EXPECT_THAT(k.status().message(), HasSubstr("KVTRAIN_JOB_KEY"));
  EXPECT_THAT(k.status().message(), HasSubstr("KVTRAIN_JOB_KEY_FILE"));
  EXPECT_THAT(k.status().message(), HasSubstr("KVTRAIN_INSECURE=1"));
  // Insecure, even with a key; a bad value is an error.
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_INSECURE", "1"}}));
  ASSERT_TRUE(k.ok());
  EXPECT_FALSE(k->secure());
  k = JobKey::FromEnv(MapEnv({{"KVTRAIN_INSECURE", "maybe"}}));
  EXPECT_FALSE(k.ok());
  for (const std::string& p : {good, open_file, group_file}) unlink(p.c_str());
}

// A client that knows the job's public key (say it leaked) but not the
// secret key presents its own key pair: the ZAP handler refuses it.
TEST(ZapHandlerTest, RefusesAClientKeyThatIsNotTheJobs) {
  const JobKey job = JobKey::Generate();
  void* ctx = zmq_ctx_new();
  auto zap = ZapHandler::Start(ctx, job, "test server");
  ASSERT_TRUE(zap.ok()) << zap.status();
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  const int zero = 0, timeout_ms = 200;
  zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  ASSERT_TRUE(SecureSocket(router, job, true).ok());
  ASSERT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
  char endpoint[128];
  size_t len = sizeof(endpoint);
  zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, endpoint, &len);

  void* cctx = zmq_ctx_new();
  auto try_client = [&](const JobKey& own) {
    void* d = zmq_socket(cctx, ZMQ_DEALER);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    // The job's public key as the server's, `own` as the client's pair.
    const std::string& pub = job.public_z85();
    zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, pub.c_str(), pub.size() + 1);
    zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, own.public_z85().c_str(), 41);
    zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, own.secret_z85().c_str(), 41);
    zmq_connect(d, endpoint);
    zmq_send(d, "x", 1, 0);
    char buf[16];
    std::string got;
    for (int i = 0; i < 10 && got.empty(); ++i) {
      if (zmq_recv(router, buf, sizeof(buf), 0) >= 0) {
        int more = 0;
        size_t ml = sizeof(more);
        zmq_getsockopt(router, ZMQ_RCVMORE, &more, &ml);
        if (more && zmq_recv(router, buf, sizeof(buf), 0) == 1) got = "x";
      }
    }
    zmq_close(d);
    return got;
  };
  EXPECT_EQ(try_client(JobKey::Generate()), "");
  EXPECT_GE((*zap)->refused(), 1);
  EXPECT_EQ((*zap)->accepted(), 0);
  EXPECT_EQ(try_client(job), "x");
  EXPECT_GE((*zap)->accepted(), 1);
  zmq_close(router);
  zap->reset();
  zmq_ctx_term(ctx);
  zmq_ctx_term(cctx);
}

// Waits (up to 20 s) for `cond`; whether it came.
template <typename Cond>
bool Eventually(Cond cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A secure ROUTER bound on 127.0.0.1, watched by a HandshakeMonitor on
// `clock`, in a context of its own with its ZAP handler.
struct WatchedRouter {
  explicit WatchedRouter(const JobKey& job, const Clock* clock = Clock::Real()) {
    ctx = zmq_ctx_new();
    zap = std::move(ZapHandler::Start(ctx, job, "test server")).value();
    monitor = HandshakeMonitor::Start(ctx, /*secure=*/true, "test server", nullptr, nullptr,
                                      clock);
    router = zmq_socket(ctx, ZMQ_ROUTER);
    const int zero = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof(zero));
    EXPECT_TRUE(SecureSocket(router, job, true).ok());
    EXPECT_TRUE(monitor->Watch(router, /*is_server=*/true, 0).ok());
    EXPECT_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
    char last[128];
    size_t len = sizeof(last);
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, last, &len);
    endpoint = last;
    port = std::atoi(std::strrchr(last, ':') + 1);
  }
  ~WatchedRouter() {
    zmq_close(router);
    monitor.reset();
    zap.reset();
    zmq_ctx_term(ctx);
  }
  void* ctx;
  std::unique_ptr<ZapHandler> zap;
  std::unique_ptr<HandshakeMonitor> monitor;
  void* router;
  std::string endpoint;
  int port = 0;
};

// Once every connection has done its handshake (over TCP and over a local
// socket, whose bytes the monitor cannot read), the monitor waits without a
// timeout; a new connection wakes it, and its end lets it sleep again.
TEST(HandshakeMonitorTest, SleepsWhileNoConnectionIsInItsHandshake) {
  const JobKey job = JobKey::Generate();
  WatchedRouter w(job);
  void* ctx = w.ctx;
  void* router = w.router;
  HandshakeMonitor* monitor = w.monitor.get();
  const std::string endpoint = w.endpoint;
  const int zero = 0;
  const std::string ipc = "ipc://@kvtrain-monitor-test-" + std::to_string(getpid());
  ASSERT_EQ(zmq_bind(router, ipc.c_str()), 0);

  std::vector<void*> clients;
  for (const std::string& where : {std::string(endpoint), ipc}) {
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    ASSERT_TRUE(SecureSocket(d, job, false).ok());
    ASSERT_EQ(zmq_connect(d, where.c_str()), 0);
    ASSERT_EQ(zmq_send(d, "x", 1, 0), 1);
    char buf[16];
    ASSERT_GE(zmq_recv(router, buf, sizeof(buf), 0), 0);  // its routing id
    ASSERT_EQ(zmq_recv(router, buf, sizeof(buf), 0), 1);  // both handshakes done
    clients.push_back(d);
  }
  EXPECT_TRUE(Eventually([&] { return monitor->asleep(); }))
      << "the monitor keeps looking with every handshake done";

  // A connection that says nothing is in its handshake: looked at.
  const int raw = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(w.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(raw, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_TRUE(Eventually([&] { return !monitor->asleep(); }))
      << "a new connection did not wake the monitor";
  close(raw);
  EXPECT_TRUE(Eventually([&] { return monitor->asleep(); }))
      << "the monitor keeps looking after the connection ended";
  EXPECT_EQ(monitor->shed(), 0);

  for (void* d : clients) zmq_close(d);
}

// The shedding rule's deadlines run on the monitor's clock: 40 strangers,
// each having sent a byte of a greeting, hold the handshake slots; none is
// shed while they are young, and once the clock passes 2 s the 8 beyond
// the 32 slots are, the oldest first, and a key holder still gets in.
TEST(HandshakeMonitorTest, StrangersAreShedWhenOldOnTheMonitorsClock) {
  const JobKey job = JobKey::Generate();
  FakeClock clock;
  WatchedRouter w(job, &clock);
  void* ctx = w.ctx;
  void* router = w.router;
  HandshakeMonitor* monitor = w.monitor.get();
  const char* endpoint = w.endpoint.c_str();
  const int zero = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(w.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int kStrangers = kMaxPendingHandshakes + 8;
  std::vector<int> strangers;
  for (int i = 0; i < kStrangers; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(send(fd, "\xFF", 1, MSG_NOSIGNAL), 1);
    strangers.push_back(fd);
  }
  // A key holder connects after them and gets a message through: every
  // stranger's connection was accepted and looked at before it. None is
  // old on the clock, so none is shed.
  auto through = [&](const std::string& what) {
    void* d = zmq_socket(ctx, ZMQ_DEALER);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    EXPECT_TRUE(SecureSocket(d, job, false).ok());
    EXPECT_EQ(zmq_connect(d, endpoint), 0);
    EXPECT_EQ(zmq_send(d, what.data(), what.size(), 0), static_cast<int>(what.size()));
    char buf[64];
    const int timeout = 20000;
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    EXPECT_GE(zmq_recv(router, buf, sizeof(buf), 0), 0);  // its routing id
    const int n = zmq_recv(router, buf, sizeof(buf), 0);
    zmq_close(d);
    return n >= 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  };
  EXPECT_EQ(through("first"), "first");
  EXPECT_EQ(monitor->shed(), 0);
  clock.Advance(std::chrono::milliseconds(2100));
  EXPECT_TRUE(Eventually([&] { return monitor->shed() >= 8; })) << monitor->shed();
  // The shed connections are closed; a key holder still gets in (making
  // room for it may shed one more stranger, never it).
  std::vector<bool> ended(strangers.size(), false);
  auto closed = [&] {
    int n = 0;
    for (size_t i = 0; i < strangers.size(); ++i) {
      char buf[64];
      ssize_t got = -1;
      while (!ended[i] && (got = recv(strangers[i], buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      }
      if (!ended[i] && got == 0) ended[i] = true;  // the node closed it
      n += ended[i] ? 1 : 0;
    }
    return n;
  };
  EXPECT_TRUE(Eventually([&] { return closed() >= 8; })) << closed();
  EXPECT_EQ(through("second"), "second");
  EXPECT_LE(monitor->shed(), 9);
  for (int fd : strangers) close(fd);
}

// A context holds as many sockets as the process may open files, not
// ZeroMQ's default 1,023: a node of a 1,024-node job has a sending socket
// and a monitor per peer.
TEST(SizeContextTest, AContextHoldsMoreThanAThousandSockets) {
  void* ctx = zmq_ctx_new();
  SizeContext(ctx);
  rlimit r;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &r), 0);
  if (r.rlim_cur < 4096) GTEST_SKIP() << "open-file limit " << r.rlim_cur;
  EXPECT_GE(zmq_ctx_get(ctx, ZMQ_MAX_SOCKETS), 4096);
  std::vector<void*> sockets;
  for (int i = 0; i < 1500; ++i) {
    void* s = zmq_socket(ctx, ZMQ_DEALER);
    ASSERT_NE(s, nullptr) << "socket " << i << ": " << zmq_strerror(zmq_errno());
    sockets.push_back(s);
  }
  for (void* s : sockets) zmq_close(s);
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
