#include "net/pieces.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvtrain {
namespace net {
namespace {

std::vector<size_t> Lengths(size_t size) {
  std::vector<size_t> out;
  size_t covered = 0;
  for (size_t i = 0; i < PieceCount(size); ++i) {
    const Piece p = PieceOf(size, i);
    EXPECT_EQ(p.offset, covered) << "piece " << i << " of " << size;
    EXPECT_EQ(p.last, i + 1 == PieceCount(size));
    covered += p.length;
    out.push_back(p.length);
  }
  EXPECT_EQ(covered, size);
  return out;
}

TEST(PiecesTest, CutsEveryPieceButTheLastFull) {
  EXPECT_EQ(Lengths(0), std::vector<size_t>{0});
  EXPECT_EQ(Lengths(1), std::vector<size_t>{1});
  EXPECT_EQ(Lengths(kPieceBytes), std::vector<size_t>{kPieceBytes});
  EXPECT_EQ(Lengths(kPieceBytes + 1), (std::vector<size_t>{kPieceBytes, 1}));
  EXPECT_EQ(Lengths(3 * kPieceBytes), (std::vector<size_t>(3, kPieceBytes)));
}

TEST(PiecesTest, ReceiversKnowPiecesFromOtherCuts) {
  auto are = [](std::vector<size_t> v) {
    return ArePieces(v.size(), [&](size_t i) { return v[i]; });
  };
  for (size_t size : {size_t{0}, size_t{5}, kPieceBytes, 2 * kPieceBytes + 7}) {
    EXPECT_TRUE(are(Lengths(size))) << size;
  }
  EXPECT_FALSE(are({}));
  EXPECT_FALSE(are({kPieceBytes + 1}));               // one frame too large
  EXPECT_FALSE(are({kPieceBytes - 1, 2}));            // a short piece first
  EXPECT_FALSE(are({kPieceBytes, 0}));                // an empty last piece
  EXPECT_FALSE(are({kPieceBytes, kPieceBytes + 1}));  // a long last piece
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
