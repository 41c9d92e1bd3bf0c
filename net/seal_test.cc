#include "net/seal.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvtrain {
namespace net {
namespace {

std::vector<char> SealOf(Sealer* s, const SealHeader& h,
                         const std::string& payload) {
  std::vector<char> out(SealedSize(payload.size()));
  EXPECT_TRUE(s->Seal(h, payload.data(), out.data()).ok());
  return out;
}

SealHeader DataHeader(uint64_t lane, uint64_t seq, size_t size) {
  SealHeader h;
  h.lane = lane;
  h.seq = seq;
  h.size = size;
  return h;
}

TEST(SealTest, OpensWhatItSealedInPlace) {
  const std::string key = SealRandomBytes(kSealKeyBytes);
  auto a = Sealer::Create(key);
  auto b = Sealer::Create(key);
  ASSERT_TRUE(a.ok() && b.ok());
  std::string payload(100003, '\0');
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = static_cast<char>(i * 7);
  std::vector<char> frame =
      SealOf(a->get(), DataHeader(42, 7, payload.size()), payload);
  // The payload does not travel in the clear.
  EXPECT_EQ(std::string(frame.data() + kSealHeaderBytes, payload.size())
                .find(payload.substr(1000, 64)),
            std::string::npos);
  SealHeader peeked;
  ASSERT_TRUE(PeekSealed(frame.data(), frame.size(), &peeked));
  EXPECT_EQ(peeked.lane, 42u);
  EXPECT_EQ(peeked.seq, 7u);
  EXPECT_EQ(peeked.size, payload.size());
  SealHeader h;
  ASSERT_TRUE((*b)->Open(frame.data(), frame.size(), &h).ok());
  EXPECT_EQ(h.kind, SealKind::kData);
  EXPECT_EQ(std::string(frame.data() + kSealHeaderBytes, payload.size()),
            payload);
}

TEST(SealTest, EmptyPayloadProbe) {
  const std::string key = SealRandomBytes(kSealKeyBytes);
  auto s = Sealer::Create(key);
  ASSERT_TRUE(s.ok());
  SealHeader probe = DataHeader(1, 1, 0);
  probe.kind = SealKind::kProbe;
  std::vector<char> frame = SealOf(s->get(), probe, "");
  EXPECT_EQ(frame.size(), kSealHeaderBytes + kSealTagBytes);
  SealHeader h;
  ASSERT_TRUE((*s)->Open(frame.data(), frame.size(), &h).ok());
  EXPECT_EQ(h.kind, SealKind::kProbe);
}

TEST(SealTest, EveryAlteredByteIsRefused) {
  const std::string key = SealRandomBytes(kSealKeyBytes);
  auto s = Sealer::Create(key);
  ASSERT_TRUE(s.ok());
  const std::string payload(64, 'x');
  const std::vector<char> good =
      SealOf(s->get(), DataHeader(5, 9, payload.size()), payload);
  for (size_t i = 0; i < good.size(); ++i) {
    std::vector<char> bad = good;
    bad[i] ^= 0x01;
    SealHeader h;
    const Status st = (*s)->Open(bad.data(), bad.size(), &h);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << "byte " << i;
  }
}

TEST(SealTest, AnotherKeyOrDirectionDoesNotOpen) {
  auto a = Sealer::Create(SealRandomBytes(kSealKeyBytes));
  auto other = Sealer::Create(SealRandomBytes(kSealKeyBytes));
  ASSERT_TRUE(a.ok() && other.ok());
  const std::string payload(32, 'y');
  std::vector<char> frame =
      SealOf(a->get(), DataHeader(5, 9, payload.size()), payload);
  SealHeader h;
  const Status st = (*other)->Open(frame.data(), frame.size(), &h);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("does not open under its lane's key"),
            std::string::npos);
  // The direction is part of the header and the nonce: a frame's direction
  // cannot be flipped to pass it off the other way.
  std::vector<char> flipped =
      SealOf(a->get(), DataHeader(5, 9, payload.size()), payload);
  flipped[5] = static_cast<char>(SealDir::kToSender);
  EXPECT_FALSE((*a)->Open(flipped.data(), flipped.size(), &h).ok());
}

TEST(SealTest, MalformedFramesAreNotPeeked) {
  SealHeader h;
  std::string junk(100, 'z');
  EXPECT_FALSE(PeekSealed(junk.data(), junk.size(), &h));
  EXPECT_FALSE(PeekSealed(junk.data(), 10, &h));
  auto s = Sealer::Create(SealRandomBytes(kSealKeyBytes));
  ASSERT_TRUE(s.ok());
  std::vector<char> frame =
      SealOf(s->get(), DataHeader(1, 2, 10), std::string(10, 'a'));
  // A truncated frame no longer matches its declared size.
  EXPECT_FALSE(PeekSealed(frame.data(), frame.size() - 1, &h));
  EXPECT_EQ((*s)->Open(frame.data(), frame.size() - 1, &h).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(Sealer::Create("short").status().code(),
            Status::Code::kInvalidArgument);
}

TEST(SealTest, RandomBytesDiffer) {
  EXPECT_EQ(SealRandomBytes(32).size(), 32u);
  EXPECT_NE(SealRandomBytes(32), SealRandomBytes(32));
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
