// Same-host links: the host identity follows the network namespace, only
// this host's addresses give an ipc endpoint, a secure van's peers on this
// host connect without CURVE, and a process of another user id cannot get a
// message into a node through its same-host socket.
#include "kvstore/ps/same_host.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cstring>

#include "kvstore/ps/zmq_van.h"

namespace kvtrain {
namespace ps {
namespace {

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

TEST(SameHostTest, IdentityNamesTheKernelAndTheNetworkNamespace) {
  const std::string id = HostIdentity();
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(HostIdentity(), id);
  // A process in a new network namespace is another host: its abstract
  // sockets are not ours.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    const std::string other = unshare(CLONE_NEWNET) == 0 ? HostIdentity() : "unshare failed";
    (void)!write(fds[1], other.data(), other.size());
    _exit(0);
  }
  close(fds[1]);
  char buf[256] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  waitpid(child, nullptr, 0);
  const std::string other(buf, n > 0 ? n : 0);
  if (other == "unshare failed") GTEST_SKIP() << "cannot make a network namespace here";
  EXPECT_NE(other, id);
  EXPECT_EQ(other.substr(0, other.find('.')), id.substr(0, id.find('.')));  // same kernel
}

TEST(SameHostTest, OnlyThisHostsAddressesGiveAnEndpoint) {
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@kvtrain-ps-1-ab"), "ipc://@kvtrain-ps-1-ab");
  EXPECT_EQ(SameHostEndpoint("0000-other-boot.4026531840@kvtrain-ps-1-ab"), "");
  EXPECT_EQ(SameHostEndpoint(""), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity()), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@"), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@a/b"), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@a b"), "");
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
    const std::string endpoint = SameHostEndpoint(std::string(buf, n));
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
