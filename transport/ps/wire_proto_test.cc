// The wire header round-trips through its serialized form, and a truncated
// header is rejected by the parser rather than read as garbage.
#include <string>

#include <gtest/gtest.h>

#include "transport/ps/wire.pb.h"

namespace kvtrain {
namespace {

TEST(WireProtoTest, HeaderRoundTrips) {
  wire::Header h;
  h.set_command(wire::DATA);
  h.set_sender(9);
  h.set_recipient(8);
  h.set_timestamp(123456789012345LL);
  h.set_request(true);
  h.set_push(true);
  h.set_priority(-3);
  wire::Frame* f = h.add_data();
  f->set_kind(wire::KEYS);
  f->set_bytes(64);
  wire::NodeInfo* n = h.mutable_control()->add_nodes();
  n->set_role(wire::SERVER);
  n->set_host("10.0.0.2");
  n->set_port(41233);
  const std::string bytes = h.SerializeAsString();

  wire::Header back;
  ASSERT_TRUE(back.ParseFromString(bytes));
  EXPECT_EQ(back.command(), wire::DATA);
  EXPECT_EQ(back.sender(), 9);
  EXPECT_EQ(back.timestamp(), 123456789012345LL);
  EXPECT_TRUE(back.push());
  EXPECT_FALSE(back.pull());
  EXPECT_EQ(back.priority(), -3);
  ASSERT_EQ(back.data_size(), 1);
  EXPECT_EQ(back.data(0).kind(), wire::KEYS);
  EXPECT_EQ(back.data(0).bytes(), 64);
  EXPECT_EQ(back.control().nodes(0).host(), "10.0.0.2");
  EXPECT_EQ(back.control().nodes(0).port(), 41233);
}

TEST(WireProtoTest, TruncatedHeaderFailsToParse) {
  wire::Header h;
  h.set_status_message(std::string(100, 'x'));
  const std::string bytes = h.SerializeAsString();
  wire::Header back;
  EXPECT_FALSE(back.ParseFromString(bytes.substr(0, bytes.size() / 2)));
}

}  // namespace
}  // namespace kvtrain
