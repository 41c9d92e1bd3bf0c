// Same-host links: the host identity follows the network namespace, only
// this host's addresses give an ipc endpoint, and the sockets' directory is
// private (transport/ps's
// zmq_van_security_test drives the links through Vans).
#include "net/same_host.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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
  const std::string dir = "/tmp/kvtrain-" + std::to_string(geteuid());
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@kvtrain-ps-1-ab"),
            "ipc://" + dir + "/kvtrain-ps-1-ab");
  EXPECT_EQ(SameHostEndpoint("0000-other-boot.4026531840@kvtrain-ps-1-ab"), "");
  EXPECT_EQ(SameHostEndpoint(""), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity()), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@"), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@a/b"), "");
  EXPECT_EQ(SameHostEndpoint(HostIdentity() + "@a b"), "");
}

// The sockets' directory is this user's, mode 0700: another user (a real
// process, uid 65534) cannot bind a name in it, so cannot stand in for a
// node that died; a directory someone else made, or a link, is refused.
TEST(SameHostTest, AnotherUserCannotBindOurNames) {
  StatusOr<std::string> dir = SocketDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(CheckPrivateDir(*dir).ok());
  const std::string name = *dir + "/taken-by-" + std::to_string(getpid());
  auto try_bind = [&name]() -> int {  // 0 or errno
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, name.c_str(), sizeof(addr.sun_path) - 1);
    const int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    const int err = rc == 0 ? 0 : errno;
    close(fd);
    return err;
  };
  if (geteuid() == 0) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(99);
      _exit(try_bind() == EACCES ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "another user could bind " << name;
  }
  EXPECT_EQ(try_bind(), 0);
  unlink(name.c_str());
  // Directories that are not private.
  char tmpl[] = "/tmp/kvtrain-dirtest-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string open_dir = tmpl;
  ASSERT_EQ(chmod(open_dir.c_str(), 0755), 0);
  Status s = CheckPrivateDir(open_dir);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("mode 0755"), std::string::npos) << s;
  const std::string link = open_dir + ".link";
  ASSERT_EQ(symlink(open_dir.c_str(), link.c_str()), 0);
  s = CheckPrivateDir(link);
  EXPECT_NE(s.message().find("is not a directory"), std::string::npos) << s;
  if (geteuid() == 0) {
    ASSERT_EQ(chmod(open_dir.c_str(), 0700), 0);
    ASSERT_EQ(chown(open_dir.c_str(), 65534, 65534), 0);
    s = CheckPrivateDir(open_dir);
    EXPECT_NE(s.message().find("belongs to uid 65534"), std::string::npos) << s;
  }
  unlink(link.c_str());
  rmdir(open_dir.c_str());
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
