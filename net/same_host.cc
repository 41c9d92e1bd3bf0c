// Same-host links over abstract Unix-domain sockets (see same_host.h).
#include "net/same_host.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cstdio>
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
  if (zmq_bind(socket, (std::string("ipc://@") + name).c_str()) != 0) {
    return Status::Unavailable(std::string("cannot bind ipc://@") + name + ": " +
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
  return "ipc://@" + address.substr(address.find('@') + 1);
}

bool SameHostSharesPids(const std::string& address) {
  if (SameHostEndpoint(address).empty()) return false;
  const size_t dot = address.rfind('.');
  const std::string mine = PidNamespace();
  return dot != std::string::npos && dot > address.find('@') && !mine.empty() &&
         address.substr(dot + 1) == mine;
}

}  // namespace net
}  // namespace kvtrain
