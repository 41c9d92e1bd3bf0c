#include "kvstore/placement.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace kv {
namespace {

TEST(PlacementTest, BigArraysSplitEvenlyAcrossAllServers) {
  Placement p(3, 100);
  auto parts = p.Place({1000});
  ASSERT_EQ(parts[0].size(), 3u);
  EXPECT_EQ(parts[0][0].count, 334);
  EXPECT_EQ(parts[0][1].count, 333);
  EXPECT_EQ(parts[0][2].count, 333);
  EXPECT_EQ(parts[0][1].offset, 334);
  EXPECT_EQ(parts[0][2].offset, 667);
  for (int s = 0; s < 3; ++s) EXPECT_EQ(parts[0][s].server, s);
}

TEST(PlacementTest, SmallArraysBalanceBytesDeterministically) {
  Placement p(2, 1 << 20);
  // Sizes in call order; placed largest first: 50 -> s0, 40 -> s1,
  // 30 -> s1 (40 < 50), 10 -> s0 (50 < 70), 10 -> s0 (60 < 70).
  auto parts = p.Place({10, 50, 30, 40, 10});
  EXPECT_EQ(parts[1][0].server, 0);
  EXPECT_EQ(parts[3][0].server, 1);
  EXPECT_EQ(parts[2][0].server, 1);
  EXPECT_EQ(parts[0][0].server, 0);
  EXPECT_EQ(parts[4][0].server, 0);
  EXPECT_EQ(p.server_bytes(), std::vector<int64_t>({280, 280}));
  // Another placement of the same calls agrees.
  Placement q(2, 1 << 20);
  auto again = q.Place({10, 50, 30, 40, 10});
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(again[i][0].server, parts[i][0].server);
  }
}

TEST(PlacementTest, OneServerHoldsEverythingWhole) {
  Placement p(1, 10);
  auto parts = p.Place({5, 100});
  EXPECT_EQ(parts[1].size(), 1u);
  EXPECT_EQ(parts[1][0].count, 100);
}

TEST(PlacementTest, HugeArraysUse64BitCounts) {
  // No 2 GiB limit per shard: 3e9 elements split over 2 servers.
  Placement p(2, 1000);
  auto parts = p.Place({3000000001LL});
  ASSERT_EQ(parts[0].size(), 2u);
  EXPECT_EQ(parts[0][0].count, 1500000001LL);
  EXPECT_EQ(parts[0][1].offset, 1500000001LL);
  EXPECT_EQ(p.server_bytes()[0], 6000000004LL);
}

TEST(PlacementTest, FewerElementsThanServers) {
  Placement p(4, 2);
  auto parts = p.Place({2});
  ASSERT_EQ(parts[0].size(), 2u);  // empty slices are not placed
  EXPECT_EQ(parts[0][1].server, 1);
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
