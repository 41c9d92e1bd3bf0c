// Mesh: ZeroMQ sockets, connecting, sending and closing (the receive thread,
// heartbeats and peer liveness: mesh_recv.cc).
#include "transport/collective/mesh.h"

#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "transport/collective/mesh_peer.h"
#include "net/pieces.h"
#include "net/same_host.h"
#include "net/zmq_error.h"

namespace kvtrain {
namespace collective {

using net::ZmqError;

void ReleaseZeroCopy(void* /*data*/, void* hint) {
  Mesh* mesh = static_cast<Mesh*>(hint);
  if (mesh->unreleased_.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> l(mesh->released_mu_);
    mesh->released_cv_.notify_all();
  }
}

StatusOr<std::unique_ptr<Mesh>> Mesh::Bind(int rank, int size,
                                           const MeshOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::InvalidArgument("rank " + std::to_string(rank) +
                                   " is not in a group of " +
                                   std::to_string(size));
  }
  net::RaiseFileLimit();
  void* ctx = zmq_ctx_new();
  if (ctx == nullptr) return Status::Internal("zmq_ctx_new: " + ZmqError());
  net::SizeContext(ctx);
  std::unique_ptr<Mesh> mesh(new Mesh(rank, size, options, ctx));
  if (options.key.secure()) {
    KV_ASSIGN_OR_RETURN(mesh->zap_,
                        net::ZapHandler::Start(ctx, options.key,
                                              "all-reduce rank " + std::to_string(rank)));
  }
  void* router = zmq_socket(ctx, ZMQ_ROUTER);
  if (router == nullptr) return Status::Internal("zmq_socket: " + ZmqError());
  mesh->router_ = router;
  // What a stranger can make this rank hold (net/curve.h's limits): frames
  // of at most 4 MiB + 1 KiB, 10 s to finish a handshake, at most 32
  // connections in their handshake (the monitor sheds the rest).
  KV_RETURN_IF_ERROR(net::LimitInbound(router));
  mesh->monitor_ = net::HandshakeMonitor::Start(
      ctx, options.key.secure(), "all-reduce rank " + std::to_string(rank),
      [](int, const std::string&, const std::string&, int, bool) {});
  KV_RETURN_IF_ERROR(mesh->monitor_->Watch(router, /*is_server=*/true, -1));
  KV_RETURN_IF_ERROR(net::SecureSocket(router, options.key, /*is_server=*/true));
  const int zero = 0;
  zmq_setsockopt(router, ZMQ_RCVHWM, &zero, sizeof(zero));
  zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof(zero));
  if (zmq_bind(router, "tcp://*:*") != 0) {
    return Status::Unavailable("cannot bind a port: " + ZmqError());
  }
  char last[256];
  size_t len = sizeof(last);
  if (zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, last, &len) != 0) {
    return Status::Internal("ZMQ_LAST_ENDPOINT: " + ZmqError());
  }
  const std::string bound(last);
  mesh->port_ = std::atoi(bound.c_str() + bound.rfind(':') + 1);
  if (options.key.secure() && options.sealed_lane) {
    // Best effort: without it peers send everything over CURVE.
    const Status lane = mesh->BindLane();
    LOG_IF(WARNING, !lane.ok())
        << "all-reduce rank " << rank << ": " << lane.message()
        << "; peers send everything over CURVE";
  }
  if (options.same_host_ipc) {
    // Best effort: without it same-host peers use TCP.
    StatusOr<std::string> local = net::BindSameHost(router, "mesh");
    if (local.ok()) {
      mesh->same_host_ = *local;
    } else {
      VLOG(1) << "all-reduce rank " << rank << ": " << local.status().message()
              << "; same-host peers use TCP";
    }
  }
  return mesh;
}

Endpoint Mesh::Self(const std::string& host) const {
  return {host, port_, same_host_};
}

std::string Mesh::Transport(int peer) const {
  return peers_[peer]->ipc ? "ipc" : "tcp";
}

bool Mesh::UseIpc(const Endpoint& peer) const {
  // Both ends must listen on a same-host socket (either may have it off).
  return !same_host_.empty() && !net::SameHostEndpoint(peer.same_host).empty();
}

Mesh::Mesh(int rank, int size, const MeshOptions& options, void* ctx)
    : rank_(rank),
      size_(size),
      options_(options),
      ctx_(ctx),
      inbox_(rank, size, options.limits),
      liveness_(size, options.liveness, net::SteadyNowNs()),
      bad_input_log_(10, std::chrono::seconds(10)) {
  for (int i = 0; i < size; ++i) peers_.push_back(std::make_unique<Peer>());
  failed_.assign(size, "");
  said_bye_.assign(size, false);
  bye_reason_.assign(size, std::string());
  liveness_.SetWatched(rank, false);
  std::vector<int> everyone(size);
  for (int i = 0; i < size; ++i) everyone[i] = i;
  std::lock_guard<std::mutex> l(mu_);
  inbox_.OpenGroup(kWorldGroup, everyone);
}

Mesh::~Mesh() { Close(); }

std::string Mesh::PeerName(int peer) const {
  std::string name = "rank " + std::to_string(peer);
  if (peer >= 0 && peer < size_ && !peers_[peer]->endpoint.host.empty()) {
    name += " (" + peers_[peer]->endpoint.ToString() + ")";
  }
  return name;
}

Status Mesh::Connect(const std::vector<Endpoint>& peers) {
  CHECK_EQ(static_cast<int>(peers.size()), size_);
  const int zero = 0;
  const std::string id = RankRoutingId(rank_);
  for (int p = 0; p < size_; ++p) {
    Peer& peer = *peers_[p];
    peer.endpoint = peers[p];
    if (p == rank_) continue;
    void* s = zmq_socket(ctx_, ZMQ_DEALER);
    if (s == nullptr) return Status::Internal("zmq_socket: " + ZmqError());
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id.data(), id.size());
    peer.ipc = UseIpc(peers[p]);
    // Same-host links are vouched for by the kernel (the peer's uid), not CURVE.
    if (!peer.ipc) {
      const Status secured = net::SecureSocket(s, options_.key, /*is_server=*/false);
      if (!secured.ok()) {
        zmq_close(s);
        return secured;
      }
    }
    zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
    const std::string mon = "inproc://mesh-monitor-" +
                            std::to_string(reinterpret_cast<uintptr_t>(this)) +
                            "-" + std::to_string(p);
    zmq_socket_monitor(s, mon.c_str(), ZMQ_EVENT_DISCONNECTED);
    peer.monitor = zmq_socket(ctx_, ZMQ_PAIR);
    zmq_connect(peer.monitor, mon.c_str());
    const std::string ep =
        peer.ipc ? net::SameHostEndpoint(peers[p].same_host) : "tcp://" + peers[p].ToString();
    if (zmq_connect(s, ep.c_str()) != 0) {
      const std::string err = ZmqError();
      zmq_close(s);
      return Status::Unavailable("cannot connect to " + PeerName(p) + ": " +
                                 err);
    }
    std::lock_guard<std::mutex> l(peer.mu);
    peer.dealer = s;
  }
  // The clocks start when every connection is made.
  for (int p = 0; p < size_; ++p) liveness_.Heard(p, net::SteadyNowNs());
  thread_ = std::thread([this] { RecvLoop(); });
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) KV_RETURN_IF_ERROR(Send(p, MsgKind::kHello, 0, 0, "", 0));
  }
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options_.startup_timeout_s));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto hello = Recv(p, MsgKind::kHello, 0, 0, deadline);
    if (!hello.ok()) {
      return hello.status().Annotate("connecting to " + PeerName(p));
    }
  }
  return ConnectLanes(deadline);
}

Status Mesh::SendRaw(int peer, MsgKind kind, uint64_t group, uint64_t tag,
                     const void* data, size_t size, bool copy) {
  Peer& p = *peers_[peer];
  WireHeader h{static_cast<uint32_t>(kind), rank_, group, tag, peer, 0};
  std::lock_guard<std::mutex> l(p.mu);
  if (p.dealer == nullptr) {
    return Status::Unavailable("no connection to " + PeerName(peer));
  }
  if (p.lane != nullptr) return SendSealed(peer, &h, sizeof(h), data, size);
  if (zmq_send(p.dealer, &h, sizeof(h), ZMQ_SNDMORE) < 0) {
    return Status::Unavailable("send to " + PeerName(peer) + ": " + ZmqError());
  }
  // The body in pieces (net/pieces.h: receivers refuse larger frames).
  for (size_t i = 0; i < net::PieceCount(size); ++i) {
    const net::Piece piece = net::PieceOf(size, i);
    const size_t n = piece.length;
    const bool last = piece.last;
    const char* at = static_cast<const char*>(data) + piece.offset;
    zmq_msg_t m;
    if (copy || size == 0) {
      zmq_msg_init_size(&m, n);
      if (n > 0) std::memcpy(zmq_msg_data(&m), at, n);
    } else {
      unreleased_.fetch_add(1);
      // Cannot fail short of memory exhaustion (then an empty frame goes).
      (void)net::InitZeroCopy(&m, at, n, ReleaseZeroCopy, this);
    }
    if (zmq_msg_send(&m, p.dealer, last ? 0 : ZMQ_SNDMORE) < 0) {
      const std::string err = ZmqError();
      zmq_msg_close(&m);
      return Status::Unavailable("send to " + PeerName(peer) + ": " + err);
    }
  }
  return Status::OK();
}

Status Mesh::Send(int peer, MsgKind kind, uint64_t group, uint64_t tag,
                  const void* data, size_t size, bool copy) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return Status::InvalidArgument(
        "send from rank " + std::to_string(rank_) + " to invalid peer " +
        std::to_string(peer) + " (group of " + std::to_string(size_) + ")");
  }
  KV_RETURN_IF_ERROR(PeerStatus(peer));
  return SendRaw(peer, kind, group, tag, data, size, copy);
}

Status Mesh::PeerStatus(int peer) {
  std::lock_guard<std::mutex> l(mu_);
  if (!failed_[peer].empty()) return Status::Unavailable(failed_[peer]);
  return Status::OK();
}

void Mesh::OpenGroup(uint64_t group, const std::vector<int>& members) {
  std::lock_guard<std::mutex> l(mu_);
  inbox_.OpenGroup(group, members);
}

void Mesh::CloseGroup(uint64_t group) {
  std::lock_guard<std::mutex> l(mu_);
  inbox_.CloseGroup(group);
}

void Mesh::Retire(uint64_t group, uint64_t tag) {
  std::lock_guard<std::mutex> l(mu_);
  inbox_.Retire(group, tag);
}

MeshStats Mesh::Stats() {
  MeshStats s;
  std::lock_guard<std::mutex> l(mu_);
  for (int d = 0; d < kDropReasons; ++d) {
    s.dropped[d] = inbox_.dropped(static_cast<Drop>(d));
    s.dropped_total += s.dropped[d];
  }
  s.lane_refused = lane_refused_.load();
  s.handshakes_refused = monitor_ == nullptr ? 0 : monitor_->refused();
  for (int p = 0; p < size_; ++p) {
    s.queued_messages.push_back(inbox_.queued_messages(p));
    s.queued_bytes.push_back(inbox_.queued_bytes(p));
  }
  return s;
}

StatusOr<std::unique_ptr<Payload>> Mesh::Recv(int peer, MsgKind kind,
                                              uint64_t group, uint64_t tag,
                                              Clock::time_point deadline) {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return Status::InvalidArgument(
        "receive on rank " + std::to_string(rank_) + " from invalid peer " +
        std::to_string(peer) + " (group of " + std::to_string(size_) + ")");
  }
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    if (std::unique_ptr<Payload> p = inbox_.Pop(peer, kind, group, tag)) return p;
    if (closing_) {
      return Status::Aborted("rank " + std::to_string(rank_) +
                             ": the communicator was closed");
    }
    if (!failed_[peer].empty()) return Status::Unavailable(failed_[peer]);
    if (kind == MsgKind::kCollective) {
      // A collective cannot finish once any rank is gone; fail now rather
      // than wait for the failure to travel around the ring.
      for (int p = 0; p < size_; ++p) {
        if (!failed_[p].empty()) return Status::Unavailable(failed_[p]);
      }
    }
    if (said_bye_[peer]) {
      // It may have left because a rank died that this one has not
      // noticed yet: its bye says so.
      return Status::Unavailable(PeerName(peer) + " has left (closed its communicator)" +
                                 (bye_reason_[peer].empty() ? "" : ": " + bye_reason_[peer]));
    }
    if (cv_.wait_until(l, deadline) == std::cv_status::timeout &&
        Clock::now() >= deadline) {
      if (std::unique_ptr<Payload> p = inbox_.Pop(peer, kind, group, tag)) return p;
      return Status::DeadlineExceeded("no message from " + PeerName(peer) +
                                      " in time");
    }
  }
}

Status Mesh::WaitReleased(Clock::time_point deadline) {
  std::unique_lock<std::mutex> l(released_mu_);
  if (!released_cv_.wait_until(l, deadline,
                               [this] { return unreleased_.load() <= 0; })) {
    return Status::DeadlineExceeded("sends not taken by the network in time");
  }
  return Status::OK();
}

void Mesh::MarkDead(int peer, const std::string& why) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!failed_[peer].empty() || said_bye_[peer]) return;
    failed_[peer] = net::DeathMessage(PeerName(peer), why);
  }
  LOG(ERROR) << "rank " << rank_ << ": " << net::DeathMessage(PeerName(peer), why);
  cv_.notify_all();
}

void Mesh::Close() {
  {
    std::lock_guard<std::mutex> l(close_mu_);
    if (closed_) return;
    closed_ = true;
  }
  // Leaving after a rank died: the bye names it, so that a rank that has
  // not noticed yet reports the death, not only this departure.
  std::string reason;
  {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
    for (int p = 0; p < size_ && reason.empty(); ++p) reason = failed_[p];
  }
  if (reason.size() > kMaxByeReason) reason.resize(kMaxByeReason);
  cv_.notify_all();
  if (thread_.joinable()) {
    for (int p = 0; p < size_; ++p) {
      if (p != rank_ && PeerStatus(p).ok()) {
        SendRaw(p, MsgKind::kBye, 0, 0, reason.data(), reason.size(), true);
      }
    }
    WaitReleased(Clock::now() + std::chrono::seconds(2));
    stop_.store(true);
    thread_.join();
  }
  for (int p = 0; p < size_; ++p) {
    Peer& peer = *peers_[p];
    std::lock_guard<std::mutex> l(peer.mu);
    if (peer.dealer != nullptr) {
      const int linger = PeerStatus(p).ok() ? 200 : 0;
      zmq_setsockopt(peer.dealer, ZMQ_LINGER, &linger, sizeof(linger));
      zmq_socket_monitor(peer.dealer, nullptr, 0);
      zmq_close(peer.dealer);
      peer.dealer = nullptr;
    }
    if (peer.monitor != nullptr) {
      zmq_close(peer.monitor);
      peer.monitor = nullptr;
    }
    if (peer.lane != nullptr) {
      const int linger = PeerStatus(p).ok() ? 200 : 0;
      zmq_setsockopt(peer.lane, ZMQ_LINGER, &linger, sizeof(linger));
      zmq_close(peer.lane);
      peer.lane = nullptr;
    }
  }
  if (router_ != nullptr) zmq_close(router_);
  router_ = nullptr;
  if (lane_ != nullptr) zmq_close(lane_);
  lane_ = nullptr;
  lanes_in_.clear();
  monitor_.reset();
  zap_.reset();
  zmq_ctx_term(ctx_);
  ctx_ = nullptr;
}

}  // namespace collective
}  // namespace kvtrain
