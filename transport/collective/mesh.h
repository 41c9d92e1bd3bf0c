// Mesh: the ZeroMQ full mesh under a communicator. Every rank binds one
// ROUTER socket and connects one DEALER to every other rank (its routing id
// is the sender's rank). A receive thread attributes each incoming message
// to the connection it came on (never to the header's sender field), files
// it into the Inbox (bounded per peer), drops and counts anything malformed
// with a rate-limited warning, sends heartbeats and watches the peers by
// net/liveness.h's rule (a dropped connection without a goodbye, or silence
// past the heartbeat timeout); every wait on a dead peer fails naming its
// rank and address. Private to transport/collective.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_MESH_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_MESH_H_

#include <zmq.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "transport/collective/inbox.h"
#include "transport/collective/mesh_wire.h"
#include "net/curve.h"
#include "net/handshake_monitor.h"
#include "net/liveness.h"
#include "net/seal.h"

namespace kvtrain {
namespace collective {

using Clock = std::chrono::steady_clock;

struct MeshOptions {
  // Heartbeats and when a peer is dead (net/liveness.h's rule).
  net::LivenessOptions liveness;
  // Seconds to wait for every peer's hello.
  double startup_timeout_s = 60.0;
  // Secures the ROUTER and every DEALER (insecure: plain ZeroMQ).
  net::JobKey key;
  // Also listen on a same-host socket (abstract Unix-domain, this user id
  // only, no CURVE), which peers on the same host use: it moves large
  // messages several times faster than TCP over 127.0.0.1, and without
  // encryption (KVTRAIN_SAME_HOST_IPC).
  bool same_host_ipc = true;
  // With a secure key, messages to a peer reached over TCP go, once CURVE
  // has carried it a random key, over a second connection with every frame
  // sealed with AES-256-GCM (net/seal.h; mesh_lane.cc;
  // KVTRAIN_SEALED_LANE).
  bool sealed_lane = true;
  // What each peer may have waiting to be received; a peer that goes past
  // it is cut off (its waits fail naming it and the limit).
  InboxLimits limits;
};

// What the receive path dropped, by reason, and what waits to be received.
struct MeshStats {
  int64_t dropped[kDropReasons] = {};
  int64_t dropped_total = 0;
  // Messages dropped on the sealed lane (not sealed, unknown lane, not
  // opening, played again or out of order).
  int64_t lane_refused = 0;
  // Handshakes its bound sockets refused (a connection to the lane without
  // a lane's token, a CURVE client without the job's key).
  int64_t handshakes_refused = 0;
  std::vector<size_t> queued_messages;  // by peer
  std::vector<size_t> queued_bytes;     // by peer, as InboxLimits counts them
};

// Thread-safe.
class Mesh {
 public:
  // Binds the ROUTER on every interface, any free port.
  static StatusOr<std::unique_ptr<Mesh>> Bind(int rank, int size,
                                              const MeshOptions& options);
  ~Mesh();

  int rank() const { return rank_; }
  int size() const { return size_; }
  int port() const { return port_; }
  // Where peers reach this rank: host:port, plus the ipc:// socket when
  // there is one.
  Endpoint Self(const std::string& host) const;
  // How this rank is connected to `peer`: "ipc" or "tcp" (after Connect).
  std::string Transport(int peer) const;
  // Whether messages to `peer` go over the sealed lane (after Connect).
  bool Sealed(int peer);
  // The port of this rank's sealed lane; 0 when it has none.
  int lane_port() const { return lane_port_; }

  // Connects to every peer (`peers[rank]` is this rank, unused), starts the
  // receive thread and returns once every peer's hello arrived.
  Status Connect(const std::vector<Endpoint>& peers);

  // Sends header + payload to `peer`. `copy` false: zero-copy, the caller
  // keeps `data` unchanged until WaitReleased.
  Status Send(int peer, MsgKind kind, uint64_t group, uint64_t tag,
              const void* data, size_t size, bool copy = true);
  // The next message from `peer` with this kind/group/tag.
  StatusOr<std::unique_ptr<Payload>> Recv(int peer, MsgKind kind,
                                          uint64_t group, uint64_t tag,
                                          Clock::time_point deadline);
  // Waits until ZeroMQ has let go of every zero-copy send.
  Status WaitReleased(Clock::time_point deadline);

  // Accepts user and collective messages of `group` from `members` (ranks
  // of this mesh) until CloseGroup; again: replaces the members. The world
  // group (kWorldGroup, every rank) is open from the start.
  void OpenGroup(uint64_t group, const std::vector<int>& members) EXCLUDES(mu_);
  // Drops the group's queued and later messages.
  void CloseGroup(uint64_t group) EXCLUDES(mu_);
  // The group's collectives with tags below `tag` are over (their late
  // messages, leftovers of a failed one, are dropped).
  void Retire(uint64_t group, uint64_t tag) EXCLUDES(mu_);
  MeshStats Stats() EXCLUDES(mu_);

  // "rank 1 (10.0.0.2:40123)".
  std::string PeerName(int peer) const;
  // OK while `peer` is alive; otherwise why it is not.
  Status PeerStatus(int peer) EXCLUDES(mu_);

  // Says goodbye to every peer, flushes, stops the thread. Idempotent.
  void Close();

 private:
  struct Peer;

  Mesh(int rank, int size, const MeshOptions& options, void* ctx);
  // Whether to connect to `peer` over its ipc:// socket.
  bool UseIpc(const Endpoint& peer) const;
  // The receive thread: messages, the DEALERs' monitors, heartbeats.
  void RecvLoop();
  // The frames of a message after its first (`id`), from `socket`.
  static std::vector<std::unique_ptr<net::ZmqFrame>> RestOf(
      void* socket, const net::ZmqFrame& id);
  void HandleIncoming();
  // One message's frames after the routing id (header, body pieces), from
  // the ROUTER or opened from the lane: decoded, delivered or dropped.
  void Accept(std::string_view id, zmq_msg_t* id_msg,
              std::vector<std::unique_ptr<net::ZmqFrame>> frames);
  // The sealed lane (mesh_lane.cc): binding it; after the hellos, offering
  // every TCP peer a key and switching to its lane once it answers; the
  // receive thread's side of an offer (keeps the key, answers); reading
  // the lane; sending one message over a peer's lane (p.mu held).
  Status BindLane();
  Status ConnectLanes(Clock::time_point deadline);
  void OnLaneOffer(int peer, const Payload& body);
  void HandleLane();
  Status SendSealed(int peer, const void* header, size_t header_size,
                    const void* data, size_t size);
  // Files one decoded message (or notes a goodbye), or says why not.
  Drop Deliver(const Decoded& d, std::unique_ptr<Payload> body) EXCLUDES(mu_);
  // Counts a message the decoder dropped and logs any dropped message
  // (rate-limited), naming its connection (`frame`: one of its frames).
  void LogDrop(const Decoded& d, std::string_view routing_id, zmq_msg_t* frame);
  void HandleMonitor(int peer);
  // Declares the dead peers dead and sends the heartbeats that are due.
  void Beat(int64_t now_ns);
  void MarkDead(int peer, const std::string& why) EXCLUDES(mu_);
  Status SendRaw(int peer, MsgKind kind, uint64_t group, uint64_t tag,
                 const void* data, size_t size, bool copy);

  const int rank_;
  const int size_;
  const MeshOptions options_;
  void* ctx_;
  // Admits only the job's key on the ROUTER; closed before ctx_ is.
  std::unique_ptr<net::ZapHandler> zap_;
  // Sheds connections beyond net::kMaxPendingHandshakes on the ROUTER and
  // logs refused handshakes; reset before ctx_ ends.
  std::unique_ptr<net::HandshakeMonitor> monitor_;
  void* router_ = nullptr;
  int port_ = 0;
  // The sealed lane's ROUTER (no CURVE: a connection needs a lane's token,
  // every message must open) and what each peer offered, by lane id; the
  // receive thread's after Bind.
  void* lane_ = nullptr;
  int lane_port_ = 0;
  struct LaneIn {
    int peer = -1;
    std::unique_ptr<net::LaneReader> reader;
    std::string zap_token;  // what its connection shows (net::LaneToken)
  };
  std::map<uint64_t, LaneIn> lanes_in_;
  std::atomic<int64_t> lane_refused_{0};
  std::string same_host_;  // set by Bind; empty: no same-host socket
  std::vector<std::unique_ptr<Peer>> peers_;

  std::mutex mu_;
  std::condition_variable cv_;
  Inbox inbox_ GUARDED_BY(mu_);
  // Why each peer is failed (dead, or cut off); "" = alive.
  std::vector<std::string> failed_ GUARDED_BY(mu_);
  std::vector<bool> said_bye_ GUARDED_BY(mu_);
  // Why a peer left, when a failure made it (its bye's body).
  std::vector<std::string> bye_reason_ GUARDED_BY(mu_);
  bool closing_ GUARDED_BY(mu_) = false;
  // Last-heard clocks and drops; Check and HeartbeatDue on RecvLoop only.
  net::PeerLiveness liveness_;
  // Warnings about dropped messages: at most 10 per 10 s.
  LogRateLimiter bad_input_log_;

  // Zero-copy sends ZeroMQ still holds; the release callback (on ZeroMQ's
  // I/O thread) signals released_cv_ when it reaches 0.
  std::atomic<int64_t> unreleased_{0};
  std::mutex released_mu_;
  std::condition_variable released_cv_;
  friend void ReleaseZeroCopy(void* data, void* hint);
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex close_mu_;
  bool closed_ GUARDED_BY(close_mu_) = false;
};

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_MESH_H_
