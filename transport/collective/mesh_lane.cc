// The mesh's sealed lane (net/seal.h; the parameter-server van has the same,
// transport/ps/zmq_van_lane.cc): with security on, a rank sends to a peer it
// reaches over TCP over a second connection, every frame sealed with
// AES-256-GCM under a random key it gave the peer over CURVE.
//
// Set up in Connect, after the hellos, for every TCP peer at once, in the
// steps of net/lane_setup.h (the parameter-server van's):
//  1. Each rank sends each TCP peer, over CURVE, an offer (kLane, tag
//     kLaneOffer; lane id 0 when it has no lane to seal into).
//  2. The receive thread keeps an offered key under its lane id and answers
//     (kLaneAck) with its lane's port, 0 when it has none.
//  3. Once the answer shows a port, the rank connects a DEALER to the
//     peer's lane, sends a sealed probe and waits for the sealed "ready"
//     (at most kLaneProbeMs); then every later message to that peer goes
//     over the lane. No message of the job went to the peer before
//     (Connect has not returned), so nothing can be overtaken and no switch
//     mark is needed. A peer whose lane does not answer keeps CURVE.
// The receive thread opens what comes on the lane (net::LaneReader: a lane
// it was offered, in sequence, whole, under its key) and hands it to the
// same decoding as the ROUTER's messages, as from the rank that offered
// the lane; anything else is dropped, counted and logged (rate-limited).
#include <glog/logging.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "transport/collective/mesh.h"
#include "transport/collective/mesh_peer.h"
#include "net/lane_setup.h"
#include "net/pieces.h"
#include "net/zmq_error.h"
#include "net/zmq_frame.h"

namespace kvtrain {
namespace collective {

namespace {

using net::ZmqError;

// How long a rank waits for a peer's lane to answer its probe before it
// keeps CURVE for that peer.
constexpr int kLaneProbeMs = 5000;

}  // namespace

Status Mesh::BindLane() {
  if (zap_ == nullptr) return Status::FailedPrecondition("no ZAP handler");
  KV_ASSIGN_OR_RETURN(lane_, net::BindLaneSocket(ctx_, &lane_port_, [this](void* s) {
                        return monitor_->Watch(s, /*is_server=*/true, -1);
                      }));
  return Status::OK();
}

Status Mesh::ConnectLanes(Clock::time_point deadline) {
  if (!options_.key.secure()) return Status::OK();
  std::vector<std::unique_ptr<net::LaneWriter>> writers(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[p]->ipc) continue;
    // A rank with its lane turned off (no lane socket) uses none either way.
    net::LaneOffer offer;
    if (lane_ != nullptr) {
      StatusOr<std::unique_ptr<net::LaneWriter>> w = net::LaneWriter::Create();
      if (w.ok()) {
        writers[p] = std::move(*w);
        offer = {writers[p]->id(), writers[p]->key()};
      }
    }
    const std::string bytes = net::EncodeLaneOffer(offer);
    KV_RETURN_IF_ERROR(Send(p, MsgKind::kLane, 0, kLaneOffer, bytes.data(), bytes.size()));
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[p]->ipc) continue;
    auto got = Recv(p, MsgKind::kLane, 0, kLaneAck, deadline);
    if (!got.ok()) return got.status().Annotate("connecting to " + PeerName(p));
    net::LaneAnswer answer;
    if (writers[p] == nullptr ||
        !net::DecodeLaneAnswer((*got)->data(), (*got)->size(), &answer) ||
        answer.id != writers[p]->id() || answer.port == 0) {
      continue;
    }
    StatusOr<void*> s = net::ConnectLane(ctx_, peers_[p]->endpoint.host, answer.port,
                                         writers[p].get(), nullptr);
    bool ready = false;
    if (s.ok()) {
      const int wait_ms = static_cast<int>(std::max<int64_t>(
          1, std::min<int64_t>(kLaneProbeMs,
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - Clock::now())
                                   .count())));
      zmq_setsockopt(*s, ZMQ_RCVTIMEO, &wait_ms, sizeof(wait_ms));
      net::ZmqFrame reply;
      ready = zmq_msg_recv(&reply.msg, *s, 0) >= 0 && !zmq_msg_more(&reply.msg) &&
              writers[p]->IsReady(static_cast<char*>(zmq_msg_data(&reply.msg)),
                                  zmq_msg_size(&reply.msg));
    }
    if (!ready) {
      LOG(WARNING) << "all-reduce rank " << rank_ << ": the sealed lane of " << PeerName(p)
                   << " (" << peers_[p]->endpoint.host << ":" << answer.port
                   << ") did not answer; messages to it go over CURVE";
      if (s.ok()) zmq_close(*s);
      continue;
    }
    Peer& peer = *peers_[p];
    std::lock_guard<std::mutex> l(peer.mu);
    peer.lane = *s;
    peer.writer = std::move(writers[p]);
  }
  return Status::OK();
}

bool Mesh::Sealed(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return false;
  std::lock_guard<std::mutex> l(peers_[peer]->mu);
  return peers_[peer]->lane != nullptr;
}

void Mesh::OnLaneOffer(int peer, const Payload& body) {
  net::LaneOffer offer;
  net::LaneAnswer answer;
  if (net::DecodeLaneOffer(body.data(), body.size(), &offer)) answer.id = offer.id;
  if (lane_ != nullptr && offer.id != 0 && lanes_in_.count(offer.id) == 0) {
    StatusOr<net::KeptLane> kept = net::KeepLane(offer, zap_.get());
    if (kept.ok()) {
      // The peer offered again (it cannot, short of a bug): its earlier
      // lane is done.
      for (auto it = lanes_in_.begin(); it != lanes_in_.end();) {
        if (it->second.peer == peer) {
          zap_->ForgetLane(it->second.zap_token);
          it = lanes_in_.erase(it);
        } else {
          ++it;
        }
      }
      LaneIn& in = lanes_in_[offer.id];
      in.peer = peer;
      in.reader = std::move(kept->reader);
      in.zap_token = std::move(kept->zap_token);
      answer.port = static_cast<uint64_t>(lane_port_);
    }
  }
  // Always answered: the offerer waits for it.
  const std::string bytes = net::EncodeLaneAnswer(answer);
  SendRaw(peer, MsgKind::kLane, 0, kLaneAck, bytes.data(), bytes.size(), /*copy=*/true);
}

void Mesh::HandleLane() {
  for (;;) {
    net::ZmqFrame id;
    if (zmq_msg_recv(&id.msg, lane_, ZMQ_DONTWAIT) < 0) return;
    std::vector<std::unique_ptr<net::ZmqFrame>> parts = RestOf(lane_, id);
    std::vector<net::LaneReader::Part> sealed;
    for (auto& f : parts) {
      sealed.push_back(
          {static_cast<char*>(zmq_msg_data(&f->msg)), zmq_msg_size(&f->msg)});
    }
    net::LaneOpened got;
    const Status opened = net::OpenLaneMessage(sealed, lanes_in_, &got);
    if (!opened.ok()) {
      lane_refused_.fetch_add(1);
      const char* address = zmq_msg_gets(
          parts.empty() ? &id.msg : &parts[0]->msg, "Peer-Address");
      KV_LOG_LIMITED(WARNING, bad_input_log_)
          << "all-reduce rank " << rank_
          << ": sealed lane: dropped a message from "
          << (address != nullptr ? address : "an unknown peer") << ": "
          << opened.message();
      continue;
    }
    if (got.probe) {
      zmq_send(lane_, zmq_msg_data(&id.msg), zmq_msg_size(&id.msg),
               ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(lane_, got.answer.data(), got.answer.size(), ZMQ_DONTWAIT);
      continue;
    }
    const int peer = lanes_in_[got.lane].peer;
    if (got.lost > 0) {
      // A message of the peer's never came (the lane's connection broke in
      // the middle of it): waits on the peer fail naming it, not hang.
      MarkDead(peer, "its sealed lane lost " + std::to_string(got.lost) +
                         " frames on the way (a message)");
    }
    for (auto& f : parts) {
      f->skip_front = net::kSealHeaderBytes;
      f->skip_back = net::kSealTagBytes;
    }
    // As if it came from the peer's own connection: its routing id.
    const std::string from = RankRoutingId(peer);
    zmq_msg_t* first = &parts[0]->msg;  // heap-held: stays valid in Accept
    Accept(from, first, std::move(parts));
  }
}

Status Mesh::SendSealed(int peer, const void* header, size_t header_size,
                        const void* data, size_t size) {
  Peer& p = *peers_[peer];
  // The header, then the body in pieces (net/pieces.h, as over CURVE),
  // each sealed into its own ZeroMQ message buffer.
  const size_t n = 1 + net::PieceCount(size);
  for (size_t i = 0; i < n; ++i) {
    const net::Piece piece = i == 0 ? net::Piece{0, header_size, false}
                                    : net::PieceOf(size, i - 1);
    const char* at = i == 0 ? static_cast<const char*>(header)
                            : static_cast<const char*>(data) + piece.offset;
    const size_t len = piece.length;
    zmq_msg_t m;
    zmq_msg_init_size(&m, net::SealedSize(len));
    const Status sealed = p.writer->Seal(i, n, len > 0 ? at : nullptr, len,
                                         static_cast<char*>(zmq_msg_data(&m)));
    if (!sealed.ok() ||
        zmq_msg_send(&m, p.lane, i + 1 < n ? ZMQ_SNDMORE : 0) < 0) {
      const std::string err =
          sealed.ok() ? ZmqError() : std::string(sealed.message());
      zmq_msg_close(&m);
      return Status::Unavailable("send to " + PeerName(peer) +
                                 " over its sealed lane: " + err);
    }
  }
  return Status::OK();
}

}  // namespace collective
}  // namespace kvtrain
