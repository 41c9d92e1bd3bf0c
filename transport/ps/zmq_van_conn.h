// What zmq_van.cc and zmq_van_same_host.cc share: one outgoing connection, and
// the sending steps both use. Internal to the ZeroMQ van.
#ifndef KVTRAIN_TRANSPORT_PS_ZMQ_VAN_CONN_H_
#define KVTRAIN_TRANSPORT_PS_ZMQ_VAN_CONN_H_

#include <functional>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "transport/ps/outbox.h"
#include "transport/ps/zmq_van.h"
#include "net/seal.h"
#include "net/shm.h"
#include "net/shm_ring.h"

namespace kvtrain {
namespace ps {

// The sending end of a sealed lane (zmq_van_lane.cc): offered over CURVE
// at Connect, probed once the peer answers with its lane's port, used once
// the peer answers the probe.
struct LaneOut {
  enum class State { kOffered, kProbing, kReady, kOff };
  State state = State::kOffered;
  std::unique_ptr<net::LaneWriter> writer;
  void* ctx = nullptr;
  std::string host;        // the peer's, for the lane's endpoint
  void* socket = nullptr;  // DEALER to the peer's lane, once its port is known
  int64_t messages_sent = 0;
  int verbose = 0;  // PS_VERBOSE
  std::chrono::steady_clock::time_point probed;  // when the probe went
  bool probe_late = false;                       // said it did not answer
  // Puts the lane's socket under the van's handshake monitor (its drops
  // count as the connection's; ZmqVan::Connect).
  std::function<Status(void*)> watch;
};

// The handshake monitor's tag of connection `conn`'s lane socket.
inline constexpr int kLaneTagBase = 1 << 28;

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
  // ... and every message may go through a ring (net/shm_ring.h).
  bool ring_ok = false;
  std::unique_ptr<net::ShmRingWriter> ring GUARDED_BY(mu);
  bool ring_failed GUARDED_BY(mu) = false;
  bool bell_failed GUARDED_BY(mu) = false;
  // Messages that found the ring full, in order.
  std::deque<OutMessage> ring_backlog GUARDED_BY(mu);
  int64_t ring_sent GUARDED_BY(mu) = 0;       // messages, marks not counted
  int64_t ring_by_socket GUARDED_BY(mu) = 0;  // of those, after a mark
  // Over TCP with security on and the sealed lane on.
  std::unique_ptr<LaneOut> lane GUARDED_BY(mu);
};

// What a sent message's parts release together: its frames on the socket
// and, with a sealed lane, its frames on the lane. When the last part is
// written out, the message leaves the connection's window.
struct SendCredit {
  SendCredit(ZmqVan::Conn* c, int64_t b) : conn(c), bytes(b) {}
  ZmqVan::Conn* conn;
  int64_t bytes;
  std::atomic<int> parts{1};
};

// What a sent frame's release callback (ReleaseFrame) holds: the frame's
// storage and, for a message's last frame on the socket and its frames on
// the lane, the message's credit.
struct FrameHold {
  Blob blob;
  SendCredit* credit = nullptr;
};
void ReleaseFrame(void* data, void* hint);

namespace zmq_van_internal {

// How a frame is handed to ZeroMQ (zmq_msg_send; tests put in failures).
using ZmqSendFn = int (*)(zmq_msg_t* msg, void* socket, int flags);

// Hands one part of a message to ZeroMQ, again when a signal interrupted
// it. A part that fails after earlier parts of its message went leaves the
// message unfinished in ZeroMQ, where the next message's parts would be
// glued to it: then c is closed (*torn), so that nothing more is sent on
// it, and the caller's sends fail naming the peer.
int SendPart(ZmqSendFn send, zmq_msg_t* msg, void* socket, int flags);

// Sends one message's frames; the caller holds c->mu. Frames zmq refused
// are appended to *unsent, to be closed after c->mu is released (closing
// runs the release callback, which takes c->mu). A failure in the middle
// of the message closes c (SendPart).
Status SendFrames(void* socket, ZmqVan::Conn* c, OutMessage* m, std::vector<zmq_msg_t>* unsent,
                  ZmqSendFn send = zmq_msg_send);
// The error of a send that failed after part `part` of a message went:
// closes c (c->mu held).
Status TearConn(ZmqVan::Conn* c, size_t part, const std::string& error);
void CloseUnsent(std::vector<zmq_msg_t>* unsent);

// Makes c's ring and announces it over the socket; false: c uses the
// socket only. c->mu held.
bool StartRing(ZmqVan::Conn* c, std::vector<zmq_msg_t>* unsent);
// Puts m in c's ring, or, when it is too large for one, sends it over the
// socket after a mark in the ring that says so; false: the ring is full (m
// untouched). c->mu held.
bool RingSend(ZmqVan::Conn* c, OutMessage* m, std::vector<zmq_msg_t>* unsent);

// The sealed lane's sending steps (zmq_van_lane.cc), c->mu held.
// Offers c a lane over its socket (the first message on it); c->lane set.
void OfferLane(ZmqVan::Conn* c, void* ctx, const std::string& host,
               int verbose, std::function<Status(void*)> watch);
// Moves the lane on as the peer answers; once it is ready, sends m over it,
// every frame sealed and holding `credit` (*status: an error), and returns
// true; false: m is still to be sent over the socket.
bool SendOnLane(ZmqVan::Conn* c, OutMessage* m, SendCredit* credit,
                std::vector<zmq_msg_t>* unsent, Status* status,
                ZmqSendFn send);
// Closes the lane's socket (with `linger_ms`).
void CloseLane(ZmqVan::Conn* c, int linger_ms);

}  // namespace zmq_van_internal
}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_ZMQ_VAN_CONN_H_
