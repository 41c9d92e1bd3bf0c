#include "net/lane_setup.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

#include "net/seal.h"

namespace kvtrain {
namespace net {
namespace {

TEST(LaneSetupTest, OffersAndAnswersReadBackAndNothingElseDoes) {
  const std::string key = SealRandomBytes(kSealKeyBytes);
  const std::string offer = EncodeLaneOffer({42, key});
  ASSERT_EQ(offer.size(), kLaneOfferBytes);
  LaneOffer o;
  ASSERT_TRUE(DecodeLaneOffer(offer.data(), offer.size(), &o));
  EXPECT_EQ(o.id, 42u);
  EXPECT_EQ(o.key, key);
  EXPECT_FALSE(DecodeLaneOffer(offer.data(), offer.size() - 1, &o));
  std::string answer = EncodeLaneAnswer({42, 6001});
  ASSERT_EQ(answer.size(), kLaneAnswerBytes);
  LaneAnswer a;
  ASSERT_TRUE(DecodeLaneAnswer(answer.data(), answer.size(), &a));
  EXPECT_EQ(a.id, 42u);
  EXPECT_EQ(a.port, 6001u);
  // One is never taken for the other, and a port past 65535 is refused.
  EXPECT_FALSE(DecodeLaneOffer(answer.data(), answer.size(), &o));
  EXPECT_FALSE(DecodeLaneAnswer(offer.data(), offer.size(), &a));
  answer = EncodeLaneAnswer({42, 65536});
  EXPECT_FALSE(DecodeLaneAnswer(answer.data(), answer.size(), &a));
  // No lane offered: id 0, and nothing to keep.
  ASSERT_TRUE(DecodeLaneOffer(EncodeLaneOffer({}).data(), kLaneOfferBytes, &o));
  EXPECT_EQ(o.id, 0u);
}

// The whole set-up between two sockets of one process: the sender's lane
// connection gets through only once the receiver kept its offer, and the
// receiver's "ready" opens at the sender.
TEST(LaneSetupTest, AKeptOfferLetsItsSenderInAndNoOneElse) {
  void* ctx = zmq_ctx_new();
  const JobKey job = JobKey::Generate();
  auto zap = ZapHandler::Start(ctx, job, "lane_setup_test");
  ASSERT_TRUE(zap.ok()) << zap.status();
  int port = 0;
  StatusOr<void*> lane = BindLaneSocket(ctx, &port, nullptr);
  ASSERT_TRUE(lane.ok()) << lane.status();
  auto writer = LaneWriter::Create().value();
  auto stranger = LaneWriter::Create().value();
  LaneOffer offer;
  const std::string bytes = EncodeLaneOffer({writer->id(), writer->key()});
  ASSERT_TRUE(DecodeLaneOffer(bytes.data(), bytes.size(), &offer));
  StatusOr<KeptLane> kept = KeepLane(offer, zap->get());
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->reader->id(), writer->id());
  EXPECT_FALSE(KeepLane(LaneOffer{}, zap->get()).ok());

  StatusOr<void*> other = ConnectLane(ctx, "127.0.0.1", port, stranger.get(), nullptr);
  StatusOr<void*> own = ConnectLane(ctx, "127.0.0.1", port, writer.get(), nullptr);
  ASSERT_TRUE(own.ok() && other.ok());
  // The receiver reads the probe of the kept lane only, and answers it.
  const int timeout = 30000;
  zmq_setsockopt(*lane, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  zmq_msg_t id, probe;
  zmq_msg_init(&id);
  zmq_msg_init(&probe);
  ASSERT_GE(zmq_msg_recv(&id, *lane, 0), 0);
  ASSERT_GE(zmq_msg_recv(&probe, *lane, 0), 0);
  std::map<uint64_t, KeptLane> lanes;
  lanes.emplace(offer.id, std::move(*kept));
  LaneReader::Part part{static_cast<char*>(zmq_msg_data(&probe)), zmq_msg_size(&probe)};
  LaneOpened got;
  ASSERT_TRUE(OpenLaneMessage({part}, lanes, &got).ok());
  ASSERT_TRUE(got.probe);
  zmq_send(*lane, zmq_msg_data(&id), zmq_msg_size(&id), ZMQ_SNDMORE);
  zmq_send(*lane, got.answer.data(), got.answer.size(), 0);
  zmq_setsockopt(*own, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  zmq_msg_t reply;
  zmq_msg_init(&reply);
  ASSERT_GE(zmq_msg_recv(&reply, *own, 0), 0);
  EXPECT_TRUE(writer->IsReady(static_cast<char*>(zmq_msg_data(&reply)), zmq_msg_size(&reply)));
  // The stranger's handshake is refused, and nothing it sent was read.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (zap->get()->refused() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(zap->get()->refused(), 1) << "the stranger's lane connection was not refused";
  zmq_msg_t more;
  zmq_msg_init(&more);
  EXPECT_LT(zmq_msg_recv(&more, *lane, ZMQ_DONTWAIT), 0) << "the stranger's probe was read";
  zmq_msg_close(&more);
  for (zmq_msg_t* m : {&id, &probe, &reply}) zmq_msg_close(m);
  for (void* s : {*lane, *own, *other}) zmq_close(s);
  zap->reset();
  zmq_ctx_term(ctx);
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
