// PostofficeImpl: the machinery behind a Postoffice. A receive thread decodes
// and checks every message and dispatches it (control messages here, DATA to
// Customers); a timer thread sends heartbeats and watches deadlines and
// peers; the scheduler role adds a SchedulerCore.
#ifndef KVTRAIN_KVSTORE_PS_POSTOFFICE_IMPL_H_
#define KVTRAIN_KVSTORE_PS_POSTOFFICE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/logging.h"
#include "net/liveness.h"
#include "net/node_config.h"
#include "base/thread_annotations.h"
#include "kvstore/ps/message.h"
#include "kvstore/ps/ps.h"
#include "kvstore/ps/van.h"

namespace kvtrain {
namespace ps {

// An application object (KVWorker, KVServer) that receives DATA messages.
class Customer {
 public:
  virtual ~Customer() = default;
  virtual int app_id() const = 0;
  // Every DATA message for app_id, on the receive thread, in arrival order.
  // Must not register or unregister customers.
  virtual void Accept(Message&& msg) = 0;
  // The job failed: complete whatever is pending with `reason`.
  virtual void Abort(const Status& reason) = 0;
};

struct NodeEntry {
  Role role = Role::kWorker;
  int rank = 0;
  int id = 0;
  std::string host;
  int port = 0;
  std::string token;
  std::string same_host;  // Van::SameHostAddress of the node ("" = none)
  int64_t pid = 0;
  std::string name;  // "server 1 (10.0.0.2:41233)"
};

// "server 1 (10.0.0.2:41233)", "scheduler (10.0.0.1:9091)".
std::string NodeName(Role role, int rank, const std::string& host, int port);

// The job's nodes, fixed once the scheduler has ranked them. Immutable
// except for the liveness clocks (net/liveness.h), indexed like nodes().
class NodeTable {
 public:
  NodeTable(std::vector<NodeEntry> nodes, std::string job_id,
            const net::LivenessOptions& liveness);
  NodeTable(const NodeTable&) = delete;
  NodeTable& operator=(const NodeTable&) = delete;
  const NodeEntry* ById(int id) const;
  const NodeEntry* ByToken(const std::string& token) const;
  const std::vector<NodeEntry>& nodes() const { return nodes_; }
  const std::string& job_id() const { return job_id_; }
  // Ids of the nodes in `groups` (Group bits).
  std::vector<int> Members(int groups) const;
  // A message from node `id` arrived at `now_ns` (net::SteadyNowNs()).
  void Touch(int id, int64_t now_ns) const;
  // The clocks of nodes()[i], i = IndexOf(id); the owning postoffice sets
  // which nodes it watches and checks them on its timer thread.
  net::PeerLiveness& liveness() const { return *liveness_; }
  int IndexOf(int id) const;  // -1 for an unknown id

 private:
  std::vector<NodeEntry> nodes_;
  std::string job_id_;
  std::unordered_map<int, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_token_;
  std::unique_ptr<net::PeerLiveness> liveness_;
};

class SchedulerCore;

int64_t NowNs();
int GroupOf(Role role);

// Thread-safe.
class PostofficeImpl {
 public:
  PostofficeImpl(const NodeConfig& config, std::unique_ptr<Van> van,
                 const PostofficeOptions& options);
  ~PostofficeImpl();

  // Resolves the advertised address and binds (called by Create).
  Status Init();
  Status Start();
  Status Barrier(int groups, Duration timeout);
  Status Finalize(Duration timeout);
  void Abort(const std::string& reason);
  void SetFailureHandler(FailureHandler handler) EXCLUDES(mu_);

  const NodeConfig& config() const { return config_; }
  Role role() const { return config_.role; }
  int rank() const { return rank_.load(); }
  int my_id() const { return my_id_.load(); }
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  std::string name() const;
  int verbose() const { return config_.verbose; }
  const std::string& token() const { return van_->token(); }
  std::vector<KeyRange> ServerKeyRanges() const;
  // Null before the node table arrived.
  const NodeTable* table() const { return table_.load(); }
  // PS_HEARTBEAT_INTERVAL / PS_HEARTBEAT_TIMEOUT as liveness options.
  net::LivenessOptions liveness_options() const;
  // "server 1 (10.0.0.2:41233)" or "node 17" when unknown.
  std::string PeerName(int id) const;

  // Customers. Register fails if app_id is taken on this node.
  Status RegisterCustomer(Customer* c) EXCLUDES(customers_mu_);
  void UnregisterCustomer(Customer* c) EXCLUDES(customers_mu_);
  // Lets the calling thread, which waits for answers, receive in place of
  // the receive thread while that one lingers (LingerForWaiter): so no
  // thread wake-up lies between an answer's arrival and its waiter. It
  // handles the messages `mine` accepts until done() holds, `deadline`
  // passes or the node stops; the first other message goes back to the
  // receive thread, which then takes over again. At the end, the receive
  // thread lingers on if linger() says so (nobody else waits) and nobody
  // recalled it meanwhile (RecallReceiver), or else resumes at once. Returns
  // false, having done nothing, unless the receive thread was lingering and
  // nobody else received in its place.
  bool ReceiveWhileWaiting(const std::function<bool()>& done,
                           const std::function<bool(const Message&)>& mine,
                           const std::function<bool()>& linger,
                           Clock::time_point deadline)
      EXCLUDES(lend_mu_, customers_mu_);
  // Called when an answer completed a request that the only waiting thread
  // waits for: that thread is likely to wait again soon, so the receive
  // thread stays out of the socket for kLinger, for it to take over.
  void LingerForWaiter() EXCLUDES(lend_mu_);
  // Called by a thread about to wait for something only the receive
  // thread delivers: a lingering or parked receive thread goes back to the
  // socket now, or as soon as the current loan ends.
  void RecallReceiver() EXCLUDES(lend_mu_);
  static constexpr auto kLinger = std::chrono::milliseconds(1);
  // During back-to-back loans the receive thread checks back at least this
  // often (or after twice the last loan's length, if longer).
  static constexpr auto kMaxCheckBack = std::chrono::milliseconds(8);
  // Loans so far, and those after which the receive thread lingered on
  // (tests).
  int64_t loans() EXCLUDES(lend_mu_) {
    std::lock_guard<std::mutex> l(lend_mu_);
    return loans_;
  }
  int64_t lingered_loans() EXCLUDES(lend_mu_) {
    std::lock_guard<std::mutex> l(lend_mu_);
    return lingered_loans_;
  }
  // Ok while the node is running (started, not failed nor finalized).
  Status CheckRunning() const EXCLUDES(mu_);
  // Sends msg (DATA) to node `to`, filling sender, recipient and job id.
  Status SendData(int to, Message* msg);

  // For SchedulerCore and the control plane.
  Status SendTo(int to, Message* msg, int priority);
  void AliasConn(int id, int conn) EXCLUDES(mu_);
  void InstallTable(std::unique_ptr<NodeTable> table, int my_rank)
      EXCLUDES(mu_);
  void MarkBarrierDone(int groups, int64_t seq) EXCLUDES(mu_);
  void MarkTerminated() EXCLUDES(mu_);
  // Fails the job once: pending requests and waits end with `reason`; the
  // scheduler tells every other node (except `skip_id`); then the failure
  // handler runs.
  void Fail(const Status& reason, bool broadcast, int skip_id = 0);
  // The Van's report of a refused handshake on connection `conn`.
  // Outgoing connection `conn` dropped: before the job's TERMINATE, the
  // node behind it goes to the liveness clocks' drop rule (net/liveness.h).
  void OnDrop(int conn) EXCLUDES(mu_);
  void OnHandshakeFailure(int conn, const std::string& endpoint,
                          const std::string& why, int in_a_row);
  Van* van() { return van_.get(); }

 private:
  enum class State { kCreated, kStarting, kRunning, kFinalizing, kStopped };

  void RecvLoop();
  // Receives one message and decodes it: false when none arrived or it was
  // dropped (undecodable: logged).
  StatusOr<bool> RecvMessage(std::string* token, Message* msg);
  void TimerLoop();
  void Handle(const std::string& token, Message&& msg);
  void HandleBeforeTable(const std::string& token, Message&& msg);
  void HandleNodeTable(const std::string& token, const Message& msg);
  void DeliverData(Message&& msg) EXCLUDES(customers_mu_);
  void DeliverEarly() EXCLUDES(customers_mu_);
  void Drop(const std::string& token, const std::string& why);
  void CheckPeers(int64_t now_ns);
  void SendHeartbeats();
  int ConnOf(int id) EXCLUDES(mu_);
  Status WaitFor(std::unique_lock<std::mutex>* lock, Duration timeout,
                 const std::function<bool()>& done, const std::string& what)
      REQUIRES(mu_);
  void StopThreads(Duration linger);

  const NodeConfig config_;
  const PostofficeOptions options_;
  std::unique_ptr<Van> van_;
  std::unique_ptr<SchedulerCore> scheduler_;
  std::string host_;
  int port_ = 0;
  std::string root_ip_;
  std::atomic<int> rank_{0};
  std::atomic<int> my_id_{0};
  std::atomic<const NodeTable*> table_{nullptr};
  std::unique_ptr<NodeTable> table_owned_;  // written once, under mu_
  int64_t start_ns_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  State state_ GUARDED_BY(mu_) = State::kCreated;
  bool failed_ GUARDED_BY(mu_) = false;
  Status failure_ GUARDED_BY(mu_);
  bool terminated_ GUARDED_BY(mu_) = false;
  FailureHandler on_failure_ GUARDED_BY(mu_);
  std::map<int, int64_t> barrier_entered_ GUARDED_BY(mu_);
  std::map<int, int64_t> barrier_done_ GUARDED_BY(mu_);
  std::map<int, int> conn_alias_ GUARDED_BY(mu_);

  // Held while a Customer runs Accept; recursive because a handler running
  // inside Accept may fail the job (Abort), which aborts every Customer.
  std::recursive_mutex customers_mu_;
  std::map<int, Customer*> customers_ GUARDED_BY(customers_mu_);
  std::map<int, std::deque<Message>> early_ GUARDED_BY(customers_mu_);
  size_t early_count_ GUARDED_BY(customers_mu_) = 0;
  std::atomic<bool> early_pending_{false};

  std::atomic<bool> stop_{false};
  std::thread recv_thread_;
  // The receive side lent to a waiting thread (ReceiveWhileWaiting): the
  // receive thread parks (lingers) out of Recv; a waiter may then receive
  // (lent_); it gives back what it did not take.
  std::mutex lend_mu_;
  std::condition_variable lend_cv_;
  bool parked_ GUARDED_BY(lend_mu_) = false;
  bool lent_ GUARDED_BY(lend_mu_) = false;
  // Somebody waits for the receive thread: the current loan hands back.
  bool recall_ GUARDED_BY(lend_mu_) = false;
  Clock::time_point linger_until_ GUARDED_BY(lend_mu_);
  // How long the last loan lasted; loans so far (tests).
  Duration last_loan_ GUARDED_BY(lend_mu_){};
  int64_t loans_ GUARDED_BY(lend_mu_) = 0;
  int64_t lingered_loans_ GUARDED_BY(lend_mu_) = 0;
  std::optional<std::pair<std::string, Message>> handback_
      GUARDED_BY(lend_mu_);
  std::thread timer_thread_;
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  // Lines about dropped input: at most 10 per 10 s.
  LogRateLimiter bad_input_log_;
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_PS_POSTOFFICE_IMPL_H_
