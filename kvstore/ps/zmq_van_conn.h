// What zmq_van.cc and zmq_van_same_host.cc share: one outgoing connection, and
// the sending steps both use. Internal to the ZeroMQ van.
#ifndef KVTRAIN_KVSTORE_PS_ZMQ_VAN_CONN_H_
#define KVTRAIN_KVSTORE_PS_ZMQ_VAN_CONN_H_

#include <zmq.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "kvstore/ps/outbox.h"
#include "kvstore/ps/zmq_van.h"
#include "net/shm.h"
#include "net/shm_ring.h"

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
  // ... and every message may go through a ring (net/shm_ring.h).
  bool ring_ok = false;
  std::unique_ptr<net::ShmRingWriter> ring GUARDED_BY(mu);
  bool ring_failed GUARDED_BY(mu) = false;
  bool bell_failed GUARDED_BY(mu) = false;
  // Messages that found the ring full, in order.
  std::deque<OutMessage> ring_backlog GUARDED_BY(mu);
  int64_t ring_sent GUARDED_BY(mu) = 0;       // messages, marks not counted
  int64_t ring_by_socket GUARDED_BY(mu) = 0;  // of those, after a mark
};

namespace zmq_van_internal {

// Sends one message's frames; the caller holds c->mu. Frames zmq refused
// are appended to *unsent, to be closed after c->mu is released (closing
// runs the release callback, which takes c->mu).
Status SendFrames(void* socket, ZmqVan::Conn* c, OutMessage* m, std::vector<zmq_msg_t>* unsent);
void CloseUnsent(std::vector<zmq_msg_t>* unsent);

// Makes c's ring and announces it over the socket; false: c uses the
// socket only. c->mu held.
bool StartRing(ZmqVan::Conn* c, std::vector<zmq_msg_t>* unsent);
// Puts m in c's ring, or, when it is too large for one, sends it over the
// socket after a mark in the ring that says so; false: the ring is full (m
// untouched). c->mu held.
bool RingSend(ZmqVan::Conn* c, OutMessage* m, std::vector<zmq_msg_t>* unsent);

}  // namespace zmq_van_internal
}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_PS_ZMQ_VAN_CONN_H_
