// How both transports set up a sealed lane (net/seal.h), in the same two
// messages, each carried over the authenticated CURVE connection in the
// transport's own envelope:
//   1. The sender's offer: a random lane id and the 32-byte key it will seal
//      with ("kvLaneO1", id, key: 48 bytes). Id 0: it offers no lane.
//   2. The receiver's answer, once it keeps the key (and lets a connection
//      with the key's token in, net::LaneToken): the lane id and the port
//      of its lane socket, 0 when it has none or refuses the offer
//      ("kvLaneP1", id, port: 24 bytes).
// The sender then connects to the port with the key's token, sends
// LaneWriter::Probe and waits for the sealed "ready" (LaneWriter::IsReady);
// from then on what it sends to that receiver goes over the lane. A sender
// whose lane does not answer keeps CURVE. (The parameter-server van, which
// may already have messages on their way over CURVE, then sends a switch
// mark over CURVE so that the receiver keeps the order; the mesh sets its
// lanes up before any message of the job.)
#ifndef KVTRAIN_NET_LANE_SETUP_H_
#define KVTRAIN_NET_LANE_SETUP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "net/curve.h"
#include "net/seal.h"

namespace kvtrain {
namespace net {

inline constexpr size_t kLaneOfferBytes = 48;
inline constexpr size_t kLaneAnswerBytes = 24;

struct LaneOffer {
  uint64_t id = 0;  // 0: no lane offered
  std::string key;  // kSealKeyBytes when id is not 0
};

struct LaneAnswer {
  uint64_t id = 0;
  uint64_t port = 0;  // 0: no lane
};

std::string EncodeLaneOffer(const LaneOffer& offer);
// Whether `size` bytes at `data` are an offer (then *out is it).
bool DecodeLaneOffer(const char* data, size_t size, LaneOffer* out);

std::string EncodeLaneAnswer(const LaneAnswer& answer);
// Whether `size` bytes at `data` are an answer with a port in [0, 65535].
bool DecodeLaneAnswer(const char* data, size_t size, LaneAnswer* out);

// The receiver's step 2: the reader of the lane `offer` names, and the
// token now let in by `zap` (ForgetLane it when the lane is done).
// InvalidArgument for an offer of no lane or a key that cannot seal.
struct KeptLane {
  std::unique_ptr<LaneReader> reader;
  std::string zap_token;
};
StatusOr<KeptLane> KeepLane(const LaneOffer& offer, ZapHandler* zap);

// The sender's step 3: a DEALER connected to the lane at `host`:`port`
// with the token of `writer`'s key, its probe sent (no send queue limit, no
// linger; `watch`, if set, runs on it before it connects: a
// HandshakeMonitor). Its reply goes to writer.IsReady. Closed on error.
StatusOr<void*> ConnectLane(void* zmq_context, const std::string& host, uint64_t port,
                            LaneWriter* writer, const std::function<Status(void*)>& watch);

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_LANE_SETUP_H_
