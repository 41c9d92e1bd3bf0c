// Interface listing, host resolution and the advertised-address rule.
#include "net/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace kvtrain {
namespace net {

std::vector<NetInterface> ListInterfaces() {
  std::map<std::string, NetInterface> by_name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    NetInterface& i = by_name[a->ifa_name];
    i.name = a->ifa_name;
    i.up = i.up || (a->ifa_flags & IFF_UP);
    i.loopback = i.loopback || (a->ifa_flags & IFF_LOOPBACK);
    if (i.ipv4.empty() && a->ifa_addr != nullptr &&
        a->ifa_addr->sa_family == AF_INET) {
      char buf[INET_ADDRSTRLEN];
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) != nullptr) {
        i.ipv4 = buf;
      }
    }
  }
  freeifaddrs(list);
  std::vector<NetInterface> out;
  for (auto& [name, i] : by_name) out.push_back(i);
  return out;
}

std::string DescribeInterfaces(const std::vector<NetInterface>& ifs) {
  if (ifs.empty()) return "(none found)";
  std::string out;
  for (const NetInterface& i : ifs) {
    if (!out.empty()) out += ", ";
    out += i.name + " (" + (i.ipv4.empty() ? "no IPv4" : i.ipv4) + ")";
  }
  return out;
}

StatusOr<std::string> InterfaceAddress(const std::string& name,
                                       const std::vector<NetInterface>& ifs) {
  for (const NetInterface& i : ifs) {
    if (i.name != name) continue;
    if (i.ipv4.empty()) {
      return Status::NotFound(std::string(env::kInterface) + "=\"" + name +
                              "\": the interface has no IPv4 address; "
                              "interfaces: " +
                              DescribeInterfaces(ifs));
    }
    return i.ipv4;
  }
  return Status::NotFound(
      std::string(env::kInterface) + "=\"" + name +
      "\": no such network interface; interfaces: " + DescribeInterfaces(ifs));
}

StatusOr<std::string> ResolveIPv4(const std::string& host) {
  in_addr addr;
  if (inet_pton(AF_INET, host.c_str(), &addr) == 1) return host;
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Status::NotFound("cannot resolve host name \"" + host +
                            "\" to an IPv4 address: " + gai_strerror(rc));
  }
  char buf[INET_ADDRSTRLEN];
  const auto* sin = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
  freeaddrinfo(res);
  return std::string(buf);
}

StatusOr<std::string> RouteSourceAddress(const std::string& ip, int port) {
  sockaddr_in dst;
  std::memset(&dst, 0, sizeof(dst));
  dst.sin_family = AF_INET;
  dst.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &dst.sin_addr) != 1) {
    return Status::InvalidArgument("not an IPv4 address: " + ip);
  }
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0)
    return Status::Unavailable("socket: " + std::string(strerror(errno)));
  Status status;
  std::string out;
  sockaddr_in local;
  socklen_t len = sizeof(local);
  if (connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) {
    status = Status::Unavailable("no route to " + ip + ": " + strerror(errno));
  } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    status =
        Status::Unavailable(std::string("getsockname: ") + strerror(errno));
  } else {
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
    out = buf;
  }
  close(fd);
  if (!status.ok()) return status;
  if (out == "0.0.0.0") return Status::Unavailable("no route to " + ip);
  return out;
}

StatusOr<std::string> AdvertisedHost(const NodeConfig& config,
                                     const std::vector<NetInterface>& ifs) {
  if (!config.node_host.empty()) return config.node_host;
  if (!config.interface.empty()) {
    return InterfaceAddress(config.interface, ifs);
  }
  StatusOr<std::string> root = ResolveIPv4(config.root_uri);
  if (root.ok()) {
    StatusOr<std::string> src = RouteSourceAddress(*root, config.root_port);
    if (src.ok()) return src;
  }
  const NetInterface* best = nullptr;
  for (const NetInterface& i : ifs) {
    if (i.up && !i.loopback && !i.ipv4.empty() &&
        (best == nullptr || i.name < best->name)) {
      best = &i;
    }
  }
  return best != nullptr ? best->ipv4 : std::string("127.0.0.1");
}

}  // namespace net
}  // namespace kvtrain
