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

TEST(PlacementTest, SlicesAreCutIntoPiecesOfAboutThePieceSize) {
  // 2 servers, bound 100, pieces of about 30 elements (at most).
  Placement p(2, 100, 30);
  auto parts = p.Place({200, 50, 30});
  // 200: 100 per server, each cut into 4 pieces of 25 (30 would make 4).
  ASSERT_EQ(parts[0].size(), 8u);
  int64_t offset = 0;
  for (size_t j = 0; j < parts[0].size(); ++j) {
    const Part& q = parts[0][j];
    EXPECT_EQ(q.server, j < 4 ? 0 : 1);
    EXPECT_EQ(q.piece, static_cast<int>(j % 4));
    EXPECT_EQ(q.offset, offset);
    EXPECT_EQ(q.count, 25);
    offset += q.count;
  }
  // 50 whole on one server, in 2 pieces of 25; 30 is one piece.
  ASSERT_EQ(parts[1].size(), 2u);
  EXPECT_EQ(parts[1][0].server, parts[1][1].server);
  EXPECT_EQ(parts[1][1].offset, 25);
  ASSERT_EQ(parts[2].size(), 1u);
  EXPECT_EQ(parts[2][0].count, 30);
  // Bytes per server count the key once, however it is cut.
  EXPECT_EQ(p.server_bytes()[0] + p.server_bytes()[1], 4 * 280);
}

TEST(PlacementTest, KeysMayHaveTheirOwnPieceSizeAndSlicesMorePieces) {
  // Up to 8 pieces per slice; the second key's pieces are twice as large
  // (a key whose values travel as halves), the third is uncut.
  Placement p(1, int64_t{1} << 40, 10, 8);
  auto parts = p.Place({100, 100, 100, 100}, {10, 20, 0});
  EXPECT_EQ(parts[0].size(), 8u);  // ceil(100 / 10) = 10 pieces, at most 8
  EXPECT_EQ(parts[1].size(), 5u);
  for (const Part& q : parts[1]) EXPECT_EQ(q.count, 20);
  EXPECT_EQ(parts[2].size(), 1u);
  // Keys past the list take the constructor's size.
  EXPECT_EQ(parts[3].size(), 8u);
}

TEST(PlacementTest, PiecesOfUnevenSlicesDifferByAtMostOne) {
  Placement p(1, 1 << 30, 4);
  auto parts = p.Place({10});
  ASSERT_EQ(parts[0].size(), 3u);  // 4 + 3 + 3
  EXPECT_EQ(parts[0][0].count, 4);
  EXPECT_EQ(parts[0][1].count, 3);
  EXPECT_EQ(parts[0][2].offset, 7);
}

TEST(PlacementTest, SlicesGetAtMostFourPiecesOfAtMostFourMiB) {
  // Pieces of at least 1 element: 102 elements make 4 pieces (26 and 25).
  Placement p(1, int64_t{1} << 40, 1);
  auto parts = p.Place({102, 20 * Placement::kMaxPieceElements + 5,
                        int64_t{5000} * Placement::kMaxPieceElements});
  ASSERT_EQ(parts[0].size(), static_cast<size_t>(Placement::kPiecesPerSlice));
  EXPECT_EQ(parts[0][0].count, 26);
  EXPECT_EQ(parts[0].back().count, 25);
  // 20 MiB elements and a bit: 21 pieces, none above the largest piece.
  ASSERT_EQ(parts[1].size(), 21u);
  for (const Part& q : parts[1]) EXPECT_LE(q.count, Placement::kMaxPieceElements);
  // Larger still: at most kMaxPieces, larger pieces.
  EXPECT_EQ(parts[2].size(), static_cast<size_t>(Placement::kMaxPieces));
  // Without a piece size, slices stay whole.
  Placement whole(1, int64_t{1} << 40, 0);
  EXPECT_EQ(whole.Place({20 * Placement::kMaxPieceElements})[0].size(), 1u);
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
