// Rendezvous: how the ranks of a group learn each other's addresses. One
// process (the launcher's scheduler, or rank 0 under mpirun) serves; every
// rank registers (rank, size, the address it listens on) and gets back the
// whole table once all have. Private to kvstore/collective.
#ifndef KVTRAIN_KVSTORE_COLLECTIVE_RENDEZVOUS_H_
#define KVTRAIN_KVSTORE_COLLECTIVE_RENDEZVOUS_H_

#include <memory>
#include <vector>

#include "base/status.h"
#include "kvstore/collective/mesh.h"

namespace kvtrain {
namespace collective {

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

 private:
  RendezvousServer(void* ctx, void* socket, int port)
      : ctx_(ctx), socket_(socket), port_(port) {}
  void* ctx_;
  std::unique_ptr<net::ZapHandler> zap_;  // closed before ctx_
  void* socket_;
  int port_;
};

// Registers with the server at `server` (retrying while it is not up yet)
// and returns every rank's endpoint, index = rank.
StatusOr<std::vector<Endpoint>> Register(const Endpoint& server, int rank,
                                         int size, const Endpoint& self,
                                         Clock::time_point deadline,
                                         const net::JobKey& key);

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_COLLECTIVE_RENDEZVOUS_H_
