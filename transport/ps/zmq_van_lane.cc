// ZmqVan's sealed lane (net/seal.h): with security on, a sender that reaches
// a peer over TCP authenticates it with CURVE, gives it a random key over
// CURVE, and then sends its messages over a second connection, every frame
// sealed with AES-256-GCM under that key, which costs about 2.8 times less
// CPU per byte than CURVE's own encryption.
//
// Setting a lane up:
//  1. Connect sends an offer over CURVE as the connection's first message:
//     a random lane id and a random 32-byte key.
//  2. The receiver keeps the key under the lane id and answers over CURVE
//     (its ROUTER to the sender's DEALER) with its lane's port, or 0 when it
//     has no lane.
//  3. The sender connects a DEALER to that port and sends a sealed probe.
//  4. The receiver opens the probe and answers on the lane with a sealed
//     "ready". The sender then sends a switch mark over CURVE, and every
//     later message over the lane. The receiver holds lane messages until
//     the mark, so that messages still on their way over CURVE come first.
//     Until the switch (or when the lane's port cannot be reached) every
//     message goes over CURVE as before.
//
// A message on the lane is one ZeroMQ message whose parts are its frames,
// each sealed under the next sequence number; the header of the last says
// so, and a part that opens under no offered key, out of sequence, or
// without its message's last part is dropped and logged (rate-limited), with
// the whole message. So a stranger who can reach the port can make the node
// read and drop bytes, and no more; one on the path cannot read, alter,
// reorder, split or replay a message undetected.
#include <glog/logging.h>
#include <zmq.h>

#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/trace.h"
#include "transport/ps/zmq_van.h"
#include "transport/ps/zmq_van_conn.h"
#include "net/curve.h"
#include "net/zmq_error.h"
#include "net/zmq_frame.h"

namespace kvtrain {
namespace ps {

namespace {

using net::ZmqError;

constexpr char kOfferMagic[8] = {'k', 'v', 'L', 'a', 'n', 'e', 'O', '1'};
constexpr char kPortMagic[8] = {'k', 'v', 'L', 'a', 'n', 'e', 'P', '1'};
constexpr char kSwitchMagic[8] = {'k', 'v', 'L', 'a', 'n', 'e', 'S', '1'};
constexpr size_t kOfferBytes = 16 + net::kSealKeyBytes;
constexpr size_t kPortBytes = 24;
constexpr size_t kSwitchBytes = 16;
// How long a lane may take to answer its probe before the sender says so.
constexpr std::chrono::seconds kProbeLate(5);

bool HasMagic(const Blob& b, const char (&magic)[8], size_t size) {
  return b.size() == size && std::memcmp(b.data(), magic, 8) == 0;
}

}  // namespace

bool IsLaneControl(const Blob& frame) {
  return HasMagic(frame, kOfferMagic, kOfferBytes) ||
         HasMagic(frame, kSwitchMagic, kSwitchBytes);
}

namespace zmq_van_internal {

void OfferLane(ZmqVan::Conn* c, void* ctx, const std::string& host,
               int verbose, std::function<Status(void*)> watch) {
  StatusOr<std::unique_ptr<net::LaneWriter>> writer = net::LaneWriter::Create();
  if (!writer.ok()) {
    LOG(WARNING) << "no sealed lane to " << c->endpoint << ": "
                 << writer.status().message();
    return;
  }
  auto lane = std::make_unique<LaneOut>();
  lane->writer = std::move(*writer);
  lane->ctx = ctx;
  lane->host = host;
  lane->verbose = verbose;
  lane->watch = std::move(watch);
  // The key travels inside CURVE; the lane only ever carries what it seals.
  std::string offer(kOfferBytes, '\0');
  std::memcpy(&offer[0], kOfferMagic, 8);
  net::StoreLe64(&offer[8], lane->writer->id());
  std::memcpy(&offer[16], lane->writer->key().data(), net::kSealKeyBytes);
  if (zmq_send(c->socket, "", 0, ZMQ_SNDMORE) < 0 ||
      zmq_send(c->socket, offer.data(), offer.size(), 0) < 0) {
    LOG(WARNING) << "no sealed lane to " << c->endpoint << ": " << ZmqError();
    return;
  }
  c->lane = std::move(lane);
}

namespace {

// Takes the peer's answers to the lane's setup as they come (never waits).
void AdvanceLane(ZmqVan::Conn* c) {
  LaneOut* lane = c->lane.get();
  if (lane->state == LaneOut::State::kOffered) {
    // The answer to the offer comes over CURVE: an empty frame, the port.
    zmq_msg_t part;
    zmq_msg_init(&part);
    std::vector<std::string> parts;
    while (zmq_msg_recv(&part, c->socket, ZMQ_DONTWAIT) >= 0) {
      parts.emplace_back(static_cast<const char*>(zmq_msg_data(&part)),
                         zmq_msg_size(&part));
      if (!zmq_msg_more(&part)) break;
    }
    zmq_msg_close(&part);
    if (parts.empty()) return;
    if (parts.size() != 2 || !parts[0].empty() ||
        parts[1].size() != kPortBytes ||
        std::memcmp(parts[1].data(), kPortMagic, 8) != 0 ||
        net::LoadLe64(parts[1].data() + 8) != lane->writer->id()) {
      LOG(WARNING) << "sealed lane to " << c->endpoint
                   << ": the peer's answer to the offer is malformed; messages "
                      "stay on CURVE";
      lane->state = LaneOut::State::kOff;
      return;
    }
    const uint64_t port = net::LoadLe64(parts[1].data() + 16);
    if (port == 0 || port > 65535) {
      LOG_IF(INFO, lane->verbose >= 1)
          << "messages to " << c->endpoint
          << " stay on CURVE: it has no sealed lane";
      lane->state = LaneOut::State::kOff;
      return;
    }
    void* s = zmq_socket(lane->ctx, ZMQ_DEALER);
    if (s == nullptr) {
      lane->state = LaneOut::State::kOff;
      return;
    }
    const int zero = 0;
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    const std::string endpoint =
        "tcp://" + lane->host + ":" + std::to_string(port);
    const std::string probe = lane->writer->Probe();
    // The lane admits the connection only with the token of the key it
    // was offered over CURVE; the monitor reports its failures and drops.
    if (!net::LimitInbound(s).ok() ||
        !net::SecureLaneClient(s, lane->writer->key()).ok() ||
        (lane->watch && !lane->watch(s).ok()) ||
        zmq_connect(s, endpoint.c_str()) != 0 ||
        zmq_send(s, probe.data(), probe.size(), 0) < 0) {
      LOG(WARNING) << "sealed lane to " << endpoint << ": " << ZmqError()
                   << "; messages stay on CURVE";
      zmq_close(s);
      lane->state = LaneOut::State::kOff;
      return;
    }
    lane->socket = s;
    lane->state = LaneOut::State::kProbing;
    lane->probed = std::chrono::steady_clock::now();
  }
  if (lane->state == LaneOut::State::kProbing) {
    // The answer to the probe comes on the lane, sealed the other way.
    zmq_msg_t reply;
    zmq_msg_init(&reply);
    if (zmq_msg_recv(&reply, lane->socket, ZMQ_DONTWAIT) >= 0) {
      const bool ok =
          !zmq_msg_more(&reply) &&
          lane->writer->IsReady(static_cast<char*>(zmq_msg_data(&reply)),
                                zmq_msg_size(&reply));
      char mark[kSwitchBytes];
      std::memcpy(mark, kSwitchMagic, 8);
      net::StoreLe64(mark + 8, lane->writer->id());
      if (ok && zmq_send(c->socket, "", 0, ZMQ_SNDMORE) >= 0 &&
          zmq_send(c->socket, mark, sizeof(mark), 0) >= 0) {
        lane->state = LaneOut::State::kReady;
        LOG_IF(INFO, lane->verbose >= 1)
            << "messages to " << c->endpoint
            << " go over its sealed lane from now on";
      } else {
        LOG(WARNING) << "sealed lane to " << c->endpoint
                     << ": its answer to the probe does not open; messages "
                        "stay on CURVE";
        lane->state = LaneOut::State::kOff;
      }
    } else if (!lane->probe_late &&
               std::chrono::steady_clock::now() - lane->probed > kProbeLate) {
      // Its port may be closed to us (a firewall): CURVE carries on; the
      // lane is used if it answers later.
      lane->probe_late = true;
      LOG(WARNING) << "sealed lane to " << c->endpoint
                   << " has not answered its probe in " << kProbeLate.count()
                   << " s; messages go over CURVE meanwhile";
    }
    zmq_msg_close(&reply);
  }
}

}  // namespace

bool SendOnLane(ZmqVan::Conn* c, OutMessage* m, SendCredit* credit,
                std::vector<zmq_msg_t>* unsent, Status* status,
                ZmqSendFn send) {
  LaneOut* lane = c->lane.get();
  if (lane->state == LaneOut::State::kOffered ||
      lane->state == LaneOut::State::kProbing) {
    AdvanceLane(c);
  }
  if (lane->state != LaneOut::State::kReady || m->frames.empty()) return false;
  trace::Scope span("van", "seal", c->endpoint, m->bytes);
  const size_t n = m->frames.size();
  std::vector<Blob> sealed(n);
  for (size_t i = 0; i < n; ++i) {
    const Blob& b = m->frames[i];
    std::shared_ptr<char> buf(new char[net::SealedSize(b.size())],
                              std::default_delete<char[]>());
    const Status s = lane->writer->Seal(i, n, b.data(), b.size(), buf.get());
    if (!s.ok()) {
      // Cannot happen short of a broken libcrypto: the message is dropped
      // whole (its credit released) and the caller told; the receiver
      // reports the frames its lane skipped.
      *status = Status::Internal("sealed lane to " + c->endpoint + ": " +
                                 std::string(s.message()));
      ReleaseFrame(nullptr, new FrameHold{Blob(), credit});
      return true;
    }
    sealed[i] = Blob(buf, buf.get(), net::SealedSize(b.size()));
  }
  m->frames.clear();
  // Every part holds the credit: the message leaves the window when ZeroMQ
  // has written the last of them.
  credit->parts.store(static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    auto* hold = new FrameHold{std::move(sealed[i]), credit};
    zmq_msg_t msg;
    const Status init = net::InitZeroCopy(
        &msg, hold->blob.data(), hold->blob.size(), ReleaseFrame, hold);
    if (!init.ok()) {
      zmq_msg_close(&msg);  // as SendFrames: accounted as released
      if (status->ok()) {
        *status = i > 0 ? TearConn(c, i, std::string(init.message())) : init;
      }
      continue;
    }
    if (!status->ok() ||
        SendPart(send, &msg, lane->socket, i + 1 < n ? ZMQ_SNDMORE : 0) < 0) {
      if (status->ok()) {
        const std::string error = ZmqError();
        *status = i > 0 ? TearConn(c, i, error)
                        : Status::Unavailable("send to " + c->endpoint + ": " + error);
      }
      unsent->push_back(msg);
    }
  }
  ++lane->messages_sent;
  return true;
}

void CloseLane(ZmqVan::Conn* c, int linger_ms) {
  if (c->lane == nullptr || c->lane->socket == nullptr) return;
  zmq_setsockopt(c->lane->socket, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
  zmq_close(c->lane->socket);
  c->lane->socket = nullptr;
}

}  // namespace zmq_van_internal

// The receiving side: the receive thread's.

Status ZmqVan::BindLane() {
  if (zap_ == nullptr) return Status::FailedPrecondition("no ZAP handler");
  KV_ASSIGN_OR_RETURN(lane_, net::BindLaneSocket(ctx_, &lane_port_, [this](void* s) {
                        return monitor_->Watch(s, /*is_server=*/true, -1);
                      }));
  return Status::OK();
}

void ZmqVan::EraseLaneIn(std::map<uint64_t, LaneIn>::iterator it) {
  zap_->ForgetLane(it->second.zap_token);
  lanes_in_.erase(it);
}

bool ZmqVan::OnLaneControl(const RawMessage& msg) {
  if (!msg.error.ok() || msg.frames.size() != 2 || !msg.frames[0].empty() ||
      !IsLaneControl(msg.frames[1])) {
    return false;
  }
  const char* control = msg.frames[1].data();
  const uint64_t id = net::LoadLe64(control + 8);
  if (HasMagic(msg.frames[1], kSwitchMagic, kSwitchBytes)) {
    // Everything the sender sent over CURVE before it is in: its lane
    // messages go next, in order.
    auto it = lanes_in_.find(id);
    if (it == lanes_in_.end() || it->second.token != msg.token) {
      LOG(WARNING) << "sealed lane: " << msg.token << " switched to lane " << id
                   << ", which it never offered to this node";
      return true;
    }
    it->second.switched = true;
    for (RawMessage& m : it->second.held) ready_msgs_.push_back(std::move(m));
    it->second.held.clear();
    return true;
  }
  uint64_t port = 0;
  if (lane_ != nullptr) {
    // The same sender connected again: its earlier lane is done.
    for (auto it = lanes_in_.begin(); it != lanes_in_.end();) {
      auto next = std::next(it);
      if (it->second.token == msg.token) EraseLaneIn(it);
      it = next;
    }
    const std::string key(control + 16, net::kSealKeyBytes);
    StatusOr<std::unique_ptr<net::Sealer>> sealer = net::Sealer::Create(key);
    if (sealer.ok() && lanes_in_.count(id) == 0) {
      LaneIn& in = lanes_in_[id];
      in.token = msg.token;
      in.reader = std::make_unique<net::LaneReader>(id, std::move(*sealer));
      // Only now can a connection to the lane be admitted, and only the
      // offerer's (it alone has the key the token comes from).
      in.zap_token = net::LaneToken(key);
      zap_->AllowLane(in.zap_token);
      port = static_cast<uint64_t>(lane_port_);
    }
  }
  char answer[kPortBytes];
  std::memcpy(answer, kPortMagic, 8);
  net::StoreLe64(answer + 8, id);
  net::StoreLe64(answer + 16, port);
  // To the sender's DEALER, over CURVE (best effort: the sender keeps to
  // CURVE until an answer comes).
  zmq_send(router_, msg.token.data(), msg.token.size(),
           ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(router_, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(router_, answer, sizeof(answer), ZMQ_DONTWAIT);
  return true;
}

void ZmqVan::RefuseLaneMessage(const zmq_msg_t* part, const std::string& why) {
  lane_refused_.fetch_add(1);
  const char* peer = zmq_msg_gets(const_cast<zmq_msg_t*>(part), "Peer-Address");
  KV_LOG_LIMITED(WARNING, lane_log_)
      << "sealed lane: dropped a message from "
      << (peer != nullptr ? peer : "an unknown peer") << ": " << why;
}

bool ZmqVan::ReadLaneMessage() {
  zmq_msg_t id;
  zmq_msg_init(&id);
  if (zmq_msg_recv(&id, lane_, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&id);
    return false;
  }
  std::vector<std::shared_ptr<net::ZmqFrame>> parts;
  bool more = zmq_msg_more(&id);
  while (more) {
    auto part = std::make_shared<net::ZmqFrame>();
    if (zmq_msg_recv(&part->msg, lane_, 0) < 0) break;
    more = zmq_msg_more(&part->msg);
    parts.push_back(std::move(part));
  }
  const zmq_msg_t* first = parts.empty() ? &id : &parts[0]->msg;
  std::vector<net::LaneReader::Part> sealed;
  for (auto& p : parts) {
    sealed.push_back(
        {static_cast<char*>(zmq_msg_data(&p->msg)), zmq_msg_size(&p->msg)});
  }
  net::LaneOpened got;
  const Status opened = net::OpenLaneMessage(sealed, lanes_in_, &got);
  if (!opened.ok()) {
    RefuseLaneMessage(first, std::string(opened.message()));
  } else if (got.probe) {
    zmq_send(lane_, zmq_msg_data(&id), zmq_msg_size(&id),
             ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(lane_, got.answer.data(), got.answer.size(), ZMQ_DONTWAIT);
  } else {
    LaneIn& lane = lanes_in_[got.lane];
    RawMessage msg;
    msg.token = lane.token;
    if (got.lost > 0) {
      // A message of the peer's never came (its lane's connection broke
      // while it was on the way): the job cannot go on without it.
      RawMessage loss;
      loss.token = lane.token;
      loss.error = Status::DataLoss(
          "its sealed lane lost " + std::to_string(got.lost) +
          " frames on the way (the lane's connection broke in the middle of "
          "a message)");
      if (lane.switched) {
        ready_msgs_.push_back(std::move(loss));
      } else {
        lane.held.push_back(std::move(loss));
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      msg.frames.emplace_back(parts[i], sealed[i].data + net::kSealHeaderBytes,
                              sealed[i].size - net::kSealedOverhead);
    }
    if (lane.switched) {
      ready_msgs_.push_back(std::move(msg));
    } else {
      lane.held.push_back(std::move(msg));
      lane_held_.fetch_add(1);
    }
  }
  zmq_msg_close(&id);
  return true;
}


int64_t ZmqVan::lane_messages_sent() {
  return SumOverConns([](const Conn& c) NO_THREAD_SAFETY_ANALYSIS {
    return c.lane == nullptr ? int64_t{0} : c.lane->messages_sent;
  });
}

}  // namespace ps
}  // namespace kvtrain
