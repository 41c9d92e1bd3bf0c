// ZmqVan's sealed lane (net/seal.h): with security on, a sender that reaches
// a peer over TCP authenticates it with CURVE, gives it a random key over
// CURVE, and then sends its messages over a second connection, every frame
// sealed with AES-256-GCM under that key, which costs about 2.8 times less
// CPU per byte than CURVE's own encryption.
//
// Setting a lane up (net/lane_setup.h, the same steps as the mesh's):
//  1. Connect sends an offer over CURVE as the connection's first message.
//  2. The receiver keeps the key under the lane id and answers over CURVE
//     (its ROUTER to the sender's DEALER) with its lane's port, or 0.
//  3. The sender connects a DEALER to that port and sends a sealed probe.
//  4. The receiver opens the probe and answers on the lane with a sealed
//     "ready". The sender then sends a switch mark over CURVE (this van's
//     own step: messages may be on their way over CURVE already), and every
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
#include "net/lane_setup.h"
#include "net/zmq_error.h"
#include "net/zmq_frame.h"

namespace kvtrain {
namespace ps {

namespace {

using net::ZmqError;

constexpr char kSwitchMagic[8] = {'k', 'v', 'L', 'a', 'n', 'e', 'S', '1'};
constexpr size_t kSwitchBytes = 16;
// How long a lane may take to answer its probe before the sender says so.
constexpr std::chrono::seconds kProbeLate(5);

bool HasMagic(const Blob& b, const char (&magic)[8], size_t size) {
  return b.size() == size && std::memcmp(b.data(), magic, 8) == 0;
}

}  // namespace

bool IsLaneControl(const Blob& frame) {
  net::LaneOffer offer;
  return net::DecodeLaneOffer(frame.data(), frame.size(), &offer) ||
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
  const std::string offer = net::EncodeLaneOffer({lane->writer->id(), lane->writer->key()});
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
    net::LaneAnswer answer;
    if (parts.size() != 2 || !parts[0].empty() ||
        !net::DecodeLaneAnswer(parts[1].data(), parts[1].size(), &answer) ||
        answer.id != lane->writer->id()) {
      LOG(WARNING) << "sealed lane to " << c->endpoint
                   << ": the peer's answer to the offer is malformed; messages "
                      "stay on CURVE";
      lane->state = LaneOut::State::kOff;
      return;
    }
    if (answer.port == 0) {
      LOG_IF(INFO, lane->verbose >= 1)
          << "messages to " << c->endpoint
          << " stay on CURVE: it has no sealed lane";
      lane->state = LaneOut::State::kOff;
      return;
    }
    // The monitor reports the lane connection's failures and drops.
    StatusOr<void*> s =
        net::ConnectLane(lane->ctx, lane->host, answer.port, lane->writer.get(), lane->watch);
    if (!s.ok()) {
      LOG(WARNING) << "sealed lane to " << lane->host << ":" << answer.port << ": "
                   << s.status().message() << "; messages stay on CURVE";
      lane->state = LaneOut::State::kOff;
      return;
    }
    lane->socket = *s;
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
  if (HasMagic(msg.frames[1], kSwitchMagic, kSwitchBytes)) {
    const uint64_t id = net::LoadLe64(msg.frames[1].data() + 8);
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
  net::LaneOffer offer;
  net::DecodeLaneOffer(msg.frames[1].data(), msg.frames[1].size(), &offer);
  net::LaneAnswer answer;
  answer.id = offer.id;
  if (lane_ != nullptr) {
    // The same sender connected again: its earlier lane is done.
    for (auto it = lanes_in_.begin(); it != lanes_in_.end();) {
      auto next = std::next(it);
      if (it->second.token == msg.token) EraseLaneIn(it);
      it = next;
    }
    if (lanes_in_.count(offer.id) == 0) {
      StatusOr<net::KeptLane> kept = net::KeepLane(offer, zap_.get());
      if (kept.ok()) {
        LaneIn& in = lanes_in_[offer.id];
        in.token = msg.token;
        in.reader = std::move(kept->reader);
        in.zap_token = std::move(kept->zap_token);
        answer.port = static_cast<uint64_t>(lane_port_);
      }
    }
  }
  const std::string bytes = net::EncodeLaneAnswer(answer);
  // To the sender's DEALER, over CURVE (best effort: the sender keeps to
  // CURVE until an answer comes).
  zmq_send(router_, msg.token.data(), msg.token.size(),
           ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(router_, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(router_, bytes.data(), bytes.size(), ZMQ_DONTWAIT);
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
