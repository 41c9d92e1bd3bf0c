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

}  // namespace
}  // namespace ps
}  // namespace kvtrain
