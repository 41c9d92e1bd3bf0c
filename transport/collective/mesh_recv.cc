// Mesh's receive thread: incoming frames, socket events, heartbeats and
// peer liveness.
#include <glog/logging.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/collective/mesh.h"
#include "transport/collective/mesh_peer.h"
#include "net/pieces.h"
#include "net/zmq_error.h"

namespace kvtrain {
namespace collective {

using net::ZmqError;

std::vector<std::unique_ptr<net::ZmqFrame>> Mesh::RestOf(
    void* socket, const net::ZmqFrame& id) {
  std::vector<std::unique_ptr<net::ZmqFrame>> frames;
  for (bool more = zmq_msg_more(const_cast<zmq_msg_t*>(&id.msg)); more;) {
    auto f = std::make_unique<net::ZmqFrame>();
    if (zmq_msg_recv(&f->msg, socket, 0) < 0) break;
    more = zmq_msg_more(&f->msg);
    frames.push_back(std::move(f));
  }
  return frames;
}

void Mesh::HandleIncoming() {
  for (;;) {
    // Routing id, header, body (in pieces when above 4 MiB).
    net::ZmqFrame id;
    if (zmq_msg_recv(&id.msg, router_, ZMQ_DONTWAIT) < 0) return;
    std::vector<std::unique_ptr<net::ZmqFrame>> frames = RestOf(router_, id);
    Accept(std::string_view(id.data(), id.size()), &id.msg, std::move(frames));
  }
}

void Mesh::Accept(std::string_view id, zmq_msg_t* id_msg,
                  std::vector<std::unique_ptr<net::ZmqFrame>> frames) {
  std::unique_ptr<Payload> body;
  WireFrames in;
  in.count = std::min<size_t>(1 + frames.size(), 3);
  in.frame[0] = id;
  if (!frames.empty()) in.frame[1] = {frames[0]->data(), frames[0]->size()};
  const size_t pieces = frames.empty() ? 0 : frames.size() - 1;
  in.body_pieces = pieces;
  in.pieces_well_formed =
      pieces == 0 || net::ArePieces(pieces, [&](size_t i) { return frames[1 + i]->size(); });
  if (pieces == 1) {
    body = std::move(frames[1]);
  } else {
    body = std::make_unique<Payload>();
    if (pieces > 1 && in.pieces_well_formed) {
      size_t total = 0;
      for (size_t i = 1; i < frames.size(); ++i) total += frames[i]->size();
      zmq_msg_close(&body->msg);
      zmq_msg_init_size(&body->msg, total);
      char* to = static_cast<char*>(zmq_msg_data(&body->msg));
      for (size_t i = 1; i < frames.size(); ++i) {
        std::memcpy(to, frames[i]->data(), frames[i]->size());
        to += frames[i]->size();
      }
    }
  }
  if (in.body_pieces > 0) in.frame[2] = {body->data(), body->size()};
  Decoded d = DecodeMeshMessage(in, rank_, size_);
  if (d.drop == Drop::kNone && d.kind == MsgKind::kLane &&
      d.tag == kLaneOffer) {
    // Answered here; nothing waits for it in the inbox.
    liveness_.Heard(d.peer, net::SteadyNowNs());
    return OnLaneOffer(d.peer, *body);
  }
  if (d.drop == Drop::kNone) d.drop = Deliver(d, std::move(body));
  if (d.drop != Drop::kNone)
    LogDrop(d, in.frame[0], frames.empty() ? id_msg : &frames[0]->msg);
}

Drop Mesh::Deliver(const Decoded& d, std::unique_ptr<Payload> body) {
  liveness_.Heard(d.peer, net::SteadyNowNs());
  if (d.kind == MsgKind::kHeartbeat) return Drop::kNone;
  Drop verdict = Drop::kNone;
  std::string cut_off;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (d.kind == MsgKind::kBye) {
      said_bye_[d.peer] = true;
      if (body != nullptr && body->size() > 0) {
        bye_reason_[d.peer].assign(static_cast<const char*>(body->data()), body->size());
      }
      liveness_.SaidGoodbye(d.peer);
    } else {
      verdict = inbox_.Push(d.peer, d.kind, d.group, d.tag, std::move(body));
    }
    if (verdict == Drop::kOverLimit) {
      // A correct peer never gets this far ahead: a bug, or not a rank of
      // this job. Its waits fail naming it rather than hang or run out of
      // memory.
      if (failed_[d.peer].empty()) {
        const InboxLimits& lim = inbox_.limits();
        failed_[d.peer] =
            PeerName(d.peer) + " was cut off: it sent more than rank " +
            std::to_string(rank_) + " may hold before receiving (" +
            std::to_string(inbox_.queued_messages(d.peer)) + " messages, " +
            std::to_string(inbox_.queued_bytes(d.peer)) +
            " bytes waiting; limits " +
            std::to_string(lim.max_messages_per_peer) + " messages, " +
            std::to_string(lim.max_bytes_per_peer) +
            " bytes per peer: CommunicatorOptions::max_queued_*_per_peer). Do "
            "all ranks "
            "call the same collectives in the same order, and has every Send "
            "its Recv?";
        cut_off = failed_[d.peer];
      }
      inbox_.CutOff(d.peer);
    }
  }
  if (!cut_off.empty()) LOG(ERROR) << "rank " << rank_ << ": " << cut_off;
  if (verdict == Drop::kNone || !cut_off.empty()) cv_.notify_all();
  return verdict;
}

void Mesh::LogDrop(const Decoded& d, std::string_view routing_id,
                   zmq_msg_t* frame) {
  if (d.drop == Drop::kUnknownConnection || d.drop == Drop::kMalformed ||
      d.drop == Drop::kForgedSender || d.drop == Drop::kMisdirected) {
    std::lock_guard<std::mutex> l(mu_);
    inbox_.Count(d.drop);  // the Inbox counted the others
  }
  // Names and the address (ZeroMQ's metadata) only for the lines logged.
  auto from = [&] {
    if (d.peer >= 0) return PeerName(d.peer);
    std::string name = "connection " + DescribeRoutingId(routing_id);
    const char* address = zmq_msg_gets(frame, "Peer-Address");
    if (address != nullptr && *address != '\0')
      name += " from " + std::string(address);
    return name;
  };
  auto why = [&] {
    if (!d.why.empty()) return d.why;
    return std::string(KindName(d.kind)) + " message, group " +
           std::to_string(d.group) + ", tag " + std::to_string(d.tag);
  };
  KV_LOG_LIMITED(WARNING, bad_input_log_)
      << "all-reduce rank " << rank_ << ": dropped a message from " << from()
      << ": " << DropName(d.drop) << " (" << why() << ")";
}

void Mesh::HandleMonitor(int peer) {
  void* mon = peers_[peer]->monitor;
  for (;;) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
      zmq_msg_close(&m);
      return;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&m) >= 2) std::memcpy(&event, zmq_msg_data(&m), 2);
    const bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    if (more) {  // the endpoint frame
      zmq_msg_t addr;
      zmq_msg_init(&addr);
      zmq_msg_recv(&addr, mon, 0);
      zmq_msg_close(&addr);
    }
    if (event == ZMQ_EVENT_DISCONNECTED) {
      liveness_.Dropped(peer, net::SteadyNowNs());
    }
  }
}

void Mesh::Beat(int64_t now_ns) {
  for (const net::PeerLiveness::Death& d : liveness_.Check(now_ns)) {
    MarkDead(d.peer, d.why);
  }
  if (!liveness_.HeartbeatDue(now_ns)) return;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_ && PeerStatus(p).ok()) {
      SendRaw(p, MsgKind::kHeartbeat, 0, 0, nullptr, 0, true);
    }
  }
}

void Mesh::RecvLoop() {
  std::vector<zmq_pollitem_t> items;
  std::vector<int> item_peer;
  items.push_back({router_, 0, ZMQ_POLLIN, 0});
  item_peer.push_back(-1);
  if (lane_ != nullptr) {
    items.push_back({lane_, 0, ZMQ_POLLIN, 0});
    item_peer.push_back(-2);
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    items.push_back({peers_[p]->monitor, 0, ZMQ_POLLIN, 0});
    item_peer.push_back(p);
  }
  while (!stop_.load()) {
    const int n = zmq_poll(items.data(), static_cast<int>(items.size()), 50);
    if (n < 0 && zmq_errno() == ETERM) return;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      if (item_peer[i] == -1) {
        HandleIncoming();
      } else if (item_peer[i] == -2) {
        HandleLane();
      } else {
        HandleMonitor(item_peer[i]);
      }
    }
    Beat(net::SteadyNowNs());
  }
}

}  // namespace collective
}  // namespace kvtrain
