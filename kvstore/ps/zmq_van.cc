// ZmqVan: zero-copy ZeroMQ transport with per-connection priority backlog.
#include "kvstore/ps/zmq_van.h"

#include "base/trace.h"
#include "net/same_host.h"
#include "net/zmq_error.h"
#include "net/zmq_frame.h"

#include <glog/logging.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvtrain {
namespace ps {

struct ZmqVan::Conn {
  explicit Conn(int64_t window) : outbox(window) {}
  std::mutex mu;
  void* socket GUARDED_BY(mu) = nullptr;
  Outbox outbox GUARDED_BY(mu);
  bool closed GUARDED_BY(mu) = false;
  std::string endpoint;
  ZmqVan* van = nullptr;
  // Over the same-host socket, to a peer in our PID namespace: its frames
  // may go through shared memory.
  bool shm_ok = false;
  std::unique_ptr<net::ShmArena> shm GUARDED_BY(mu);
  bool shm_failed GUARDED_BY(mu) = false;
};

namespace {

using net::ZmqError;

// What a sent frame's release callback holds: the frame's storage and, for
// the last frame of a message, the connection whose window it occupies.
struct FrameHold {
  Blob blob;
  ZmqVan::Conn* conn = nullptr;
  int64_t msg_bytes = 0;
};


}  // namespace

void ReleaseFrame(void* /*data*/, void* hint) {
  auto* hold = static_cast<FrameHold*>(hint);
  if (hold->conn != nullptr) {
    hold->conn->van->OnReleased(hold->conn, hold->msg_bytes);
  }
  delete hold;
}

namespace {

// Sends one message's frames; the caller holds c->mu. Frames zmq refused
// are appended to *unsent, to be closed after c->mu is released (closing
// runs the release callback, which takes c->mu).
Status SendFrames(void* socket, ZmqVan::Conn* c, OutMessage* m,
                  std::vector<zmq_msg_t>* unsent) {
  Status status;
  const size_t n = m->frames.size();
  for (size_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    Blob& b = m->frames[i];
    auto* hold =
        new FrameHold{std::move(b), last ? c : nullptr, last ? m->bytes : 0};
    zmq_msg_t msg;
    const Status init = net::InitZeroCopy(&msg, hold->blob.data(),
                                          hold->blob.size(), ReleaseFrame, hold);
    if (!init.ok()) {
      // Cannot happen short of memory exhaustion; accounted as released.
      zmq_msg_close(&msg);
      status = init;
      continue;
    }
    if (!status.ok()) {
      unsent->push_back(msg);
      continue;
    }
    if (zmq_msg_send(&msg, socket, last ? 0 : ZMQ_SNDMORE) < 0) {
      status =
          Status::Unavailable("send to " + c->endpoint + ": " + ZmqError());
      unsent->push_back(msg);
    }
  }
  return status;
}

void CloseUnsent(std::vector<zmq_msg_t>* unsent) {
  for (zmq_msg_t& m : *unsent) zmq_msg_close(&m);
  unsent->clear();
}

}  // namespace

StatusOr<std::unique_ptr<ZmqVan>> ZmqVan::Create(std::string token,
                                                 const ZmqVanOptions& options) {
  net::RaiseFileLimit();
  void* ctx = zmq_ctx_new();
  if (ctx == nullptr) return Status::Internal("zmq_ctx_new: " + ZmqError());
  zmq_ctx_set(ctx, ZMQ_IO_THREADS, 1);
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
        HandshakeFailureHandler h;
        {
          std::lock_guard<std::mutex> l(self->handler_mu_);
          h = self->on_handshake_failure_;
        }
        if (h) h(conn, endpoint, why, in_a_row, final);
      },
      [self](int conn) {
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
  const int timeout_ms =
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                           options_.poll_interval)
                           .count());
  const int zero = 0;
  zmq_setsockopt(router_, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
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
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->socket = s;
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

Status ZmqVan::Send(int conn, int priority, std::vector<Blob> frames) {
  Conn* c = FindConn(conn);
  if (c == nullptr) {
    return Status::Unavailable("no connection " + std::to_string(conn));
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].size() > static_cast<size_t>(net::kMaxFramePayloadBytes)) {
      return Status::InvalidArgument(
          "send to " + c->endpoint + ": frame " + std::to_string(i) + " holds " +
          std::to_string(frames[i].size()) + " bytes, above the " +
          std::to_string(net::kMaxFramePayloadBytes) +
          " a receiver accepts (EncodeMessage carries larger data in pieces)");
    }
  }
  OutMessage m;
  m.priority = priority;
  for (const Blob& b : frames) m.bytes += static_cast<int64_t>(b.size());
  trace::Scope span("van", "send ", c->endpoint, m.bytes);
  m.frames = std::move(frames);
  std::vector<zmq_msg_t> unsent;
  Status status;
  {
    std::lock_guard<std::mutex> l(c->mu);
    if (c->closed)
      return Status::Unavailable("connection to " + c->endpoint + " is closed");
    if (c->shm_ok) PlaceInShm(c, &m);
    if (c->outbox.Offer(&m)) status = SendFrames(c->socket, c, &m, &unsent);
  }
  CloseUnsent(&unsent);
  return status;
}

void ZmqVan::PlaceInShm(Conn* c, OutMessage* m) {
  net::ShmRef arena;
  std::vector<net::ShmPlaced> placed;
  for (size_t i = 0; i < m->frames.size(); ++i) {
    Blob& b = m->frames[i];
    if (b.size() < kShmMinFrameBytes) continue;
    if (c->shm == nullptr) {
      if (c->shm_failed) return;
      StatusOr<std::unique_ptr<net::ShmArena>> a = net::ShmArena::Create(
          static_cast<uint64_t>(options_.shm_bytes));
      if (!a.ok()) {
        c->shm_failed = true;
        LOG(WARNING) << "no shared memory for " << c->endpoint << " ("
                     << a.status().message() << "); its frames go through the socket";
        return;
      }
      c->shm = std::move(*a);
    }
    net::ShmRef ref;
    if (!c->shm->Put(b.data(), b.size(), &ref)) continue;  // full: the socket
    arena = ref;
    placed.push_back({static_cast<uint32_t>(i), ref.offset, ref.size});
    b = Blob();
  }
  if (placed.empty()) return;
  std::vector<Blob> frames;
  frames.reserve(m->frames.size() + 2);
  frames.emplace_back();
  frames.push_back(Blob::FromString(net::EncodeShmTable(arena, placed)));
  for (Blob& b : m->frames) frames.push_back(std::move(b));
  m->frames = std::move(frames);
  m->bytes = 0;
  for (const Blob& b : m->frames) m->bytes += static_cast<int64_t>(b.size());
  shm_frames_sent_ += static_cast<int64_t>(placed.size());
}

Status ZmqVan::TakeShmFrames(std::vector<Blob>* frames) {
  net::ShmRef arena;
  std::vector<net::ShmPlaced> placed;
  KV_RETURN_IF_ERROR(net::DecodeShmTable((*frames)[1].data(), (*frames)[1].size(), &arena,
                                         &placed));
  frames->erase(frames->begin(), frames->begin() + 2);
  for (const net::ShmPlaced& p : placed) {
    if (p.frame >= frames->size() || !(*frames)[p.frame].empty()) {
      return Status::InvalidArgument("shared-memory table names frame " +
                                     std::to_string(p.frame) + ", which is not an empty frame of " +
                                     std::to_string(frames->size()));
    }
    net::ShmRef ref = arena;
    ref.offset = p.offset;
    ref.size = p.size;
    KV_ASSIGN_OR_RETURN(net::ShmMaps::View v, shm_maps_.Open(ref));
    (*frames)[p.frame] = Blob(std::move(v.owner), v.data, v.size);
  }
  return Status::OK();
}

void ZmqVan::OnReleased(Conn* c, int64_t bytes) {
  bool ready;
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->outbox.Released(bytes);
    ready = !c->closed && c->outbox.HasReady();
  }
  if (ready) {
    std::lock_guard<std::mutex> l(ready_mu_);
    ready_.insert(c);
    ready_cv_.notify_one();
  }
}

void ZmqVan::SenderLoop() {
  for (;;) {
    Conn* c = nullptr;
    {
      std::unique_lock<std::mutex> l(ready_mu_);
      ready_cv_.wait(l, [this] { return stop_sender_ || !ready_.empty(); });
      if (ready_.empty()) return;
      c = *ready_.begin();
      ready_.erase(ready_.begin());
    }
    std::vector<zmq_msg_t> unsent;
    {
      std::lock_guard<std::mutex> l(c->mu);
      OutMessage m;
      while (!c->closed && c->outbox.Next(&m)) {
        Status s = SendFrames(c->socket, c, &m, &unsent);
        LOG_IF(WARNING, !s.ok()) << s;
      }
    }
    CloseUnsent(&unsent);
  }
}

StatusOr<bool> ZmqVan::Recv(RawMessage* msg) {
  CHECK(router_ != nullptr) << "ZmqVan::Recv before Bind";
  zmq_msg_t id;
  zmq_msg_init(&id);
  if (zmq_msg_recv(&id, router_, 0) < 0) {
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
  while (more) {
    auto holder = std::make_shared<net::ZmqFrame>();
    if (zmq_msg_recv(&holder->msg, router_, 0) < 0) {
      return Status::Unavailable("receive: " + ZmqError());
    }
    more = zmq_msg_more(&holder->msg);
    const void* data = zmq_msg_data(&holder->msg);
    const size_t size = zmq_msg_size(&holder->msg);
    msg->frames.emplace_back(std::move(holder), data, size);
  }
  // No message of the transport starts with an empty frame but one whose
  // large frames lie in the sender's shared memory.
  if (msg->frames.size() >= 2 && msg->frames[0].empty()) {
    msg->error = TakeShmFrames(&msg->frames);
  }
  if (trace::Enabled()) {
    int64_t bytes = 0;
    for (const Blob& b : msg->frames) bytes += static_cast<int64_t>(b.size());
    trace::Instant("van", "recv", "", bytes);
  }
  return true;
}

bool ZmqVan::Idle() {
  std::lock_guard<std::mutex> lock(conns_mu_);
  for (auto& c : all_conns_) {
    std::lock_guard<std::mutex> l(c->mu);
    if (c->closed) continue;
    if (c->outbox.in_flight_messages() > 0 || c->outbox.queued() > 0) {
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
