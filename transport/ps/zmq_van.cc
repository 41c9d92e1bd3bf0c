// ZmqVan: zero-copy ZeroMQ transport with per-connection priority backlog.
#include "transport/ps/zmq_van.h"
#include "transport/ps/zmq_van_conn.h"

#include "base/trace.h"
#include "net/same_host.h"
#include "net/zmq_error.h"
#include "net/zmq_frame.h"

#include <glog/logging.h>
#include <zmq.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvtrain {
namespace ps {

using net::ZmqError;

StatusOr<std::unique_ptr<ZmqVan>> ZmqVan::Create(std::string token,
                                                 const ZmqVanOptions& options) {
  net::RaiseFileLimit();
  void* ctx = zmq_ctx_new();
  if (ctx == nullptr) return Status::Internal("zmq_ctx_new: " + ZmqError());
  zmq_ctx_set(ctx, ZMQ_IO_THREADS, 1);
  net::SizeContext(ctx);
  std::unique_ptr<net::ZapHandler> zap;
  if (options.key.secure()) {
    StatusOr<std::unique_ptr<net::ZapHandler>> z =
        net::ZapHandler::Start(ctx, options.key, "ZeroMQ van");
    if (!z.ok()) {
      zmq_ctx_term(ctx);
      return z.status();
    }
    zap = std::move(*z);
  }
  std::unique_ptr<ZmqVan> van(new ZmqVan(std::move(token), options, ctx));
  van->zap_ = std::move(zap);
  ZmqVan* self = van.get();
  van->monitor_ = net::HandshakeMonitor::Start(
      ctx, options.key.secure(), "ZeroMQ van",
      [self](int conn, const std::string& endpoint, const std::string& why,
             int in_a_row, bool final) {
        if (conn >= kLaneTagBase) {
          // A lane that does not admit us: until its probe is answered
          // messages stay on CURVE; a lane that was up reports its drop.
          KV_LOG_LIMITED(WARNING, self->lane_log_)
              << "sealed lane at " << endpoint << " refused this node ("
              << in_a_row << " in a row)";
          return;
        }
        HandshakeFailureHandler h;
        {
          std::lock_guard<std::mutex> l(self->handler_mu_);
          h = self->on_handshake_failure_;
        }
        if (h) h(conn, endpoint, why, in_a_row, final);
      },
      [self](int conn) {
        // A lane's connection that dropped may have lost a message on the
        // way: it counts as its connection's drop.
        if (conn >= kLaneTagBase) {
          conn -= kLaneTagBase;
        }
        DropHandler h;
        {
          std::lock_guard<std::mutex> l(self->handler_mu_);
          h = self->on_drop_;
        }
        if (h) h(conn);
      });
  return van;
}

ZmqVan::ZmqVan(std::string token, const ZmqVanOptions& options, void* ctx)
    : token_(std::move(token)), options_(options), ctx_(ctx) {
  sender_ = std::thread([this] { SenderLoop(); });
}

void ZmqVan::SetHandshakeFailureHandler(HandshakeFailureHandler handler) {
  std::lock_guard<std::mutex> l(handler_mu_);
  on_handshake_failure_ = std::move(handler);
}

void ZmqVan::SetDropHandler(DropHandler handler) {
  std::lock_guard<std::mutex> l(handler_mu_);
  on_drop_ = std::move(handler);
}

void ZmqVan::SetLogName(const std::string& name) {
  if (zap_) zap_->SetLogName(name);
  if (monitor_) monitor_->SetLogName(name);
}

ZmqVan::~ZmqVan() { Close(std::chrono::milliseconds(0)); }

StatusOr<int> ZmqVan::Bind(int port) {
  CHECK(router_ == nullptr) << "ZmqVan::Bind called twice";
  router_ = zmq_socket(ctx_, ZMQ_ROUTER);
  if (router_ == nullptr) return Status::Internal("zmq_socket: " + ZmqError());
  const int zero = 0;
  zmq_setsockopt(router_, ZMQ_RCVHWM, &zero, sizeof(zero));
  zmq_setsockopt(router_, ZMQ_LINGER, &zero, sizeof(zero));
  Status secured = net::LimitInbound(router_);
  if (secured.ok()) secured = net::SecureSocket(router_, options_.key, /*is_server=*/true);
  if (secured.ok()) secured = monitor_->Watch(router_, /*is_server=*/true, -1);
  if (!secured.ok()) {
    zmq_close(router_);
    router_ = nullptr;
    return secured;
  }
  const std::string endpoint =
      port == 0 ? "tcp://*:*" : "tcp://*:" + std::to_string(port);
  if (zmq_bind(router_, endpoint.c_str()) != 0) {
    const int err = zmq_errno();
    zmq_close(router_);
    router_ = nullptr;
    if (err == EADDRINUSE) {
      return Status::AlreadyExists("port " + std::to_string(port) +
                                   " is already in use");
    }
    return Status::Unavailable("cannot bind " + endpoint + ": " +
                               zmq_strerror(err));
  }
  char last[256];
  size_t len = sizeof(last);
  if (zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, last, &len) != 0) {
    return Status::Internal("ZMQ_LAST_ENDPOINT: " + ZmqError());
  }
  const std::string bound(last);
  const size_t colon = bound.rfind(':');
  if (options_.key.secure() && options_.sealed_lane) {
    // Best effort: without it, peers send every frame over CURVE.
    const Status lane = BindLane();
    LOG_IF(WARNING, !lane.ok())
        << lane.message() << "; peers send every frame over CURVE";
  }
  // The doorbell: Wake rings it, and so do peers' rings (whatever this
  // node's own sending options).
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    const std::string err = std::strerror(errno);
    zmq_close(router_);
    router_ = nullptr;
    return Status::Internal("pipe for the receive loop's doorbell: " + err);
  }
  bell_read_ = fds[0];
  bell_write_ = fds[1];
  if (options_.same_host) {
    // Best effort: without it, peers on this host use TCP (and CURVE).
    StatusOr<std::string> local = net::BindSameHost(router_, "ps");
    if (local.ok()) {
      same_host_ = *local;
    } else {
      LOG(WARNING) << "no same-host socket (" << local.status().message()
                   << "); peers on this host connect over TCP";
    }
  }
  return std::atoi(bound.c_str() + colon + 1);
}

Status ZmqVan::Connect(int conn, const std::string& host, int port,
                       const std::string& same_host) {
  auto c = std::make_unique<Conn>(options_.send_window_bytes);
  c->van = this;
  // Both ends must have a same-host socket: a node run with it off uses TCP
  // for every link, in and out.
  const std::string local =
      same_host_.empty() ? std::string() : net::SameHostEndpoint(same_host);
  c->endpoint = local.empty() ? "tcp://" + host + ":" + std::to_string(port) : local;
  void* s = zmq_socket(ctx_, ZMQ_DEALER);
  if (s == nullptr) return Status::Internal("zmq_socket: " + ZmqError());
  const int zero = 0;
  zmq_setsockopt(s, ZMQ_ROUTING_ID, token_.data(), token_.size());
  zmq_setsockopt(s, ZMQ_SNDHWM, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  // Same-host links are vouched for by the kernel (the peer's uid), not CURVE.
  Status secured = local.empty()
                       ? net::SecureSocket(s, options_.key, /*is_server=*/false)
                       : Status::OK();
  if (secured.ok()) secured = net::LimitInbound(s);
  if (secured.ok()) secured = monitor_->Watch(s, /*is_server=*/false, conn);
  if (!secured.ok()) {
    zmq_close(s);
    return secured;
  }
  if (zmq_connect(s, c->endpoint.c_str()) != 0) {
    const std::string err = ZmqError();
    zmq_close(s);
    return Status::Unavailable("cannot connect to " + c->endpoint + ": " + err);
  }
  c->shm_ok = !local.empty() && options_.shm_bytes > 0 && net::SameHostSharesPids(same_host);
  c->ring_ok = c->shm_ok && options_.shm_ring;
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->socket = s;
    if (local.empty() && options_.key.secure() && options_.sealed_lane) {
      net::HandshakeMonitor* monitor = monitor_.get();
      zmq_van_internal::OfferLane(
          c.get(), ctx_, host, options_.verbose,
          [monitor, conn](void* lane) {
            return monitor->Watch(lane, /*is_server=*/false,
                                  kLaneTagBase + conn);
          });
    }
  }
  std::lock_guard<std::mutex> lock(conns_mu_);
  auto it = conns_.find(conn);
  Conn* old = it == conns_.end() ? nullptr : it->second;
  conns_[conn] = c.get();
  all_conns_.push_back(std::move(c));
  if (old != nullptr) CloseConn(old, 0);
  return Status::OK();
}

void ZmqVan::Disconnect(int conn) {
  Conn* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    auto it = conns_.find(conn);
    if (it == conns_.end()) return;
    c = it->second;
    conns_.erase(it);
  }
  CloseConn(c, 0);
}

void ZmqVan::CloseConn(Conn* c, int linger_ms) {
  void* socket = nullptr;
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->closed = true;
    socket = c->socket;
    c->socket = nullptr;
    c->ring_backlog.clear();
    if (c->ring) c->ring->Close();
    zmq_van_internal::CloseLane(c, linger_ms);
  }
  // Outside c->mu: closing may release frames, whose callback takes it.
  if (socket != nullptr) {
    zmq_setsockopt(socket, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
    zmq_close(socket);
  }
}

ZmqVan::Conn* ZmqVan::FindConn(int conn) {
  std::lock_guard<std::mutex> lock(conns_mu_);
  auto it = conns_.find(conn);
  return it == conns_.end() ? nullptr : it->second;
}

StatusOr<bool> ZmqVan::RecvSocket(RawMessage* msg) {
  zmq_msg_t id;
  zmq_msg_init(&id);
  if (zmq_msg_recv(&id, router_, ZMQ_DONTWAIT) < 0) {
    const int err = zmq_errno();
    zmq_msg_close(&id);
    if (err == EAGAIN || err == EINTR) return false;
    return Status::Unavailable(std::string("receive: ") + zmq_strerror(err));
  }
  msg->token.assign(static_cast<const char*>(zmq_msg_data(&id)),
                    zmq_msg_size(&id));
  bool more = zmq_msg_more(&id);
  zmq_msg_close(&id);
  msg->frames.clear();
  msg->error = Status::OK();
  msg->same_host = false;
  msg->in_shm.clear();
  while (more) {
    auto holder = std::make_shared<net::ZmqFrame>();
    if (zmq_msg_recv(&holder->msg, router_, 0) < 0) {
      return Status::Unavailable("receive: " + ZmqError());
    }
    more = zmq_msg_more(&holder->msg);
    if (msg->frames.empty()) {
      // The connection it came on (the routing id the ROUTER adds has none).
      msg->same_host = net::IsUnixSocket(zmq_msg_get(&holder->msg, ZMQ_SRCFD));
    }
    const void* data = zmq_msg_data(&holder->msg);
    const size_t size = zmq_msg_size(&holder->msg);
    msg->frames.emplace_back(std::move(holder), data, size);
  }
  // No message of the transport starts with an empty frame but one whose
  // large frames lie in the sender's shared memory, or a ring's
  // announcement.
  if (msg->frames.size() >= 2 && msg->frames[0].empty() &&
      !net::IsRingHello(msg->frames[1].data(), msg->frames[1].size()) &&
      !IsLaneControl(msg->frames[1])) {
    // A peer over TCP (another host, or this one's) must not make this
    // node open this host's processes' memory.
    msg->error = msg->same_host
                     ? TakeShmFrames(msg)
                     : Status::InvalidArgument(
                           "a shared-memory table over TCP: only a peer on "
                           "the same-host socket may send one");
  }
  return true;
}

StatusOr<bool> ZmqVan::Recv(RawMessage* msg) {
  CHECK(router_ != nullptr) << "ZmqVan::Recv before Bind";
  StatusOr<bool> got = false;
  const auto deadline = Clock::now() + options_.poll_interval;
  // The lane and the other sources (the socket, the rings) take turns
  // going first, one message each, so that a busy lane cannot starve
  // heartbeats and answers on the socket, nor the other way round.
  auto take_ready = [&] {
    if (ready_msgs_.empty()) return false;
    *msg = std::move(ready_msgs_.front());
    ready_msgs_.pop_front();
    got = true;
    return true;
  };
  bool woken = false;  // the doorbell rang on the last pass
  for (;;) {
    lane_first_ = !lane_first_;
    if (lane_first_) {
      if (ready_msgs_.empty() && lane_ != nullptr) ReadLaneMessage();
      if (take_ready()) break;
    }
    // The rings and the socket take turns going first, so that a busy
    // same-host peer cannot starve the socket's (remote peers, announcements).
    // An announcement, or a message held for its mark, is taken in and
    // the loop goes on.
    socket_first_ = !socket_first_;
    bool taken_in = false;
    for (const bool socket : {socket_first_, !socket_first_}) {
      got = socket ? RecvSocket(msg) : RecvRing(msg);
      taken_in = socket && got.ok() && *got && OnSocketMessage(msg);
      if (taken_in || !got.ok() || *got) break;
    }
    if (taken_in) continue;
    if (!got.ok() || *got) break;
    const bool lane_read =
        ready_msgs_.empty() && lane_ != nullptr && ReadLaneMessage();
    if (take_ready()) break;
    if (lane_read) continue;  // a probe or a dropped message: look again
    // Rung and nothing came: Wake (a ring's message would be here).
    if (woken) return false;
    // Nothing: sleep on the socket and the doorbell, unless a ring's
    // writer got a message in before it could see this thread asleep.
    bool pending = false;
    for (RingIn& in : rings_) {
      if (in.marks == 0 && in.reader->Sleep()) pending = true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (!pending && left.count() > 0) {
      zmq_pollitem_t items[3] = {{router_, 0, ZMQ_POLLIN, 0},
                                 {nullptr, bell_read_, ZMQ_POLLIN, 0}};
      int n = 2;
      if (lane_ != nullptr) items[n++] = {lane_, 0, ZMQ_POLLIN, 0};
      zmq_poll(items, n, static_cast<long>(left.count()));
    }
    for (RingIn& in : rings_) in.reader->Awake();
    char drain[64];
    while (read(bell_read_, drain, sizeof(drain)) > 0) woken = true;
    if (!pending && left.count() <= 0) return false;
  }
  if (got.ok() && *got && trace::Enabled()) {
    int64_t bytes = 0;
    for (const Blob& b : msg->frames) bytes += static_cast<int64_t>(b.size());
    trace::Instant("van", "recv", "", bytes);
  }
  return got;
}

void ZmqVan::Wake() {
  if (bell_write_ >= 0) {
    const char b = 0;
    ssize_t n = write(bell_write_, &b, 1);  // a full pipe is awake already
    (void)n;
  }
}

bool ZmqVan::Idle() {
  std::lock_guard<std::mutex> lock(conns_mu_);
  for (auto& c : all_conns_) {
    std::lock_guard<std::mutex> l(c->mu);
    if (c->closed) continue;
    if (c->outbox.in_flight_messages() > 0 || c->outbox.queued() > 0 ||
        !c->ring_backlog.empty() || (c->ring != nullptr && !c->ring->Drained())) {
      return false;
    }
  }
  return true;
}

void ZmqVan::Flush(Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!Idle() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ZmqVan::Close(Duration linger) {
  if (closed_) return;
  closed_ = true;
  const auto deadline = Clock::now() + linger;
  if (linger > Duration::zero()) Flush(linger);
  {
    std::lock_guard<std::mutex> l(ready_mu_);
    stop_sender_ = true;
    ready_cv_.notify_all();
  }
  sender_.join();
  std::vector<Conn*> all;
  {
    std::lock_guard<std::mutex> lock(conns_mu_);
    for (auto& c : all_conns_) all.push_back(c.get());
    conns_.clear();
  }
  // What ZeroMQ has taken but not yet written (small messages are copied
  // into its batch buffer and released early) gets the rest of `linger`;
  // zmq_ctx_term below waits for it.
  const int left_ms = static_cast<int>(std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                               Clock::now())
             .count()));
  for (Conn* c : all) CloseConn(c, left_ms);
  if (router_ != nullptr) zmq_close(router_);
  router_ = nullptr;
  if (lane_ != nullptr) zmq_close(lane_);
  lane_ = nullptr;
  lanes_in_.clear();
  rings_.clear();
  ready_msgs_.clear();
  if (bell_read_ >= 0) close(bell_read_);
  if (bell_write_ >= 0) close(bell_write_);
  bell_read_ = bell_write_ = -1;
  // Their sockets must close before the context ends.
  monitor_.reset();
  zap_.reset();
  // Ends the io thread; frames still held are released (callbacks run)
  // before it returns, while every Conn is still alive.
  zmq_ctx_term(ctx_);
  ctx_ = nullptr;
}

}  // namespace ps
}  // namespace kvtrain
