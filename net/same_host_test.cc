// Same-host links: the host identity follows the network namespace and only
// this host's addresses give an ipc endpoint (kvstore/ps's
// zmq_van_security_test drives the links through Vans).
#include "net/same_host.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include <cstring>

namespace kvtrain {
namespace net {
namespace {

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

// Any host's address names its host; malformed ones name none.
TEST(SameHostTest, AnAddressNamesItsHost) {
  EXPECT_EQ(SameHostIdentity("0000-other-boot.4026531840@kvtrain-ps-1-ab"),
            "0000-other-boot.4026531840");
  EXPECT_EQ(SameHostIdentity(HostIdentity() + "@kvtrain-ps-1-ab"), HostIdentity());
  EXPECT_EQ(SameHostIdentity(""), "");
  EXPECT_EQ(SameHostIdentity("@kvtrain-ps-1-ab"), "");
  EXPECT_EQ(SameHostIdentity("boot.1@"), "");
  EXPECT_EQ(SameHostIdentity("boot 1@x"), "");
}

// Shared memory is for peers whose /proc entries are ours to open: same
// host and same PID namespace, which BindSameHost's name carries.
TEST(SameHostTest, TheAddressSaysWhetherThePeerSharesOurPids) {
  ASSERT_FALSE(PidNamespace().empty());
  const std::string mine = HostIdentity() + "@kvtrain-ps-1-ab." + PidNamespace();
  EXPECT_TRUE(SameHostSharesPids(mine));
  EXPECT_FALSE(SameHostSharesPids(HostIdentity() + "@kvtrain-ps-1-ab.1"));
  EXPECT_FALSE(SameHostSharesPids(HostIdentity() + "@kvtrain-ps-1-ab"));
  EXPECT_FALSE(SameHostSharesPids("0000-other-boot.4026531840@kvtrain-ps-1-ab." + PidNamespace()));
  EXPECT_FALSE(SameHostSharesPids(""));

  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_ROUTER);
  StatusOr<std::string> address = BindSameHost(s, "ps");
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_TRUE(SameHostSharesPids(*address)) << *address;
  EXPECT_FALSE(SameHostEndpoint(*address).empty());
  zmq_close(s);
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
