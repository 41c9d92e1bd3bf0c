// CRC32C against published check values, and continuation across pieces.
#include "base/crc32c.h"

#include <string>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c("", 0), 0u);
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, and of 0xff.
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8a9136aau);
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62a8ab43u);
}

TEST(Crc32cTest, PiecesContinueAndEveryBitMatters) {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {1, 7, 8, 9, 500, 999}) {
    EXPECT_EQ(Crc32c(data.data() + cut, data.size() - cut,
                     Crc32c(data.data(), cut)),
              whole)
        << "cut at " << cut;
  }
  for (size_t byte : {0, 123, 999}) {
    std::string flipped = data;
    flipped[byte] ^= 0x10;
    EXPECT_NE(Crc32c(flipped.data(), flipped.size()), whole) << byte;
  }
}

}  // namespace
}  // namespace kvtrain
