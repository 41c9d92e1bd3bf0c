// CURVE security for kvtrain's ZeroMQ sockets: the job's key, how a socket is
// secured with it, and the ZAP handler that admits only holders of the key.
// Any owner of ZeroMQ sockets (the parameter-server Van, collective
// communicators) secures them through this header.
//
// Scheme: one CURVE key pair per job. Every process holds the job's secret
// key (KVTRAIN_JOB_KEY or KVTRAIN_JOB_KEY_FILE) and derives the public key.
// Bound sockets are CURVE servers with the job's secret key; connecting
// sockets are CURVE clients that expect the job's public key as the server's
// and present the job's key pair as their own. A ZapHandler on each context
// admits a client only when its public key is the job's. A peer without the
// secret key cannot complete a handshake, so it can neither send nor
// receive a single message.
#ifndef KVTRAIN_NET_CURVE_H_
#define KVTRAIN_NET_CURVE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/logging.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace kvtrain {
namespace net {

// The job's CURVE key pair, or "insecure" (KVTRAIN_INSECURE=1). Copyable.
class JobKey {
 public:
  // Insecure: sockets stay plain ZeroMQ (NULL mechanism).
  JobKey() = default;

  // A key pair from the Z85 text (40 characters) of a CURVE secret key;
  // `source` names where the text came from, for errors (never the text).
  static StatusOr<JobKey> FromSecretZ85(const std::string& z85,
                                        const std::string& source);
  // A fresh random key pair (tests, benchmarks).
  static JobKey Generate();
  static JobKey Insecure() { return JobKey(); }

  // The process's key, from its environment:
  //  - KVTRAIN_INSECURE=1: insecure (a warning is logged once per process);
  //  - else KVTRAIN_JOB_KEY (Z85 text);
  //  - else KVTRAIN_JOB_KEY_FILE: a file holding the Z85 text (surrounding
  //    whitespace ignored) whose mode must not give the group or others any
  //    access (0600 or stricter), else an error naming the file and mode;
  //  - neither: an error telling the user to set one or KVTRAIN_INSECURE=1.
  // Also an error when this libzmq lacks CURVE (zmq_has("curve")).
  static StatusOr<JobKey> FromEnv(const EnvLookup& env);

  bool secure() const { return !secret_z85_.empty(); }
  // Z85 text, 40 characters each; empty when insecure.
  const std::string& secret_z85() const { return secret_z85_; }
  const std::string& public_z85() const { return public_z85_; }
  // A short name of the key that is safe to log: the first 8 characters of
  // the public key ("insecure" when insecure).
  std::string Fingerprint() const;

 private:
  std::string secret_z85_;
  std::string public_z85_;
};

// Z85 (ZeroMQ RFC 32) of `bytes`, whose size must be a multiple of 4, and
// back; Decode fails on bad text. Exposed for tests and tools.
std::string Z85Encode(const std::string& bytes);
StatusOr<std::string> Z85Decode(const std::string& text);

// Secures one ZeroMQ socket with the job's key before it binds or connects.
// `is_server`: true for a socket that binds (a CURVE server: ZMQ_CURVE_SERVER
// and the job's secret key), false for one that connects (a CURVE client:
// ZMQ_CURVE_SERVERKEY = the job's public key, and the job's key pair as its
// own). An insecure key leaves the socket unchanged. A server socket's
// context should have a ZapHandler so that only the job's key is admitted.
Status SecureSocket(void* zmq_socket, const JobKey& key, bool is_server);

// What a peer, authenticated or not, can make a node hold. Every socket that
// accepts connections gets LimitInbound before it binds.
// The most data a sender puts in one frame: larger arrays travel in several
// frames of at most this.
inline constexpr int64_t kMaxFramePayloadBytes = int64_t{4} << 20;
// The largest frame any socket receives (the payload plus room for CURVE's
// per-frame envelope, about 40 bytes): a larger declared frame closes the
// connection at its size header, before anything is buffered (ZeroMQ
// otherwise buffers a declared frame, of any size, before the handshake
// completes).
inline constexpr int64_t kMaxFrameBytes = kMaxFramePayloadBytes + 1024;
// A connection must complete its handshake within this (ZMQ_HANDSHAKE_IVL).
inline constexpr int kHandshakeDeadlineMs = 10000;
// At most this many accepted connections may be in their handshake at once
// per bound socket (HandshakeMonitor sheds strangers' beyond it; with
// CURVE, a key holder's connection is never shed). With CURVE a stranger's
// connection holds at most a HELLO's bytes (1 KiB): one that sends more
// before its HELLO is admitted is closed at the monitor's next look, within
// 50 ms, so what it can buffer meanwhile is bounded by kMaxFrameBytes and
// by what it can send in that time.
inline constexpr int kMaxPendingHandshakes = 32;
Status LimitInbound(void* zmq_socket);

// The receiving socket of a sealed lane (net/seal.h): a ROUTER without
// CURVE (every message on it must open under a key given over CURVE),
// bound on every interface at a free port (*port), with LimitInbound.
// A connection to it is admitted only with a lane's token (ZeroMQ's PLAIN
// mechanism, user kLaneUser, password net::LaneToken of a key the node was
// given over CURVE and told its ZapHandler of, AllowLane): ZeroMQ reads no
// message from a connection before its handshake is admitted, so a
// stranger can make the lane hold no more than any CURVE socket's
// handshake. `before_bind` (may be null) runs on the socket before it binds
// (a HandshakeMonitor's Watch). The context must have a ZapHandler.
inline constexpr char kLaneUser[] = "kvtrain-lane";
inline constexpr char kLaneZapDomain[] = "kvtrain-lane";
StatusOr<void*> BindLaneSocket(void* zmq_context, int* port,
                               const std::function<Status(void*)>& before_bind);
// Makes a connecting socket present the token of the lane keyed `key`
// (net::LaneToken) to the peer's lane socket; call before it connects.
Status SecureLaneClient(void* zmq_socket, const std::string& key);

// Raises this process's soft limit on open files to its hard limit (at
// most 65536), once: descriptors are what a flood of connections uses up.
void RaiseFileLimit();

// Lets a ZeroMQ context hold as many sockets as this process may open
// files (ZeroMQ's default is 1,023: a node of a 1,024-node job needs more,
// a sending socket and a monitor per peer). Call right after zmq_ctx_new.
void SizeContext(void* ctx);

// The ZAP handler of one ZeroMQ context (RFC 27, inproc://zeromq.zap.01):
// a thread that admits a CURVE client only when its public key is the job's
// and logs every refusal with the peer's address, rate-limited. Start it
// before securing the context's first server socket; destroy it before
// zmq_ctx_term. Thread-safe.
class ZapHandler {
 public:
  // `log_name` prefixes the log lines (e.g. the node's name or port).
  static StatusOr<std::unique_ptr<ZapHandler>> Start(void* zmq_context,
                                                     const JobKey& key,
                                                     std::string log_name);
  ~ZapHandler();

  // Prefix of later log lines (e.g. once the port is known).
  void SetLogName(std::string name) EXCLUDES(mu_);
  // Lets a lane connection in with `token` (net::LaneToken of a key given
  // over CURVE) until ForgetLane. A PLAIN handshake is admitted only on the
  // lane domain (BindLaneSocket) and only with a token allowed here.
  void AllowLane(const std::string& token) EXCLUDES(mu_);
  void ForgetLane(const std::string& token) EXCLUDES(mu_);
  // Handshakes admitted and refused so far.
  int64_t accepted() const { return accepted_.load(); }
  int64_t refused() const { return refused_.load(); }

 private:
  ZapHandler(void* ctx, void* socket, const JobKey& key, std::string log_name);
  void Loop();

  void* ctx_;
  // REP bound to inproc://zeromq.zap.01, used by Loop only. Loop blocks on
  // it without a timeout (an idle node does not wake); the destructor wakes
  // it with a request of its own.
  void* socket_;
  std::string public_key_;  // 32 bytes
  std::mutex mu_;
  std::string log_name_ GUARDED_BY(mu_);
  std::set<std::string> lane_tokens_ GUARDED_BY(mu_);
  LogRateLimiter log_limiter_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_CURVE_H_
