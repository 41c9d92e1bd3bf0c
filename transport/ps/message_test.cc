// The codec: round trip without copies, and every way a received message
// can be malformed is reported, not crashed on.
#include "transport/ps/message.h"

#include <cstring>

#include "net/curve.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvtrain {
namespace ps {
namespace {

using ::testing::HasSubstr;

Message Sample() {
  Message m;
  m.meta.set_command(wire::DATA);
  m.meta.set_timestamp(7);
  m.AddFrame(wire::KEYS, Blob::FromVector(std::vector<uint64_t>{1, 5}));
  m.AddFrame(wire::VALUES, Blob::FromVector(std::vector<float>{1, 2, 3, 4}));
  return m;
}

TEST(MessageTest, RoundTripSharesPayload) {
  Message m = Sample();
  const char* vals = m.data[1].data();
  std::vector<Blob> frames = EncodeMessage(&m);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[2].data(), vals);  // not copied
  Message back;
  ASSERT_TRUE(DecodeMessage(frames, &back).ok());
  EXPECT_EQ(back.meta.timestamp(), 7);
  EXPECT_EQ(back.Frame(wire::VALUES).data(), vals);
  EXPECT_EQ(back.Frame(wire::KEYS).as<uint64_t>()[1], 5u);
  EXPECT_EQ(back.meta.data(1).bytes(), 16);
}

TEST(MessageTest, UnalignedFramesAreRealigned) {
  Message m = Sample();
  std::vector<Blob> frames = EncodeMessage(&m);
  auto raw = std::make_shared<std::vector<char>>(17);
  std::memcpy(raw->data() + 1, frames[1].data(), 16);
  frames[1] = Blob(raw, raw->data() + 1, 16);
  Message back;
  ASSERT_TRUE(DecodeMessage(frames, &back).ok());
  const Blob keys = back.Frame(wire::KEYS);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(keys.data()) % 8, 0u);
  EXPECT_EQ(keys.as<uint64_t>()[0], 1u);
}

// Frames in a sender's shared memory can change after they are checked:
// keys (and lens, bytes) are copied out, values stay in place.
TEST(MessageTest, FramesInSharedMemoryButValuesAreCopiedOut) {
  Message m = Sample();
  std::vector<Blob> frames = EncodeMessage(&m);
  const char* keys = frames[1].data();
  const char* vals = frames[2].data();
  Message back;
  ASSERT_TRUE(DecodeMessage(frames, &back, {false, true, true}).ok());
  EXPECT_NE(back.Frame(wire::KEYS).data(), keys) << "keys read in place";
  EXPECT_EQ(back.Frame(wire::KEYS).as<uint64_t>()[1], 5u);
  EXPECT_EQ(back.Frame(wire::VALUES).data(), vals);
  // Changing the sender's memory afterwards changes no key.
  const_cast<char*>(keys)[8] = 9;
  EXPECT_EQ(back.Frame(wire::KEYS).as<uint64_t>()[1], 5u);
}

TEST(MessageTest, MalformedInputIsDescribed) {
  Message out;
  EXPECT_THAT(DecodeMessage({}, &out).message(), HasSubstr("no frames"));
  EXPECT_THAT(
      DecodeMessage({Blob::FromString("\xff\xff\xff\xff")}, &out).message(),
      HasSubstr("not a valid header"));
  Message m = Sample();
  std::vector<Blob> frames = EncodeMessage(&m);
  // Truncated header.
  std::vector<Blob> cut = frames;
  cut[0] = frames[0].Slice(0, frames[0].size() - 3);
  EXPECT_FALSE(DecodeMessage(cut, &out).ok());
  // Wrong frame count.
  std::vector<Blob> fewer(frames.begin(), frames.end() - 1);
  EXPECT_THAT(DecodeMessage(fewer, &out).message(),
              HasSubstr("wrong frame count"));
  // Sizes disagreeing with the header.
  std::vector<Blob> shrunk = frames;
  shrunk[2] = frames[2].Slice(0, 12);
  EXPECT_THAT(DecodeMessage(shrunk, &out).message(),
              HasSubstr("data frame 1 has 12 bytes but the header says 16"));
  // Data above kMaxFrameBytes travels in pieces, each within the limit, and
  // is joined on receipt; pieces that do not add up are refused.
  Message big;
  big.meta.set_command(wire::DATA);
  std::vector<float> values((net::kMaxFramePayloadBytes * 2 + 12) / 4);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  big.AddFrame(wire::VALUES, Blob::FromVector(values));
  big.AddFrame(wire::LENS, Blob::FromString("12345678"));
  std::vector<Blob> pieces = EncodeMessage(&big);
  ASSERT_EQ(pieces.size(), 1u + 3u + 1u);
  for (const Blob& b : pieces) EXPECT_LE(b.size(), static_cast<size_t>(net::kMaxFramePayloadBytes));
  Message joined;
  ASSERT_TRUE(DecodeMessage(pieces, &joined).ok());
  ASSERT_EQ(joined.data.size(), 2u);
  ASSERT_EQ(joined.data[0].size(), values.size() * 4);
  EXPECT_EQ(std::memcmp(joined.data[0].data(), values.data(), values.size() * 4), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(joined.data[0].data()) % 8, 0u);
  EXPECT_EQ(joined.data[1].ToString(), "12345678");
  std::vector<Blob> overshoot = pieces;
  overshoot[3] = Blob::FromString(std::string(pieces[3].size() + 8, 'x'));
  EXPECT_THAT(DecodeMessage(overshoot, &out).message(),
              HasSubstr("data frame 0 has " + std::to_string(values.size() * 4 + 8) +
                        " bytes but the header says " + std::to_string(values.size() * 4)));
  // The right total cut otherwise (net/pieces.h: every piece but the last
  // is exactly kMaxFramePayloadBytes): refused.
  std::vector<Blob> recut = pieces;
  recut[1] = pieces[1].Slice(0, pieces[1].size() - 4);
  recut[2] = Blob::FromString(std::string(pieces[2].size() + 4, 'y'));
  EXPECT_THAT(DecodeMessage(recut, &out).message(),
              HasSubstr("data frame 0 came in 3 pieces that are not 4194304 bytes each"));
  std::vector<Blob> extra = pieces;
  extra.push_back(Blob::FromString("x"));
  EXPECT_THAT(DecodeMessage(extra, &out).message(), HasSubstr("wrong frame count"));
  // Unknown command and frame kind.
  wire::Header h;
  h.set_command(static_cast<wire::Command>(99));
  EXPECT_THAT(
      DecodeMessage({Blob::FromString(h.SerializeAsString())}, &out).message(),
      HasSubstr("unknown command 99"));
  wire::Header k;
  k.add_data()->set_kind(static_cast<wire::FrameKind>(42));
  EXPECT_THAT(
      DecodeMessage({Blob::FromString(k.SerializeAsString()), Blob()}, &out)
          .message(),
      HasSubstr("unknown kind 42"));
}

TEST(MessageTest, StatusCodesRoundTrip) {
  Status s = StatusFromWire(static_cast<int>(Status::Code::kNotFound), "k");
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(StatusFromWire(77, "x").code(), Status::Code::kInternal);
  EXPECT_EQ(PrintableToken(std::string("a\0b", 3)), "a\\x00b");
}

TEST(KVPairsTest, Validate) {
  EXPECT_TRUE(KVPairs::From({1, 2}, Blob::FromString("abcd")).Validate().ok());
  EXPECT_TRUE(
      KVPairs::From({1, 2}, Blob::FromString("abc"), {1, 2}).Validate().ok());
  EXPECT_THAT(KVPairs::From({2, 2}, Blob()).Validate().message(),
              HasSubstr("key 2 at position 1 follows key 2"));
  EXPECT_THAT(
      KVPairs::From({1}, Blob::FromString("ab"), {-2, 4}).Validate().message(),
      HasSubstr("2 entries for 1 keys"));
  EXPECT_TRUE(KVPairs::From({}, Blob::FromString("payload")).Validate().ok());
  KVPairs odd;
  odd.keys = Blob::FromString("123");
  EXPECT_THAT(odd.Validate().message(), HasSubstr("not a multiple of 8"));
  EXPECT_EQ(GroupName(kServerGroup | kWorkerGroup), "servers+workers");
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
