// Address rules: DMLC_NODE_HOST, DMLC_INTERFACE (lo works, unknown names
// list the interfaces), the route to the scheduler, and the fallback.
#include "net/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvtrain {
namespace net {
namespace {

using ::testing::HasSubstr;

NodeConfig Config() {
  NodeConfig c;
  c.root_uri = "127.0.0.1";
  c.root_port = 9091;
  return c;
}

TEST(AddressTest, LoopbackIsListedAndResolvable) {
  const std::vector<NetInterface> ifs = ListInterfaces();
  StatusOr<std::string> lo = InterfaceAddress("lo", ifs);
  ASSERT_TRUE(lo.ok()) << lo.status();
  EXPECT_EQ(*lo, "127.0.0.1");
  EXPECT_THAT(DescribeInterfaces(ifs), HasSubstr("lo (127.0.0.1)"));
}

TEST(AddressTest, UnknownInterfaceListsTheKnownOnes) {
  StatusOr<std::string> r = InterfaceAddress("nosuch0", ListInterfaces());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_THAT(r.status().message(),
              HasSubstr("DMLC_INTERFACE=\"nosuch0\": no such network "
                        "interface; interfaces: "));
  EXPECT_THAT(r.status().message(), HasSubstr("lo (127.0.0.1)"));
  std::vector<NetInterface> fake = {{"tun0", "", true, false}};
  EXPECT_THAT(InterfaceAddress("tun0", fake).status().message(),
              HasSubstr("has no IPv4 address"));
}

TEST(AddressTest, AdvertisedHostRules) {
  const std::vector<NetInterface> ifs = ListInterfaces();
  NodeConfig c = Config();
  c.node_host = "node7.example";
  c.interface = "lo";
  EXPECT_EQ(*AdvertisedHost(c, ifs), "node7.example");  // 1. as given
  c.node_host.clear();
  EXPECT_EQ(*AdvertisedHost(c, ifs), "127.0.0.1");  // 2. the interface's
  c.interface = "nosuch0";
  EXPECT_FALSE(AdvertisedHost(c, ifs).ok());
  c.interface.clear();
  EXPECT_EQ(*AdvertisedHost(c, ifs), "127.0.0.1");  // 3. route to 127.0.0.1
  // 4. no usable route: the first up, non-loopback interface by name.
  c.root_uri = "";
  std::vector<NetInterface> fake = {{"lo", "127.0.0.1", true, true},
                                    {"eth1", "10.0.0.9", true, false},
                                    {"eth0", "10.0.0.5", true, false},
                                    {"docker0", "172.17.0.1", false, false}};
  EXPECT_EQ(*AdvertisedHost(c, fake), "10.0.0.5");
  EXPECT_EQ(*AdvertisedHost(c, {{"lo", "127.0.0.1", true, true}}), "127.0.0.1");
}

TEST(AddressTest, ResolvesNamesAndRoutes) {
  EXPECT_EQ(*ResolveIPv4("10.1.2.3"), "10.1.2.3");
  EXPECT_EQ(*ResolveIPv4("localhost"), "127.0.0.1");
  EXPECT_EQ(*RouteSourceAddress("127.0.0.1", 9), "127.0.0.1");
  EXPECT_FALSE(RouteSourceAddress("not-an-ip", 9).ok());
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
