// ZmqVan: the Van over ZeroMQ. One ROUTER socket receives everything; one
// DEALER per peer sends, its routing id set to this node's token. Frames are
// sent with zmq_msg_init_data (a release callback drops the Blob reference)
// and received frames are handed up as Blobs that keep the zmq_msg_t alive.
#ifndef KVTRAIN_TRANSPORT_PS_ZMQ_VAN_H_
#define KVTRAIN_TRANSPORT_PS_ZMQ_VAN_H_

#include <zmq.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/logging.h"
#include "base/thread_annotations.h"
#include "transport/ps/outbox.h"
#include "transport/ps/van.h"
#include "net/curve.h"
#include "net/handshake_monitor.h"
#include "net/seal.h"
#include "net/shm.h"
#include "net/shm_ring.h"

namespace kvtrain {
namespace ps {

struct ZmqVanOptions {
  // See PostofficeOptions.
  int64_t send_window_bytes = 4 << 20;
  Duration poll_interval = std::chrono::seconds(1);
  // The job's key: secure (CURVE on every socket, a ZAP handler admitting
  // only the job's key) unless insecure. See net/curve.h.
  net::JobKey key;
  // Peers on this host connect over an abstract Unix-domain socket open to
  // this user id only, without CURVE (net/same_host.h); false: TCP.
  bool same_host = true;
  // Frames of kShmMinFrameBytes and more to a peer on the same-host socket
  // go through an arena of this many bytes of shared memory per connection
  // (net/shm.h), the socket carrying only where they lie; 0: none.
  int64_t shm_bytes = int64_t{64} << 20;
  // With shared memory on, every message to a peer on the same-host socket
  // goes through a ring in shared memory (net/shm_ring.h) instead of the
  // socket: one thread wake-up per message instead of three.
  bool shm_ring = true;
  // With a secure key, messages to a peer reached over TCP go, once CURVE
  // has authenticated it and carried it a random key, over a second
  // connection with every frame sealed with AES-256-GCM under that key
  // (net/seal.h; zmq_van_lane.cc). The receiving side binds the lane when
  // this is on; a sender whose peer has none keeps to CURVE.
  bool sealed_lane = true;
  // PS_VERBOSE: 1 logs when a connection switches to its sealed lane.
  int verbose = 0;
};

// A sealed lane's offer or switch mark, which Recv takes in
// (zmq_van_lane.cc).
bool IsLaneControl(const Blob& frame);

// The smallest frame worth moving through shared memory.
inline constexpr size_t kShmMinFrameBytes = 16 << 10;

// Thread-safety as Van. Messages a caller sends go out on the caller's
// thread when the connection's window allows (no thread hop); a sender
// thread drains backlogs in priority order as ZeroMQ releases earlier ones.
class ZmqVan : public Van {
 public:
  static StatusOr<std::unique_ptr<ZmqVan>> Create(std::string token,
                                                  const ZmqVanOptions& options);
  ~ZmqVan() override;

  const std::string& token() const override { return token_; }
  StatusOr<int> Bind(int port) override;
  std::string SameHostAddress() const override { return same_host_; }
  Status Connect(int conn, const std::string& host, int port,
                 const std::string& same_host) override;
  void Disconnect(int conn) override;
  Status Send(int conn, int priority, std::vector<Blob> frames) override;
  // A slot of the connection's shared-memory arena, for frames of at least
  // kShmMinFrameBytes to a peer on this host; plain memory otherwise.
  SendBuffer NewSendBuffer(int conn, size_t size) override;
  StatusOr<bool> Recv(RawMessage* msg) override;
  void Wake() override;
  void Flush(Duration timeout) override;
  void Close(Duration linger) override;
  void SetHandshakeFailureHandler(HandshakeFailureHandler handler) override
      EXCLUDES(handler_mu_);
  void SetDropHandler(DropHandler handler) override EXCLUDES(handler_mu_);
  void SetLogName(const std::string& name) override;

  // Frames sent through shared memory so far (net/shm.h).
  int64_t shm_frames_sent() const { return shm_frames_sent_.load(); }
  // Of those, frames sent from a NewSendBuffer slot without a copy.
  int64_t shm_frames_handed() const { return shm_frames_handed_.load(); }
  // Messages sent through shared-memory rings so far (net/shm_ring.h), and
  // of those, how many were too large for a ring and took the socket.
  int64_t ring_messages_sent() EXCLUDES(conns_mu_);
  int64_t ring_messages_by_socket() EXCLUDES(conns_mu_);
  // Messages sent over sealed lanes so far, and lane messages this node
  // dropped (zmq_van_lane.cc).
  int64_t lane_messages_sent() EXCLUDES(conns_mu_);
  int64_t lane_messages_refused() const { return lane_refused_.load(); }
  // Lane messages that came before their sender's switch mark and were held
  // for it (a test's proof that such a message was read and kept back).
  int64_t lane_messages_held() const { return lane_held_.load(); }
  // Handshakes its bound sockets (the CURVE socket, the lane) refused.
  int64_t handshakes_refused() const { return monitor_->refused(); }
  // The port of this node's sealed lane; 0 when it has none.
  int lane_port() const { return lane_port_; }

  struct Conn;  // one outgoing connection (zmq_van.cc)

 private:
  ZmqVan(std::string token, const ZmqVanOptions& options, void* ctx);
  void SenderLoop();
  Conn* FindConn(int conn) EXCLUDES(conns_mu_);
  static void CloseConn(Conn* c, int linger_ms);
  // Moves m's large frames into c's shared memory (c->mu held).
  void PlaceInShm(Conn* c, OutMessage* m);
  // c->shm, created on first use; false if it cannot be (c->mu held).
  bool EnsureArena(Conn* c);
  // Replaces a received message's shared-memory table by the frames it
  // names.
  Status TakeShmFrames(RawMessage* msg);
  bool Idle() EXCLUDES(conns_mu_);
  // The sum of `count` over every connection ever made (each under its lock).
  int64_t SumOverConns(int64_t (*count)(const Conn& c)) EXCLUDES(conns_mu_);

  // Rings (net/shm_ring.h; sending: zmq_van.cc's StartRing and RingSend).
  // Receiving (the receive thread): one message from the socket, if one is
  // there; and one ring message.
  StatusOr<bool> RecvSocket(RawMessage* msg);
  StatusOr<bool> RecvRing(RawMessage* msg);
  // A socket message just received: an announcement (maps the ring; true),
  // or a message that follows a ring's mark (queued or let through).
  bool OnSocketMessage(RawMessage* msg);
  // A ring record (moved into the frames' storage) as a message.
  Status DecodeRecord(std::vector<char>&& record, RawMessage* msg);

  // The sealed lane's receiving side (zmq_van_lane.cc), the receive
  // thread's but for BindLane (Bind). An offer or a switch mark over CURVE
  // is taken in (true); an offer is answered with the lane's port.
  Status BindLane();
  bool OnLaneControl(const RawMessage& msg);
  // Reads one message of the lane, if any: one that opens goes to
  // ready_msgs_ (or waits for its sender's switch mark), anything else is
  // dropped and logged; false when none was waiting.
  bool ReadLaneMessage();
  void RefuseLaneMessage(const zmq_msg_t* part, const std::string& why);

  const std::string token_;
  const ZmqVanOptions options_;
  void* ctx_ = nullptr;
  void* router_ = nullptr;  // used by Bind/Recv/Close only
  std::string same_host_;   // set by Bind
  std::unique_ptr<net::ZapHandler> zap_;  // when secure
  std::unique_ptr<net::HandshakeMonitor> monitor_;
  std::mutex handler_mu_;
  HandshakeFailureHandler on_handshake_failure_ GUARDED_BY(handler_mu_);
  DropHandler on_drop_ GUARDED_BY(handler_mu_);

  std::mutex conns_mu_;
  std::map<int, Conn*> conns_ GUARDED_BY(conns_mu_);
  // Every Conn ever made; kept until the context ends because ZeroMQ may
  // release a closed connection's frames late.
  std::vector<std::unique_ptr<Conn>> all_conns_ GUARDED_BY(conns_mu_);

  std::mutex ready_mu_;
  std::condition_variable ready_cv_;
  std::set<Conn*> ready_ GUARDED_BY(ready_mu_);
  bool stop_sender_ GUARDED_BY(ready_mu_) = false;
  std::thread sender_;
  bool closed_ = false;
  net::ShmMaps shm_maps_;
  std::atomic<int64_t> shm_frames_sent_{0};
  std::atomic<int64_t> shm_frames_handed_{0};
  // Connections whose ring was full: the sender thread retries them.
  std::set<Conn*> ring_stalled_ GUARDED_BY(ready_mu_);

  // The receive thread's: the doorbell peers' rings ring (a pipe), the
  // rings, and messages already taken that wait for their turn.
  int bell_read_ = -1;
  int bell_write_ = -1;
  struct RingIn {
    std::string token;
    std::unique_ptr<net::ShmRingReader> reader;
    int marks = 0;                     // marks read whose message has not come
    std::deque<RawMessage> early;      // socket messages before their mark
  };
  std::vector<RingIn> rings_;
  size_t ring_next_ = 0;
  bool socket_first_ = false;
  std::deque<RawMessage> ready_msgs_;
  std::vector<char> record_;

  void* lane_ = nullptr;  // ROUTER, PLAIN with a lane's token; frames must open
  int lane_port_ = 0;
  struct LaneIn {
    std::string token;  // the sender's
    std::unique_ptr<net::LaneReader> reader;
    // Until the sender's switch mark comes over CURVE, its lane messages
    // wait here.
    bool switched = false;
    std::deque<RawMessage> held;
    std::string zap_token;  // what its connection shows (net::LaneToken)
  };
  std::map<uint64_t, LaneIn> lanes_in_;  // by lane id
  // Erases a lane and tells the ZapHandler to admit no more with its token.
  void EraseLaneIn(std::map<uint64_t, LaneIn>::iterator it);
  // Which source goes first in Recv's next turn (0 the lane, 1 the others).
  bool lane_first_ = false;
  LogRateLimiter lane_log_;
  std::atomic<int64_t> lane_refused_{0};
  std::atomic<int64_t> lane_held_{0};

  friend void ReleaseFrame(void* data, void* hint);
  void OnReleased(Conn* c, int64_t bytes);
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_ZMQ_VAN_H_
