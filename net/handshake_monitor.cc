// HandshakeMonitor: failed ZeroMQ handshakes, logged with the peer's
// address (bound sockets) or reported to the owner (connecting sockets).
#include "net/handshake_monitor.h"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "net/curve.h"

namespace kvtrain {
namespace net {
namespace {

// A connection that has sent nothing this long after it was accepted is
// not a ZeroMQ peer (one sends its greeting's signature at once; this
// leaves room for a peer whose threads wait for a core in a large job's
// start on a small host: at 1 s, a peer among 64 starting at once in one
// process on 2 busy cores was shed). Longer than kStrangerAfter: a silent
// connection holds nothing, and a starved peer's is silent.
constexpr auto kSilentAfter = std::chrono::seconds(3);
// A connection not admitted this long after it was accepted is a
// stranger's: a peer with the key has its HELLO answered within two round
// trips, and this leaves room for a node slowed by a job's start.
constexpr auto kStrangerAfter = std::chrono::seconds(2);
// What a bound socket sends before it has admitted a HELLO: its ZMTP 3.x
// greeting. A CURVE server answers a HELLO that opens with a WELCOME, a
// PLAIN server (a sealed lane) one whose token its ZapHandler admits: past
// these bytes, the peer holds the key (or a lane's token).
constexpr int64_t kGreetingBytes = 64;
// The most a peer sends before the server's WELCOME: its greeting and a
// HELLO (CURVE's is 200 bytes, PLAIN's at most 520). A connection past this
// that has had no WELCOME is declaring a command no HELLO needs, into which
// ZeroMQ would buffer up to kMaxFrameBytes: it is closed at once.
constexpr int64_t kMaxHelloBytes = 1024;
// What a key holder has sent while it waits for the server's WELCOME: its
// greeting and its HELLO, exactly (a client sends nothing more before the
// WELCOME). CURVE's HELLO is a 200-byte command (2 bytes of frame header);
// a lane's PLAIN HELLO carries net::kLaneUser and a 32-character token.
constexpr int64_t kCurveHelloEnd = kGreetingBytes + 2 + 200;
constexpr int64_t kLaneHelloEnd =
    kGreetingBytes + 2 + 6 + 1 + (sizeof(kLaneUser) - 1) + 1 + 32;

}  // namespace

struct HandshakeMonitor::Watched {
  void* pair = nullptr;  // receives the socket's events
  bool is_server = false;
  int tag = 0;
  // Server: every open accepted connection by file descriptor, from
  // ZMQ_EVENT_ACCEPTED to ZMQ_EVENT_DISCONNECTED.
  struct Accepted {
    std::string peer;
    std::chrono::steady_clock::time_point at;
    bool shed = false;  // shut down by us; its DISCONNECTED is due
    bool admitted = false;  // its HELLO was answered: never looked at again
  };
  std::map<uint32_t, Accepted> peers;
  // Server: how many of them completed their handshake. ZeroMQ does not
  // say which (the event names no descriptor), but a connection that ends
  // during its handshake always reports a failure just before its
  // ZMQ_EVENT_DISCONNECTED (one I/O thread: nothing comes between), so each
  // DISCONNECTED without one was an established connection.
  int64_t established = 0;
  // Server: the reason of a failure whose ZMQ_EVENT_DISCONNECTED (which
  // names the descriptor) comes next; "" = none (or logged elsewhere).
  std::string failed;
  bool handshake_failed = false;
  // Client: failures in a row; whether the connection is up.
  int in_a_row = 0;
  bool up = false;
};

namespace {

// Bytes the connection on `fd` has received (TCP only; -1 otherwise).
int64_t BytesReceived(uint32_t fd) {
  tcp_info info;
  socklen_t len = sizeof(info);
  std::memset(&info, 0, sizeof(info));
  if (getsockopt(static_cast<int>(fd), IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) {
    return -1;
  }
  return static_cast<int64_t>(info.tcpi_bytes_received);
}

// Bytes the connection on `fd` has sent (TCP only; -1 otherwise).
int64_t BytesSent(uint32_t fd) {
  tcp_info info;
  socklen_t len = sizeof(info);
  std::memset(&info, 0, sizeof(info));
  if (getsockopt(static_cast<int>(fd), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) {
    return -1;
  }
  if (len >= offsetof(tcp_info, tcpi_bytes_sent) + sizeof(info.tcpi_bytes_sent)) {
    return static_cast<int64_t>(info.tcpi_bytes_sent);
  }
  if (len >= offsetof(tcp_info, tcpi_bytes_acked) + sizeof(info.tcpi_bytes_acked)) {
    return static_cast<int64_t>(info.tcpi_bytes_acked);
  }
  return -1;
}

std::string PeerAddress(uint32_t fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss),
                  &len) != 0) {
    return "an address that closed too soon to be read";
  }
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);  // NOLINT
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Why a bound socket's handshake failed, said of the peer.
std::string ServerReason(uint16_t event, uint32_t value, bool secure) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
    return secure ? "it closed the connection during the handshake (as a peer "
                    "without CURVE or without this job's key does)"
                  : "it closed the connection during the handshake";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return secure ? "it does not use CURVE (it has no job key, or runs with " +
                        std::string(env::kInsecure) + "=1)"
                  : "it uses CURVE but this process runs with " +
                        std::string(env::kInsecure) + "=1";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return "its CURVE handshake is not made with this job's key";
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%08x", value);
  return std::string("not a valid ZeroMQ handshake (protocol error ") + buf +
         ")";
}

// Why a connecting socket's handshake failed, said of the server.
std::string ClientReason(uint16_t event, uint32_t value, bool secure,
                         const std::string& endpoint) {
  // The same-host socket has no CURVE: a peer there that closes during the
  // handshake is busy past the handshake deadline, or gone, not keyless.
  if (endpoint.rfind("ipc://", 0) == 0 &&
      event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
    return "it closed the connection during the handshake on the same-host "
           "socket (it is gone, or too busy to finish within " +
           std::to_string(kHandshakeDeadlineMs / 1000) + " s)";
  }
  const std::string other_key =
      "it does not accept this process's job key (" +
      std::string(env::kJobKey) + "/" + env::kJobKeyFile +
      "); is it another job's node?";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return other_key;
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ||
      (!secure && event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)) {
    return secure ? "it does not use CURVE (it runs with " +
                        std::string(env::kInsecure) + "=1)"
                  : "it requires CURVE but this process runs with " +
                        std::string(env::kInsecure) + "=1";
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
      value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return "it closed the connection during the CURVE handshake: " + other_key;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%08x", value);
  return std::string("the handshake failed (protocol error ") + buf + ")";
}

}  // namespace

std::unique_ptr<HandshakeMonitor> HandshakeMonitor::Start(
    void* ctx, bool secure, std::string log_name, RefusedFn on_refused,
    DroppedFn on_dropped, const Clock* clock) {
  return std::unique_ptr<HandshakeMonitor>(
      new HandshakeMonitor(ctx, secure, std::move(log_name),
                           std::move(on_refused), std::move(on_dropped), clock));
}

HandshakeMonitor::HandshakeMonitor(void* ctx, bool secure,
                                   std::string log_name, RefusedFn on_refused,
                                   DroppedFn on_dropped, const Clock* clock)
    : ctx_(ctx),
      secure_(secure),
      clock_(clock),
      on_refused_(std::move(on_refused)),
      on_dropped_(std::move(on_dropped)),
      log_name_(std::move(log_name)),
      log_limiter_(10, std::chrono::seconds(10)) {
  char endpoint[96];
  std::snprintf(endpoint, sizeof(endpoint), "inproc://kvtrain-handshake-wake-%p",
                static_cast<void*>(this));
  const int zero = 0;
  wake_in_ = zmq_socket(ctx_, ZMQ_PAIR);
  wake_out_ = zmq_socket(ctx_, ZMQ_PAIR);
  for (void* s : {wake_in_, wake_out_}) {
    if (s != nullptr) zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  }
  CHECK(wake_in_ != nullptr && wake_out_ != nullptr && zmq_bind(wake_in_, endpoint) == 0 &&
        zmq_connect(wake_out_, endpoint) == 0)
      << "handshake monitor: " << zmq_strerror(zmq_errno());
  thread_ = std::thread([this] { Loop(); });
}

HandshakeMonitor::~HandshakeMonitor() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_.store(true);
    WakeLocked();
  }
  thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto* list : {&watched_, &added_}) {
    for (auto& w : *list) zmq_close(w->pair);
    list->clear();
  }
  zmq_close(wake_out_);
  zmq_close(wake_in_);
}

void HandshakeMonitor::WakeLocked() {
  // One byte is enough: Loop drains them all.
  zmq_send(wake_out_, "", 0, ZMQ_DONTWAIT);
}

bool HandshakeMonitor::AnyUnsettled() const {
  for (const auto& w : watched_) {
    if (!w->is_server) continue;
    for (const auto& [fd, a] : w->peers) {
      if (!a.shed && !a.admitted) return true;
    }
  }
  return false;
}

void HandshakeMonitor::SetLogName(std::string name) {
  std::lock_guard<std::mutex> l(mu_);
  log_name_ = std::move(name);
}

Status HandshakeMonitor::Watch(void* socket, bool is_server, int tag) {
  std::lock_guard<std::mutex> l(mu_);
  char endpoint[96];
  std::snprintf(endpoint, sizeof(endpoint), "inproc://kvtrain-handshake-%p-%d",
                static_cast<void*>(this), next_id_++);
  const int events =
      ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
      ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
      ZMQ_EVENT_MONITOR_STOPPED;
  if (zmq_socket_monitor(socket, endpoint, events) != 0) {
    return Status::Internal(std::string("zmq_socket_monitor: ") +
                            zmq_strerror(zmq_errno()));
  }
  auto w = std::make_unique<Watched>();
  w->pair = zmq_socket(ctx_, ZMQ_PAIR);
  const int zero = 0;
  zmq_setsockopt(w->pair, ZMQ_LINGER, &zero, sizeof(zero));
  if (w->pair == nullptr || zmq_connect(w->pair, endpoint) != 0) {
    const std::string err = zmq_strerror(zmq_errno());
    if (w->pair != nullptr) zmq_close(w->pair);
    zmq_socket_monitor(socket, nullptr, 0);
    return Status::Internal("handshake monitor: " + err);
  }
  w->is_server = is_server;
  w->tag = tag;
  added_.push_back(std::move(w));
  WakeLocked();
  return Status::OK();
}

void HandshakeMonitor::Loop() {
  std::vector<zmq_pollitem_t> items;
  auto last_look = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& w : added_) watched_.push_back(std::move(w));
      added_.clear();
    }
    // The watched sockets' event pairs, then the wake-up pair (last).
    items.assign(watched_.size() + 1, zmq_pollitem_t{});
    for (size_t i = 0; i < watched_.size(); ++i) {
      items[i].socket = watched_[i]->pair;
      items[i].events = ZMQ_POLLIN;
    }
    items.back().socket = wake_in_;
    items.back().events = ZMQ_POLLIN;
    // While a connection is in its handshake, a look every 50 ms, events or
    // not: one sending more than a HELLO goes now, and strangers that have
    // waited long enough go now, not at the next connection. Otherwise
    // nothing is due until an event comes.
    const bool unsettled = AnyUnsettled();
    asleep_.store(!unsettled);
    const int ready = zmq_poll(items.data(), static_cast<int>(items.size()), unsettled ? 50 : -1);
    asleep_.store(false);
    if (ready > 0 && (items.back().revents & ZMQ_POLLIN)) {
      char drain;
      while (zmq_recv(wake_in_, &drain, sizeof(drain), ZMQ_DONTWAIT) >= 0) {
      }
    }
    items.pop_back();
    const auto now = std::chrono::steady_clock::now();
    if (unsettled && now - last_look >= std::chrono::milliseconds(50)) {
      last_look = now;
      for (auto& w : watched_) {
        if (w->is_server) ShedPending(w.get(), /*look_at_all=*/true);
      }
    }
    if (ready <= 0) continue;
    std::vector<size_t> stopped;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      std::vector<std::string> frames;
      while (true) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, watched_[i]->pair, ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&m);
          break;
        }
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)),
                            zmq_msg_size(&m));
        const bool more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (more) continue;
        if (frames.size() == 2 && frames[0].size() == 6) {
          uint16_t event;
          uint32_t value;
          std::memcpy(&event, frames[0].data(), 2);
          std::memcpy(&value, frames[0].data() + 2, 4);
          if (event == ZMQ_EVENT_MONITOR_STOPPED) {
            stopped.push_back(i);
          } else {
            OnEvent(watched_[i].get(), event, value, frames[1]);
          }
        }
        frames.clear();
      }
    }
    // A closed socket's monitor is done: drop it (last first).
    for (auto it = stopped.rbegin(); it != stopped.rend(); ++it) {
      zmq_close(watched_[*it]->pair);
      watched_.erase(watched_.begin() + *it);
    }
  }
}

void HandshakeMonitor::ShedPending(Watched* w, bool look_at_all) {
  // Connections in their handshake: open, not established, not yet shed.
  int64_t pending = -w->established;
  for (const auto& [fd, a] : w->peers) pending += a.shed ? 0 : 1;
  // Who may be shed. With CURVE (and a lane's PLAIN), a connection the
  // server has sent more than its greeting has had its HELLO admitted: it
  // holds the key (or a lane's token) and is never shed. One that has not,
  // yet sent more than any HELLO, is declaring a command into which ZeroMQ
  // would buffer: it goes at once, however few are pending. Beyond
  // kMaxPendingHandshakes, a connection silent for kSilentAfter, or not
  // admitted after kStrangerAfter, is a stranger's (a peer with the key
  // gets its WELCOME within two round trips): such connections are shed,
  // the silent ones first, then the oldest. So however many strangers
  // wait, and however many peers connect at once, a peer with the key is
  // never shed. Without CURVE, where anyone may connect, silent connections
  // go first, else the newest. Shutting a descriptor down makes ZeroMQ
  // close the connection as if the peer had.
  const auto now = clock_->Now();
  struct Candidate {
    bool silent;
    std::chrono::steady_clock::time_point at;
    uint32_t fd;
    int64_t got;
  };
  std::vector<Candidate> candidates;
  std::vector<std::pair<uint32_t, std::string>> victims;
  for (auto& [fd, a] : w->peers) {
    if (a.shed || a.admitted) continue;
    // At a new connection only those old enough to be shed are looked at
    // (a burst of connections costs no more than its events).
    if (!look_at_all && now - a.at < std::min<std::chrono::steady_clock::duration>(
                                          kSilentAfter, kStrangerAfter)) {
      continue;
    }
    const int64_t got = BytesReceived(fd);
    if (got < 0) {
      // Not TCP (the same-host socket, reachable only through the job's
      // private directory) or already gone: nothing to measure, never shed.
      a.admitted = true;
      continue;
    }
    if (secure_) {
      const int64_t sent = BytesSent(fd);
      if (sent < 0 || sent > kGreetingBytes) {
        a.admitted = true;
        continue;
      }
      if (got > kMaxHelloBytes) {
        victims.emplace_back(fd, "it sent " + std::to_string(got) +
                                     " bytes without a handshake, more than "
                                     "any HELLO");
        continue;
      }
      // Its HELLO is in and the server has yet to answer it (a node busy
      // in a large job's start): a key holder's, never shed.
      if (got == kCurveHelloEnd || got == kLaneHelloEnd) continue;
    } else if (got > 0) {
      a.admitted = true;  // without CURVE only silence marks a stranger
      continue;
    }
    if (pending <= kMaxPendingHandshakes) continue;
    const bool silent = got == 0;
    if (now - a.at < (silent ? kSilentAfter : kStrangerAfter)) continue;
    candidates.push_back(Candidate{silent, a.at, fd, got});
  }
  pending -= static_cast<int64_t>(victims.size());
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& x, const Candidate& y) {
    return x.silent != y.silent ? x.silent : x.at < y.at;
  });
  const std::string too_many = "more than " +
                               std::to_string(kMaxPendingHandshakes) +
                               " connections are in their handshake";
  size_t excess = pending > kMaxPendingHandshakes
                      ? static_cast<size_t>(pending - kMaxPendingHandshakes)
                      : 0;
  for (const Candidate& c : candidates) {
    if (excess == 0) break;
    victims.emplace_back(
        c.fd, too_many + " (it sent " + std::to_string(c.got) + " bytes in " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     now - c.at)
                                     .count()) +
                  " ms)");
    --excess;
  }
  if (excess > 0 && !secure_ && candidates.empty()) {
    uint32_t newest = 0;
    bool found = false;
    for (const auto& [fd, a] : w->peers) {
      if (!a.shed && (!found || a.at > w->peers[newest].at)) {
        newest = fd;
        found = true;
      }
    }
    if (found) victims.emplace_back(newest, too_many);
  }
  if (victims.empty()) return;
  std::string name;
  {
    std::lock_guard<std::mutex> l(mu_);
    name = log_name_;
  }
  for (const auto& [fd, why] : victims) {
    Watched::Accepted& a = w->peers[fd];
    if (a.shed) continue;
    a.shed = true;
    shed_.fetch_add(1);
    shutdown(static_cast<int>(fd), SHUT_RDWR);
    KV_LOG_LIMITED(WARNING, log_limiter_)
        << name << ": closed a connection from " << a.peer << ": " << why;
  }
}

void HandshakeMonitor::OnEvent(Watched* w, uint16_t event, uint32_t value,
                               const std::string& endpoint) {
  const bool failure = event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
                       event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                       event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (!w->is_server) {
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      w->in_a_row = 0;
      w->up = true;
    } else if (event == ZMQ_EVENT_DISCONNECTED && w->up) {
      w->up = false;
      if (on_dropped_) on_dropped_(w->tag);
    }
    if (failure && on_refused_) {
      on_refused_(w->tag, endpoint, ClientReason(event, value, secure_, endpoint),
                  ++w->in_a_row,
                  event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
    }
    return;
  }
  if (event == ZMQ_EVENT_ACCEPTED) {
    w->peers[value] = {PeerAddress(value), clock_->Now()};
    ShedPending(w, /*look_at_all=*/false);
  } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
    ++w->established;
  } else if (failure) {
    w->handshake_failed = true;
    refused_.fetch_add(1);
    // ZapHandler logs its own refusals (with the address it was given).
    w->failed = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                    ? ""
                    : ServerReason(event, value, secure_);
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    auto it = w->peers.find(value);
    const std::string peer =
        it == w->peers.end() ? "an address that closed too soon to be read"
                             : it->second.peer;
    if (it != w->peers.end()) {
      w->peers.erase(it);
      if (!w->handshake_failed && w->established > 0) --w->established;
    }
    w->handshake_failed = false;
    if (!w->failed.empty()) {
      std::string name;
      {
        std::lock_guard<std::mutex> l(mu_);
        name = log_name_;
      }
      KV_LOG_LIMITED(WARNING, log_limiter_)
          << name << ": refused a connection from " << peer << ": "
          << w->failed;
    }
    w->failed.clear();
  }
}

}  // namespace net
}  // namespace kvtrain
