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

// One message of `frames` sealed by `w`, as parts.
std::vector<std::string> SealMessage(LaneWriter* w,
                                     const std::vector<std::string>& frames) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < frames.size(); ++i) {
    std::string out(SealedSize(frames[i].size()), '\0');
    EXPECT_TRUE(
        w->Seal(i, frames.size(), frames[i].data(), frames[i].size(), &out[0])
            .ok());
    parts.push_back(std::move(out));
  }
  return parts;
}

Status OpenMessage(LaneReader* r, std::vector<std::string>* parts, bool* probe,
                   uint64_t* lost, std::string* answer) {
  std::vector<LaneReader::Part> in;
  for (std::string& p : *parts) in.push_back({&p[0], p.size()});
  return r->Open(in, probe, lost, answer);
}

TEST(LaneTest, ProbeReadyAndMessagesInOrderOnce) {
  auto w = LaneWriter::Create().value();
  LaneReader r(w->id(), Sealer::Create(w->key()).value());
  bool probe = false;
  uint64_t lost = 0;
  std::string answer;
  std::vector<std::string> p = {w->Probe()};
  ASSERT_TRUE(OpenMessage(&r, &p, &probe, &lost, &answer).ok());
  EXPECT_TRUE(probe);
  EXPECT_TRUE(w->IsReady(&answer[0], answer.size()));

  const std::vector<std::string> frames = {"head", std::string(5000, 'b'), ""};
  std::vector<std::string> m = SealMessage(w.get(), frames);
  const std::vector<std::string> copy = m;
  ASSERT_TRUE(OpenMessage(&r, &m, &probe, &lost, &answer).ok());
  EXPECT_FALSE(probe);
  EXPECT_EQ(lost, 0u);
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(m[i].substr(kSealHeaderBytes, m[i].size() - kSealedOverhead),
              frames[i]);
  }
  // Again: refused, and the lane goes on.
  std::vector<std::string> again = copy;
  Status st = OpenMessage(&r, &again, &probe, &lost, &answer);
  EXPECT_NE(st.message().find("comes again or out of order"), std::string::npos)
      << st;
  // Cut before its last part, or with its parts swapped: refused.
  std::vector<std::string> next = SealMessage(w.get(), {"a", "b"});
  std::vector<std::string> cut = {next[0]};
  EXPECT_FALSE(OpenMessage(&r, &cut, &probe, &lost, &answer).ok());
  std::vector<std::string> swapped = {next[1], next[0]};
  EXPECT_FALSE(OpenMessage(&r, &swapped, &probe, &lost, &answer).ok());
  // A message lost on the way is counted by the next one's gap.
  std::vector<std::string> after = SealMessage(w.get(), {"c"});
  ASSERT_TRUE(OpenMessage(&r, &after, &probe, &lost, &answer).ok());
  EXPECT_EQ(lost, 2u);
  // Another lane's reader opens none of it.
  auto other = LaneWriter::Create().value();
  LaneReader wrong(w->id(), Sealer::Create(other->key()).value());
  std::vector<std::string> more = SealMessage(w.get(), {"d"});
  EXPECT_FALSE(OpenMessage(&wrong, &more, &probe, &lost, &answer).ok());
}

TEST(SealTest, RandomBytesDiffer) {
  EXPECT_EQ(SealRandomBytes(32).size(), 32u);
  EXPECT_NE(SealRandomBytes(32), SealRandomBytes(32));
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
