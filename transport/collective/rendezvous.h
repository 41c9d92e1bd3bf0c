// Rendezvous: how the ranks of a group learn each other's addresses. One
// process (the launcher's scheduler, or rank 0 under mpirun) serves; every
// rank registers (rank, size, the address it listens on) and gets back the
// whole table once all have. A registration belongs to the connection it
// came on: one rank per connection, the answer goes back there. Messages
// are decoded by pure functions (rendezvous_fuzz drives them); malformed
// ones are dropped, counted and logged at a limited rate. Private to
// transport/collective.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_RENDEZVOUS_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_RENDEZVOUS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/logging.h"
#include "base/status.h"
#include "transport/collective/mesh.h"
#include "net/handshake_monitor.h"

namespace kvtrain {
namespace collective {

// The longest registration (one frame of text) the server reads; longer
// messages are refused by ZeroMQ (ZMQ_MAXMSGSIZE) before they are read.
constexpr size_t kMaxRegistrationBytes = 1024;

// "register <rank> <size> <endpoint>", from a rank to the server.
struct RegisterRequest {
  int rank = -1;
  int size = 0;
  Endpoint endpoint;
};
std::string EncodeRegisterRequest(const RegisterRequest& r);
// The frames of one message to the server (after its routing id): exactly
// one frame of at most kMaxRegistrationBytes, "register", rank and size in
// decimal (0 <= rank, 1 <= size <= 65535) and one Endpoint, separated by
// single spaces, nothing else. Pure; any bytes are safe.
StatusOr<RegisterRequest> ParseRegisterRequest(const std::vector<std::string_view>& frames);
// The frames of the server's answer: one frame, "ok" and `size` endpoints
// (the table), or "error <message>" (FailedPrecondition with the message);
// anything else is DataLoss. Pure.
StatusOr<std::vector<Endpoint>> ParseRendezvousAnswer(
    const std::vector<std::string_view>& frames, int size);

// Not thread-safe; one Serve at a time.
class RendezvousServer {
 public:
  // Binds `port` on every interface (0: any free port).
  // `key` secures the socket (and starts its ZAP handler).
  static StatusOr<std::unique_ptr<RendezvousServer>> Bind(int port,
                                                          const net::JobKey& key);
  ~RendezvousServer();

  int port() const { return port_; }

  // Answers registrations until all `size` ranks have registered, then
  // sends each the table. Past `deadline` it fails naming the missing ranks
  // (and tells the registered ones so). A rank registering twice, out of
  // range, or with another group size gets an error naming both sides.
  Status Serve(int size, Clock::time_point deadline);

  // Messages dropped so far: malformed (see ParseRegisterRequest). Any
  // thread, also while Serve runs.
  int64_t dropped() const { return dropped_.load(); }
  // Connections shed because too many strangers were in their handshake,
  // or that sent more than a HELLO before theirs was answered
  // (net::HandshakeMonitor, which watches the socket as every node's).
  int64_t shed() const { return monitor_->shed(); }

 private:
  RendezvousServer(void* ctx, void* socket, int port)
      : ctx_(ctx), socket_(socket), port_(port), log_(10, std::chrono::seconds(10)) {}
  // One whole message: its routing id and up to 4 of its frames (more are
  // read and counted, so the next message starts in step).
  bool ReadMessage(std::string* identity, std::vector<std::string>* frames,
                   size_t* count, std::string* address);
  void* ctx_;
  std::unique_ptr<net::ZapHandler> zap_;  // closed before ctx_
  std::unique_ptr<net::HandshakeMonitor> monitor_;  // likewise
  void* socket_;
  int port_;
  std::atomic<int64_t> dropped_{0};
  LogRateLimiter log_;  // refusals and drops: at most 10 lines per 10 s
};

// Registers with the server at `server` (retrying while it is not up yet)
// and returns every rank's endpoint, index = rank.
StatusOr<std::vector<Endpoint>> Register(const Endpoint& server, int rank,
                                         int size, const Endpoint& self,
                                         Clock::time_point deadline,
                                         const net::JobKey& key);

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_RENDEZVOUS_H_
