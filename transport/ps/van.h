// Van: the byte-moving layer under a Postoffice. It binds one receiving
// endpoint, keeps one outgoing connection per peer, and moves frames; it
// knows nothing about message contents. ZmqVan is the real one, InprocVan
// connects Postoffices inside one process for unit tests.
#ifndef KVTRAIN_TRANSPORT_PS_VAN_H_
#define KVTRAIN_TRANSPORT_PS_VAN_H_

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "transport/ps/ps.h"

namespace kvtrain {
namespace ps {

// A received message: its frames and the routing token of the connection it
// came from (the sending Van's token).
// `error` is set when the frames could not be read: InvalidArgument for
// malformed input, Unavailable when this process cannot read what a peer
// sent (its shared memory).
struct RawMessage {
  std::string token;
  std::vector<Blob> frames;
  Status error;
  // It came over the same-host socket (a Unix socket, its peer vouched for
  // by the kernel): only such a peer may name this host's shared memory.
  bool same_host = false;
  // Which of `frames` lie in the sender's shared memory, which it can still
  // write (empty: none): DecodeMessage copies all of those but values out
  // before anything reads them.
  std::vector<bool> in_shm;
};

// Implementations: Send/Connect/Disconnect/Flush are thread-safe; Recv is
// called by one thread at a time; Close ends everything.
class Van {
 public:
  virtual ~Van() = default;

  // The routing token this Van's outgoing connections carry.
  virtual const std::string& token() const = 0;
  // Binds the receiving endpoint on `port` (0: any free port) and returns
  // the port bound. A port in use is AlreadyExists.
  virtual StatusOr<int> Bind(int port) = 0;
  // After Bind: the address peers on this host connect to instead of the
  // port (net/same_host.h), or "" when there is none.
  virtual std::string SameHostAddress() const { return ""; }
  // Opens the outgoing connection `conn` to host:port (asynchronously: it
  // may come up later; messages wait for it). `same_host` is what the peer
  // advertised from its SameHostAddress(): a peer on this host is reached
  // through that instead of TCP ("" = TCP).
  virtual Status Connect(int conn, const std::string& host, int port,
                         const std::string& same_host) = 0;
  virtual void Disconnect(int conn) = 0;
  // Queues `frames` on connection `conn`. Larger `priority` leaves first
  // when the connection has a backlog. The blobs are referenced, not copied,
  // until written out.
  virtual Status Send(int conn, int priority, std::vector<Blob> frames) = 0;
  // A buffer for a frame of `size` bytes to send on `conn` later: one the
  // Van can send without copying it where it has such (ZmqVan: shared
  // memory to a peer on this host), else plain memory.
  virtual SendBuffer NewSendBuffer(int conn, size_t size) {
    return SendBuffer::Heap(size);
  }
  // Receives one message into *msg. Returns false when nothing arrived
  // within the Van's poll interval, or when Wake was called.
  virtual StatusOr<bool> Recv(RawMessage* msg) = 0;
  // Makes a Recv asleep (or the next one) return now; any thread.
  virtual void Wake() {}
  // Waits up to `timeout` until every queued message was handed to the OS.
  virtual void Flush(Duration timeout) = 0;
  // Closes all connections; queued messages get up to `linger` to go out.
  virtual void Close(Duration linger) = 0;

  // Security hooks (ZmqVan; no-ops elsewhere). The handler hears of every
  // refused handshake on an outgoing connection: its conn, the address,
  // why, how many times in a row, and whether the connection is given up
  // (HandshakeMonitor::RefusedFn). It runs on a Van thread.
  using HandshakeFailureHandler =
      std::function<void(int conn, const std::string& endpoint,
                         const std::string& why, int in_a_row, bool final)>;
  virtual void SetHandshakeFailureHandler(HandshakeFailureHandler handler) {}
  // The handler hears that outgoing connection `conn`, once up, dropped
  // (its peer closed it or died). It runs on a Van thread.
  using DropHandler = std::function<void(int conn)>;
  virtual void SetDropHandler(DropHandler handler) {}
  // Prefix of the Van's own log lines (refused connections).
  virtual void SetLogName(const std::string& name) {}
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_VAN_H_
