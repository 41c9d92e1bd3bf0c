// Same-host links over Unix-domain sockets in a private directory (see
// same_host.h).
#include "net/same_host.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

namespace kvtrain {
namespace net {
namespace {

bool IsToken(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return true;
}

}  // namespace

Status CheckPrivateDir(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return Status::Unavailable("same-host sockets: cannot stat " + path + ": " +
                               std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("same-host sockets: " + path +
                                      " is not a directory (a link or a file)");
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "0%03o", static_cast<unsigned>(st.st_mode & 0777));
    return Status::FailedPrecondition(
        "same-host sockets: " + path + " belongs to uid " + std::to_string(st.st_uid) +
        " with mode " + mode + "; it must be this user's (uid " +
        std::to_string(geteuid()) + ") with mode 0700, or other users could "
        "bind its sockets' names");
  }
  return Status::OK();
}

StatusOr<std::string> SocketDir() {
  static const StatusOr<std::string>* dir = [] {
    const std::string path = "/tmp/kvtrain-" + std::to_string(geteuid());
    if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return new StatusOr<std::string>(Status::Unavailable(
          "same-host sockets: cannot create " + path + ": " + std::strerror(errno)));
    }
    const Status ok = CheckPrivateDir(path);
    return new StatusOr<std::string>(ok.ok() ? StatusOr<std::string>(path)
                                              : StatusOr<std::string>(ok));
  }();
  return *dir;
}

std::string PidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return "";
  return std::to_string(static_cast<unsigned long long>(st.st_ino));
}

std::string HostIdentity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  in >> boot;
  struct stat st;
  if (!IsToken(boot) || stat("/proc/self/ns/net", &st) != 0) return "";
  return boot + "." + std::to_string(static_cast<unsigned long long>(st.st_ino));
}

StatusOr<std::string> BindSameHost(void* socket, const std::string& prefix) {
  const std::string host = HostIdentity();
  if (host.empty()) {
    return Status::Unavailable("no host identity (/proc/sys/kernel/random/boot_id, "
                               "/proc/self/ns/net)");
  }
  KV_ASSIGN_OR_RETURN(std::string dir, SocketDir());
  std::random_device rd;
  char name[96];
  std::snprintf(name, sizeof(name), "kvtrain-%s-%d-%08x%08x.%s", prefix.c_str(),
                static_cast<int>(getpid()), rd(), rd(), PidNamespace().c_str());
  if (!IsToken(name)) return Status::InvalidArgument("bad socket name prefix " + prefix);
  const int zero = 0;
  const int uid = static_cast<int>(geteuid());
  // Later binds only: listeners bound before keep the options they copied.
  if (zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &zero, sizeof(zero)) != 0 ||
      zmq_setsockopt(socket, ZMQ_IPC_FILTER_UID, &uid, sizeof(uid)) != 0) {
    return Status::Unavailable(std::string("same-host socket options: ") +
                               zmq_strerror(zmq_errno()));
  }
  const std::string endpoint = "ipc://" + dir + "/" + name;
  if (zmq_bind(socket, endpoint.c_str()) != 0) {
    return Status::Unavailable("cannot bind " + endpoint + ": " +
                               zmq_strerror(zmq_errno()));
  }
  return host + "@" + name;
}

std::string SameHostIdentity(const std::string& address) {
  const size_t at = address.find('@');
  if (at == std::string::npos) return "";
  const std::string host = address.substr(0, at), name = address.substr(at + 1);
  return IsToken(host) && IsToken(name) ? host : "";
}

std::string SameHostEndpoint(const std::string& address) {
  const std::string host = SameHostIdentity(address);
  if (host.empty() || host != HostIdentity()) return "";
  StatusOr<std::string> dir = SocketDir();
  if (!dir.ok()) return "";
  return "ipc://" + *dir + "/" + address.substr(address.find('@') + 1);
}

bool SameHostSharesPids(const std::string& address) {
  if (SameHostEndpoint(address).empty()) return false;
  const size_t dot = address.rfind('.');
  const std::string mine = PidNamespace();
  return dot != std::string::npos && dot > address.find('@') && !mine.empty() &&
         address.substr(dot + 1) == mine;
}

bool IsUnixSocket(int fd) {
  if (fd < 0) return false;
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
         ss.ss_family == AF_UNIX;
}

}  // namespace net
}  // namespace kvtrain
