#include "net/lane_setup.h"

#include <zmq.h>

#include <cstring>

#include "net/zmq_error.h"

namespace kvtrain {
namespace net {

namespace {

constexpr char kOfferMagic[8] = {'k', 'v', 'L', 'a', 'n', 'e', 'O', '1'};
constexpr char kAnswerMagic[8] = {'k', 'v', 'L', 'a', 'n', 'e', 'P', '1'};

static_assert(kLaneOfferBytes == 16 + kSealKeyBytes, "offer: magic, id, key");

}  // namespace

std::string EncodeLaneOffer(const LaneOffer& offer) {
  std::string out(kLaneOfferBytes, '\0');
  std::memcpy(&out[0], kOfferMagic, 8);
  StoreLe64(&out[8], offer.id);
  if (offer.id != 0 && offer.key.size() == kSealKeyBytes) {
    std::memcpy(&out[16], offer.key.data(), kSealKeyBytes);
  }
  return out;
}

bool DecodeLaneOffer(const char* data, size_t size, LaneOffer* out) {
  if (size != kLaneOfferBytes || std::memcmp(data, kOfferMagic, 8) != 0) return false;
  out->id = LoadLe64(data + 8);
  out->key.assign(data + 16, kSealKeyBytes);
  return true;
}

std::string EncodeLaneAnswer(const LaneAnswer& answer) {
  std::string out(kLaneAnswerBytes, '\0');
  std::memcpy(&out[0], kAnswerMagic, 8);
  StoreLe64(&out[8], answer.id);
  StoreLe64(&out[16], answer.port);
  return out;
}

bool DecodeLaneAnswer(const char* data, size_t size, LaneAnswer* out) {
  if (size != kLaneAnswerBytes || std::memcmp(data, kAnswerMagic, 8) != 0) return false;
  const uint64_t port = LoadLe64(data + 16);
  if (port > 65535) return false;
  out->id = LoadLe64(data + 8);
  out->port = port;
  return true;
}

StatusOr<KeptLane> KeepLane(const LaneOffer& offer, ZapHandler* zap) {
  if (offer.id == 0) return Status::InvalidArgument("no lane offered");
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Sealer> sealer, Sealer::Create(offer.key));
  KeptLane kept;
  kept.reader = std::make_unique<LaneReader>(offer.id, std::move(sealer));
  // Only now can a connection to the lane be admitted, and only the
  // offerer's (it alone has the key the token comes from).
  kept.zap_token = LaneToken(offer.key);
  zap->AllowLane(kept.zap_token);
  return kept;
}

StatusOr<void*> ConnectLane(void* ctx, const std::string& host, uint64_t port,
                            LaneWriter* writer, const std::function<Status(void*)>& watch) {
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  if (s == nullptr) return Status::Unavailable("no socket for the sealed lane: " + ZmqError());
  const int zero = 0;
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  const std::string endpoint = "tcp://" + host + ":" + std::to_string(port);
  const std::string probe = writer->Probe();
  // The lane admits the connection only with the token of the key it was
  // offered over CURVE.
  Status s_ok = LimitInbound(s);
  if (s_ok.ok()) s_ok = SecureLaneClient(s, writer->key());
  if (s_ok.ok() && watch) s_ok = watch(s);
  if (s_ok.ok() && (zmq_connect(s, endpoint.c_str()) != 0 ||
                    zmq_send(s, probe.data(), probe.size(), 0) < 0)) {
    s_ok = Status::Unavailable(endpoint + ": " + ZmqError());
  }
  if (!s_ok.ok()) {
    zmq_close(s);
    return s_ok;
  }
  return s;
}

}  // namespace net
}  // namespace kvtrain
