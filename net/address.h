// Network addresses: which IPv4 address a node advertises, interface
// listing, host name resolution.
#ifndef KVTRAIN_NET_ADDRESS_H_
#define KVTRAIN_NET_ADDRESS_H_

#include <string>
#include <vector>

#include "net/node_config.h"
#include "base/status.h"

namespace kvtrain {
namespace net {

struct NetInterface {
  std::string name;
  std::string ipv4;  // "" when the interface has no IPv4 address
  bool up = false;
  bool loopback = false;
};

// Every interface, sorted by name (one entry per name; the first IPv4
// address if it has several).
std::vector<NetInterface> ListInterfaces();

// "lo (127.0.0.1), eth0 (10.0.0.2), wlan0 (no IPv4)".
std::string DescribeInterfaces(const std::vector<NetInterface>& ifs);

// The IPv4 address of interface `name`. An unknown name, or one without an
// IPv4 address, is an error naming DMLC_INTERFACE and listing the interfaces.
StatusOr<std::string> InterfaceAddress(const std::string& name,
                                       const std::vector<NetInterface>& ifs);

// Resolves a host name or dotted IPv4 address to a dotted IPv4 address.
StatusOr<std::string> ResolveIPv4(const std::string& host);

// The local address the kernel would use to reach ip:port (a UDP socket is
// connected, which sends no packet, and its local address is read).
StatusOr<std::string> RouteSourceAddress(const std::string& ip, int port);

// The address this node advertises:
//   1. DMLC_NODE_HOST if set (used as given);
//   2. else the IPv4 address of DMLC_INTERFACE if set;
//   3. else the local address of the route to the scheduler
//      (DMLC_PS_ROOT_URI resolved), so a job on one machine uses 127.0.0.1
//      and a job across machines the interface facing the scheduler;
//   4. else the first interface, by name, that is up, not loopback and has
//      an IPv4 address; else 127.0.0.1.
StatusOr<std::string> AdvertisedHost(const NodeConfig& config,
                                     const std::vector<NetInterface>& ifs);

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_ADDRESS_H_
