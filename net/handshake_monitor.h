// HandshakeMonitor: watches the ZeroMQ handshakes (and, on connecting
// sockets, the connection drops) of a context's sockets and says why one
// failed, naming the peer's address.
#ifndef KVTRAIN_NET_HANDSHAKE_MONITOR_H_
#define KVTRAIN_NET_HANDSHAKE_MONITOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/env.h"
#include "base/thread_annotations.h"

namespace kvtrain {
namespace net {

// Watches the handshakes of a context's sockets (zmq_socket_monitor) on its
// own thread. On a bound socket every failed handshake is logged with the
// peer's address and the reason, rate-limited (a handshake refused by the
// ZapHandler is logged there instead), and beyond kMaxPendingHandshakes
// (net/curve.h) accepted connections in their handshake it closes
// strangers' (with CURVE: silent for 1 s, or without a WELCOME for 2 s,
// the oldest first; a key holder's connection, one whose HELLO the server
// answered, is never closed; without CURVE: the one silent for 1 s,
// else the newest). With CURVE, a connection that sends more than any HELLO
// before its WELCOME is closed at once. On a connecting socket each failure
// is reported to `on_refused` with the number of failures in a row (a
// successful handshake resets the count) and whether ZeroMQ gives the
// connection up: it reconnects after a peer closed the connection, but not
// after a protocol error (a mechanism mismatch, a refused key); a connection
// that was up and dropped is reported to `on_dropped`. Destroy before
// zmq_ctx_term.
// Thread-safe; `on_refused` runs on the monitor's thread.
class HandshakeMonitor {
 public:
  // tag: the caller's name for the socket (Watch); endpoint: the address it
  // connects to; why: a sentence for the user; in_a_row: >= 1; final: the
  // connection is given up (no more messages will ever pass on it).
  using RefusedFn =
      std::function<void(int tag, const std::string& endpoint,
                         const std::string& why, int in_a_row, bool final)>;
  // A connecting socket whose handshake had succeeded lost its connection
  // (the peer closed it or died): the input of net/liveness.h's drop rule.
  using DroppedFn = std::function<void(int tag)>;

  // `secure`: whether this process uses CURVE (words the reasons).
  // `clock`: how old a connection is, for the shedding rule (a test's
  // FakeClock; the monitor's own 50 ms looks keep real time).
  static std::unique_ptr<HandshakeMonitor> Start(void* zmq_context,
                                                 bool secure,
                                                 std::string log_name,
                                                 RefusedFn on_refused,
                                                 DroppedFn on_dropped = nullptr,
                                                 const Clock* clock = Clock::Real());
  ~HandshakeMonitor();

  // Call before the socket binds or connects. `is_server`: a bound socket.
  Status Watch(void* socket, bool is_server, int tag) EXCLUDES(mu_);
  // Prefix of later log lines (e.g. once the port is known).
  void SetLogName(std::string name) EXCLUDES(mu_);
  // Failed handshakes on bound sockets so far (logged or not).
  int64_t refused() const { return refused_.load(); }
  // Connections a bound socket closed because more than
  // kMaxPendingHandshakes (net/curve.h) were in their handshake.
  int64_t shed() const { return shed_.load(); }
  // Whether the monitor is waiting without a timeout (no connection in its
  // handshake): an idle node's monitor does not wake.
  bool asleep() const { return asleep_.load(); }

  struct Watched;  // one monitored socket (curve.cc)

 private:
  HandshakeMonitor(void* ctx, bool secure, std::string log_name,
                   RefusedFn on_refused, DroppedFn on_dropped, const Clock* clock);
  void Loop();
  void OnEvent(Watched* w, uint16_t event, uint32_t value,
               const std::string& endpoint);
  // Closes `w`'s connections that sent more than a HELLO before theirs was
  // answered, and strangers' while too many are in their handshake.
  // `look_at_all`: also those accepted less than 2 s ago (every 50 ms;
  // at each new connection only the older ones).
  void ShedPending(Watched* w, bool look_at_all);
  // Whether a connection on a watched server socket is in its handshake
  // (not admitted, not shed): then Loop looks every 50 ms.
  bool AnyUnsettled() const;
  void WakeLocked() REQUIRES(mu_);

  void* ctx_;
  const bool secure_;
  const Clock* const clock_;
  const RefusedFn on_refused_;
  const DroppedFn on_dropped_;
  std::mutex mu_;
  std::string log_name_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Watched>> added_ GUARDED_BY(mu_);
  // Wakes Loop (a new socket to watch, or stop): Loop sleeps without a
  // timeout while no connection is in its handshake, so an idle node's
  // monitor does not wake.
  void* wake_out_ GUARDED_BY(mu_) = nullptr;
  void* wake_in_ = nullptr;  // Loop's
  int next_id_ GUARDED_BY(mu_) = 0;
  // Owned by Loop's thread.
  std::vector<std::unique_ptr<Watched>> watched_;
  LogRateLimiter log_limiter_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> shed_{0};
  std::atomic<bool> asleep_{false};
  std::thread thread_;
};

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_HANDSHAKE_MONITOR_H_
