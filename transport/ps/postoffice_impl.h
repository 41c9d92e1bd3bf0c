// PostofficeImpl: the machinery behind a Postoffice. A receive thread decodes
// and checks every message and dispatches it (control messages here, DATA to
// Customers); a timer thread sends heartbeats and watches deadlines and
// peers; the scheduler role adds a SchedulerCore.
#ifndef KVTRAIN_TRANSPORT_PS_POSTOFFICE_IMPL_H_
#define KVTRAIN_TRANSPORT_PS_POSTOFFICE_IMPL_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/logging.h"
#include "net/liveness.h"
#include "net/node_config.h"
#include "base/thread_annotations.h"
#include "transport/ps/message.h"
#include "transport/ps/ps.h"
#include "transport/ps/van.h"

namespace kvtrain {
namespace ps {

// An application object (KVWorker, KVServer) that receives DATA messages.
class Customer {
 public:
  virtual ~Customer() = default;
  virtual int app_id() const = 0;
  // Whether it answers requests (a KVServer) rather than sends them: one
  // node may hold one of each per application id (a server passing updates
  // on to other servers sends requests too); requests go to the one that
  // answers, answers to the other.
  virtual bool serves() const { return false; }
  // Every DATA message for app_id, on the receive thread, in arrival order.
  // Must not register or unregister customers.
  virtual void Accept(Message&& msg) = 0;
  // The job failed: complete whatever is pending with `reason`.
  virtual void Abort(const Status& reason) = 0;
  // Server node `id` died and the job goes on with replicas of its key
  // ranges (PostofficeImpl::LoseServer): send again what it left
  // unanswered. On the thread that noticed; may send.
  virtual void PeerLost(int /*id*/) {}
  // Worker node `id` died and was started again (PostofficeImpl::TakeBack):
  // forget what the dead process asked and was not answered (answers now
  // reach the new process, which never asked). On the receive thread.
  virtual void PeerBack(int /*id*/) {}
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

// `old`'s entry with the address, token and pid of the process `n` that
// took its place (a worker started again).
NodeEntry WithNewProcess(const NodeEntry& old, const wire::NodeInfo& n);

// Whether the servers and workers among `nodes` all advertised a same-host
// address ("<host identity>@<name>") of one host identity.
bool OnOneHost(const std::vector<NodeEntry>& nodes);

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
  // Ids of the nodes in `groups` (Group bits), lost ones left out.
  std::vector<int> Members(int groups) const;
  // A server that died in a job with server replicas: it no longer counts
  // in barriers or the final handshake. True the first time for `id`.
  bool MarkLost(int id) const;
  bool Lost(int id) const;
  // A server started again holds its key ranges again: it counts as a
  // copy, after those of a lower generation (0: never died).
  void MarkLive(int id, int64_t generation) const;
  int64_t Generation(int id) const;
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
  std::unique_ptr<std::atomic<bool>[]> lost_;  // indexed like nodes_
  std::unique_ptr<std::atomic<int64_t>[]> generation_;  // indexed like nodes_
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
  // KVTRAIN_SERVER_REPLICAS.
  int server_replicas() const { return config_.server_replicas; }
  // The node ids of the live servers holding key range `range`, the
  // range's primary first: servers range, range+1, ... (mod the number of
  // servers), server_replicas() + 1 of them, lost ones left out.
  std::vector<int> RangeServers(int range) const;
  // Whether server `rank` is part of the job (false once lost).
  bool ServerLive(int rank) const;
  // Server `id` died (`why`) in a job with replicas: if every key range
  // still has a live copy, it leaves the job (NodeTable::MarkLost), the
  // customers re-send what it owed them, and the scheduler tells every
  // node; otherwise the job fails, naming the range left without a copy.
  void LoseServer(int id, const std::string& why);
  // Worker `e.id` died and was started again (KVTRAIN_WORKER_RESTARTS): its
  // entry becomes `e` (the new process's address and token) in a new node
  // table; the old table stays alive, as readers may hold it.
  void ReplaceNode(const NodeEntry& e) EXCLUDES(mu_);
  // How many times this node's process was started again (0: the first);
  // from its node table.
  int incarnation() const { return incarnation_.load(); }
  // A server started again: its key ranges are filled (NODE_LIVE to the
  // scheduler).
  Status ReportFilled();
  // NODE_LIVE from the scheduler: a server started again is a copy again.
  void MarkServerLive(int id, int64_t generation);
  // Servers started again and taken in, not yet copies (by rank).
  bool ServerReturning(int rank) const EXCLUDES(mu_);
  // Sets it; returns whether it was.
  bool SetReturning(int id, bool returning) EXCLUDES(mu_);
  // Null before the node table arrived.
  const NodeTable* table() const { return table_.load(); }
  // PS_HEARTBEAT_INTERVAL / PS_HEARTBEAT_TIMEOUT as liveness options.
  net::LivenessOptions liveness_options() const;
  // How long a worker's Wait polls for an answer (answer_poll.h): as set,
  // else kWaitSpinUs, or kWaitSpinUsOneHost once the node table shows the
  // whole job on one host.
  int wait_spin_us() const;
  // Whether the node table arrived and puts every node on this host.
  bool one_host() const;
  // "server 1 (10.0.0.2:41233)" or "node 17" when unknown.
  std::string PeerName(int id) const;

  // Customers. Register fails if app_id is taken on this node.
  Status RegisterCustomer(Customer* c) EXCLUDES(customers_mu_);
  void UnregisterCustomer(Customer* c) EXCLUDES(customers_mu_);
  // Ok while the node is running (started, not failed nor finalized).
  Status CheckRunning() const EXCLUDES(mu_);
  // Sends msg (DATA) to node `to`, filling sender, recipient and job id.
  Status SendData(int to, Message* msg);
  // A buffer for values to send to node `to` (Van::NewSendBuffer).
  SendBuffer NewSendBuffer(int to, size_t size);

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
  // A peer's name from the node table, else its connection token.
  std::string PeerName(const std::string& token);
  void TimerLoop();
  void Handle(const std::string& token, Message&& msg);
  void HandleBeforeTable(const std::string& token, Message&& msg);
  void HandleNodeTable(const std::string& token, const Message& msg);
  // NODE_BACK from the scheduler: takes the restarted worker or server in
  // (new table, connection, customers' PeerBack) and tells the scheduler.
  void TakeBack(const std::string& token, const wire::NodeInfo& info);
  // Whether this node keeps a connection to `e` (`my_rank`: this node's,
  // before its table is installed; -1: rank()).
  bool Connects(const NodeEntry& e, int my_rank = -1) const;
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
  std::unique_ptr<NodeTable> table_owned_;  // under mu_
  // Tables replaced by ReplaceNode (a table() reader may still hold one).
  std::vector<std::unique_ptr<NodeTable>> retired_tables_ GUARDED_BY(mu_);
  std::atomic<int> incarnation_{0};
  std::set<int> returning_ GUARDED_BY(mu_);  // node ids
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
  std::thread timer_thread_;
  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  // Lines about dropped input: at most 10 per 10 s.
  LogRateLimiter bad_input_log_;
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_POSTOFFICE_IMPL_H_
