// InprocVan: a Van that connects Postoffices inside one process (unit tests
// host a scheduler, servers and workers in one binary). Frames are handed
// over by reference; a node can be cut off to simulate its death.
#ifndef KVTRAIN_TRANSPORT_PS_INPROC_VAN_H_
#define KVTRAIN_TRANSPORT_PS_INPROC_VAN_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "base/thread_annotations.h"
#include "transport/ps/van.h"

namespace kvtrain {
namespace ps {

class InprocVan;

// The "network": InprocVans addressed by port (hosts are ignored).
// Thread-safe; must outlive its vans.
class InprocNetwork {
 public:
  // From now on, messages from or to `port` are dropped (the node "died").
  void Isolate(int port) EXCLUDES(mu_);
  // Messages delivered so far (for tests).
  int64_t delivered() EXCLUDES(mu_);
  // Tests: every (from port, to port) connection opened so far.
  std::set<std::pair<int, int>> connections() EXCLUDES(mu_);
  // Tests: `tap` sees every message delivered from now on (under the
  // network's lock: it must not use the network).
  void SetTap(std::function<void(const RawMessage&)> tap) EXCLUDES(mu_);
  // Tests: `edit` may change every message delivered from now on, before
  // the tap sees it (e.g. mark it unreadable, as a Van's RawMessage::error);
  // also under the network's lock.
  using EditFn = std::function<void(int from_port, int to_port, RawMessage* msg)>;
  void SetEdit(EditFn edit) EXCLUDES(mu_);

 private:
  friend class InprocVan;
  StatusOr<int> Register(InprocVan* van, int port) EXCLUDES(mu_);
  void Connected(int from_port, int to_port) EXCLUDES(mu_);
  void Unregister(int port) EXCLUDES(mu_);
  void Deliver(int from_port, int to_port, RawMessage msg) EXCLUDES(mu_);

  std::mutex mu_;
  std::map<int, InprocVan*> vans_ GUARDED_BY(mu_);
  std::set<int> isolated_ GUARDED_BY(mu_);
  int next_port_ GUARDED_BY(mu_) = 30000;
  int64_t delivered_ GUARDED_BY(mu_) = 0;
  std::set<std::pair<int, int>> connections_ GUARDED_BY(mu_);
  std::function<void(const RawMessage&)> tap_ GUARDED_BY(mu_);
  EditFn edit_ GUARDED_BY(mu_);
};

// Thread-safety as Van. Priorities are ignored: delivery is immediate.
class InprocVan : public Van {
 public:
  InprocVan(InprocNetwork* net, std::string token,
            Duration poll_interval = std::chrono::milliseconds(20));
  ~InprocVan() override;

  const std::string& token() const override { return token_; }
  StatusOr<int> Bind(int port) override;
  Status Connect(int conn, const std::string& host, int port,
                 const std::string& same_host) override;
  void Disconnect(int conn) override;
  Status Send(int conn, int priority, std::vector<Blob> frames) override;
  StatusOr<bool> Recv(RawMessage* msg) override;
  void Flush(Duration /*timeout*/) override {}
  void Close(Duration linger) override;

 private:
  friend class InprocNetwork;
  void Enqueue(RawMessage msg) EXCLUDES(mu_);

  InprocNetwork* const net_;
  const std::string token_;
  const Duration poll_interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RawMessage> inbox_ GUARDED_BY(mu_);
  std::map<int, int> conns_ GUARDED_BY(mu_);  // conn -> port
  int port_ GUARDED_BY(mu_) = 0;
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_INPROC_VAN_H_
