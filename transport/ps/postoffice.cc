// Postoffice life cycle: creation, start and failure (barriers and
// finalize: postoffice_barrier.cc).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <random>
#include <sstream>

#include "base/file.h"
#include "base/trace.h"
#include "transport/ps/answer_poll.h"
#include "transport/ps/postoffice_impl.h"
#include "transport/ps/scheduler.h"
#include "transport/ps/zmq_van.h"
#include "net/address.h"
#include "net/shm.h"

namespace kvtrain {
namespace ps {

namespace {

std::string NewToken(Role role) {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(getpid()) ^
                      static_cast<uint64_t>(NowNs()));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%c-%016llx", RoleName(role)[0],
                static_cast<unsigned long long>(gen()));
  return buf;
}

[[noreturn]] void DefaultFailureHandler() {
  google::FlushLogFiles(google::GLOG_INFO);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(kJobFailedExitCode);
}

}  // namespace

// ---- Postoffice (public) ----

StatusOr<std::unique_ptr<Postoffice>> Postoffice::Create(
    const NodeConfig& config, const PostofficeOptions& options) {
  ZmqVanOptions vo;
  vo.send_window_bytes = options.send_window_bytes;
  vo.poll_interval = options.poll_interval;
  if (options.same_host) {
    vo.same_host = *options.same_host;
  } else {
    KV_ASSIGN_OR_RETURN(vo.same_host, GetBoolVar(ProcessEnv(), env::kSameHostIpc, true));
  }
  if (options.shm_bytes) {
    vo.shm_bytes = *options.shm_bytes;
  } else {
    KV_ASSIGN_OR_RETURN(vo.shm_bytes, GetIntVar(ProcessEnv(), env::kShmBytes, vo.shm_bytes, 0,
                                                static_cast<int64_t>(net::kMaxShmArenaBytes)));
  }
  if (options.shm_ring) {
    vo.shm_ring = *options.shm_ring;
  } else {
    KV_ASSIGN_OR_RETURN(vo.shm_ring, GetBoolVar(ProcessEnv(), env::kShmRing, true));
  }
  vo.verbose = config.verbose;
  if (options.sealed_lane) {
    vo.sealed_lane = *options.sealed_lane;
  } else {
    KV_ASSIGN_OR_RETURN(vo.sealed_lane,
                        GetBoolVar(ProcessEnv(), env::kSealedLane, true));
  }
  if (options.job_key) {
    vo.key = *options.job_key;
  } else {
    KV_ASSIGN_OR_RETURN(vo.key, net::JobKey::FromEnv(ProcessEnv()));
  }
  LOG_IF(INFO, config.verbose >= 1)
      << RoleName(config.role) << ": "
      << (vo.key.secure() ? "CURVE security on, job key " + vo.key.Fingerprint()
                          : std::string("CURVE security off"));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<ZmqVan> van,
                      ZmqVan::Create(NewToken(config.role), vo));
  return CreateWithVan(config, std::move(van), options);
}

StatusOr<std::unique_ptr<Postoffice>> Postoffice::CreateWithVan(
    const NodeConfig& config, std::unique_ptr<Van> van,
    const PostofficeOptions& given) {
  PostofficeOptions options = given;
  if (!options.wait_spin_us && ProcessEnv()(env::kWaitSpinUs).has_value()) {
    KV_ASSIGN_OR_RETURN(int64_t spin, GetIntVar(ProcessEnv(), env::kWaitSpinUs,
                                                kWaitSpinUs, 0, 1000000));
    options.wait_spin_us = static_cast<int>(spin);
  }
  auto impl = std::make_unique<PostofficeImpl>(config, std::move(van), options);
  KV_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Postoffice>(new Postoffice(std::move(impl)));
}

Postoffice::Postoffice(std::unique_ptr<PostofficeImpl> impl)
    : impl_(std::move(impl)) {}
Postoffice::~Postoffice() = default;

Status Postoffice::Start() { return impl_->Start(); }
Status Postoffice::Barrier(int groups, Duration timeout) {
  return impl_->Barrier(groups, timeout);
}
Status Postoffice::Finalize(Duration timeout) {
  return impl_->Finalize(timeout);
}
void Postoffice::Abort(const std::string& reason) { impl_->Abort(reason); }
void Postoffice::SetFailureHandler(FailureHandler handler) {
  impl_->SetFailureHandler(std::move(handler));
}
Role Postoffice::role() const { return impl_->role(); }
int Postoffice::rank() const { return impl_->rank(); }
int Postoffice::num_workers() const { return impl_->config().num_workers; }
int Postoffice::num_servers() const { return impl_->config().num_servers; }
std::string Postoffice::name() const { return impl_->name(); }
std::string Postoffice::host() const { return impl_->host(); }
int Postoffice::port() const { return impl_->port(); }
std::vector<KeyRange> Postoffice::ServerKeyRanges() const {
  return impl_->ServerKeyRanges();
}
bool Postoffice::OneHost() const { return impl_->one_host(); }
int Postoffice::server_replicas() const { return impl_->server_replicas(); }
int Postoffice::worker_restarts() const { return impl_->config().worker_restarts; }
int Postoffice::incarnation() const { return impl_->incarnation(); }
std::vector<int> Postoffice::RangeServerRanks(int range) const {
  std::vector<int> ranks;
  const NodeTable* t = impl_->table();
  for (int id : impl_->RangeServers(range)) {
    const NodeEntry* e = t == nullptr ? nullptr : t->ById(id);
    if (e != nullptr) ranks.push_back(e->rank);
  }
  return ranks;
}
bool Postoffice::ServerReturning(int rank) const { return impl_->ServerReturning(rank); }
Status Postoffice::ReportFilled() { return impl_->ReportFilled(); }
bool Postoffice::ServerLive(int rank) const { return impl_->ServerLive(rank); }
int Postoffice::verbose() const { return impl_->verbose(); }

bool PostofficeImpl::one_host() const {
  const NodeTable* t = table();
  return t != nullptr && OnOneHost(t->nodes());
}

int PostofficeImpl::wait_spin_us() const {
  return WaitSpinUs(options_.wait_spin_us, one_host());
}

// ---- PostofficeImpl: life cycle ----

PostofficeImpl::PostofficeImpl(const NodeConfig& config,
                               std::unique_ptr<Van> van,
                               const PostofficeOptions& options)
    : config_(config),
      options_(options),
      van_(std::move(van)),
      bad_input_log_(10, std::chrono::seconds(10)) {}

PostofficeImpl::~PostofficeImpl() { StopThreads(Duration::zero()); }

Status PostofficeImpl::Init() {
  const std::vector<net::NetInterface> ifs = net::ListInterfaces();
  KV_ASSIGN_OR_RETURN(host_, net::AdvertisedHost(config_, ifs));
  StatusOr<std::string> root = net::ResolveIPv4(config_.root_uri);
  if (!root.ok()) {
    return root.status().Annotate(std::string(env::kRootUri) + "=\"" +
                                  config_.root_uri + "\"");
  }
  root_ip_ = *root;
  const bool sched = role() == Role::kScheduler;
  StatusOr<int> bound =
      van_->Bind(sched ? config_.root_port : config_.node_port);
  if (!bound.ok()) {
    const std::string var = sched ? env::kRootPort : env::kNodePort;
    const int want = sched ? config_.root_port : config_.node_port;
    return bound.status().Annotate(std::string(RoleName(role())) +
                                   " cannot listen on " + var + "=" +
                                   std::to_string(want));
  }
  port_ = *bound;
  van_->SetLogName(name());
  van_->SetHandshakeFailureHandler(
      [this](int conn, const std::string& endpoint, const std::string& why,
             int in_a_row, bool final) {
        OnHandshakeFailure(conn, endpoint, why, final ? INT_MAX : in_a_row);
      });
  van_->SetDropHandler([this](int conn) { OnDrop(conn); });
  if (sched) scheduler_ = std::make_unique<SchedulerCore>(this);
  if (sched && !config_.scheduler_port_file.empty()) {
    // The launcher waits for this file: the port is ours before anyone
    // else learns it, so nothing can take it in between.
    KV_RETURN_IF_ERROR(WriteFileAtomic(config_.scheduler_port_file,
                                       std::to_string(port_))
                           .Annotate(env::kSchedulerPortFile));
  }
  LOG_IF(INFO, verbose() >= 1)
      << name() << ": listening on port " << port_ << ", advertising " << host_
      << " (" << config_.DebugString() << ")";
  return Status::OK();
}

std::string PostofficeImpl::name() const {
  return NodeName(role(), my_id() == 0 ? -1 : rank(), host_, port_);
}

std::string PostofficeImpl::PeerName(int id) const {
  const NodeTable* t = table();
  const NodeEntry* e = t == nullptr ? nullptr : t->ById(id);
  if (e != nullptr) return e->name;
  if (id == kSchedulerId) {
    return NodeName(Role::kScheduler, 0, config_.root_uri, config_.root_port);
  }
  return "node " + std::to_string(id);
}

std::vector<KeyRange> PostofficeImpl::ServerKeyRanges() const {
  std::vector<KeyRange> ranges;
  const uint64_t n = static_cast<uint64_t>(config_.num_servers);
  if (n == 0) return ranges;
  const uint64_t step = UINT64_MAX / n;
  for (uint64_t r = 0; r < n; ++r) {
    ranges.push_back({r * step, r + 1 == n ? UINT64_MAX : (r + 1) * step});
  }
  return ranges;
}

std::vector<int> PostofficeImpl::RangeServers(int range) const {
  std::vector<int> ids;
  const int n = config_.num_servers;
  if (n == 0 || range < 0 || range >= n) return ids;
  const NodeTable* t = table();
  for (int j = 0; j <= config_.server_replicas; ++j) {
    const int id = ServerId((range + j) % n);
    if (t == nullptr || !t->Lost(id)) ids.push_back(id);
  }
  // Servers started again come after the copies that never died, in the
  // order they came back: the primary stays where it is.
  if (t != nullptr) {
    std::stable_sort(ids.begin(), ids.end(),
                     [t](int a, int b) { return t->Generation(a) < t->Generation(b); });
  }
  return ids;
}

bool PostofficeImpl::ServerLive(int rank) const {
  const NodeTable* t = table();
  return rank >= 0 && rank < config_.num_servers &&
         (t == nullptr || !t->Lost(ServerId(rank)));
}

void PostofficeImpl::LoseServer(int id, const std::string& why) {
  const NodeTable* t = table();
  const NodeEntry* e = t == nullptr ? nullptr : t->ById(id);
  if (e == nullptr || e->role != Role::kServer || config_.server_replicas == 0) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_ || state_ == State::kStopped) return;
  }
  // Who served each range before: the ranges whose primary changes.
  std::vector<int> before;
  for (int r = 0; r < config_.num_servers; ++r) {
    const std::vector<int> ids = RangeServers(r);
    before.push_back(ids.empty() ? 0 : ids[0]);
  }
  if (!t->MarkLost(id)) {
    // Lost already: a server started again died before it held its key
    // ranges; what was sent to it is owed by nobody.
    if (!SetReturning(id, false)) return;
    t->liveness().SetWatched(t->IndexOf(id), false);
    LOG_IF(WARNING, scheduler_ != nullptr)
        << name() << ": " << net::DeathMessage(e->name, why)
        << " before it held its key ranges again; the job goes on without it";
    {
      std::lock_guard<std::recursive_mutex> l(customers_mu_);
      for (auto& [app, c] : customers_) c->PeerLost(id);
    }
    if (scheduler_) scheduler_->OnLost(id, why);
    return;
  }
  t->liveness().SetWatched(t->IndexOf(id), false);
  const std::string death = net::DeathMessage(e->name, why);
  std::ostringstream moved;
  for (int r = 0; r < config_.num_servers; ++r) {
    const std::vector<int> ids = RangeServers(r);
    if (ids.empty()) {
      Fail(Status::Unavailable(
               death + "; key range " + std::to_string(r) + " has no copy left (servers " +
               std::to_string(r) + " to " +
               std::to_string((r + config_.server_replicas) % config_.num_servers) +
               " are dead; " + env::kServerReplicas + "=" +
               std::to_string(config_.server_replicas) + ")"),
           scheduler_ != nullptr, id);
      return;
    }
    if (before[static_cast<size_t>(r)] == id) {
      moved << (moved.tellp() > 0 ? ", " : "") << "key range " << r << " to "
            << PeerName(ids[0]);
    }
  }
  const std::string line = death + "; the job goes on" +
                           (moved.tellp() > 0 ? ", " + moved.str() : std::string()) +
                           " (" + env::kServerReplicas + "=" +
                           std::to_string(config_.server_replicas) + ")";
  // One line per death in the job's output: the scheduler's.
  if (scheduler_) {
    LOG(WARNING) << name() << ": " << line;
  } else {
    LOG_IF(INFO, verbose() >= 1) << name() << ": " << line;
  }
  {
    std::lock_guard<std::recursive_mutex> l(customers_mu_);
    for (auto& [app, c] : customers_) c->PeerLost(id);
  }
  if (scheduler_) scheduler_->OnLost(id, why);
}

void PostofficeImpl::ReplaceNode(const NodeEntry& back) {
  const NodeTable* old = table();
  if (old == nullptr || old->IndexOf(back.id) < 0) return;
  std::vector<NodeEntry> entries = old->nodes();
  entries[static_cast<size_t>(old->IndexOf(back.id))] = back;
  auto t = std::make_unique<NodeTable>(std::move(entries), old->job_id(), liveness_options());
  for (const NodeEntry& e : t->nodes()) {
    if (old->Lost(e.id)) t->MarkLost(e.id);
    if (old->Generation(e.id) > 0) {
      t->MarkLive(e.id, old->Generation(e.id));
      if (old->Lost(e.id)) t->MarkLost(e.id);
    }
    // Watched as InstallTable chose; each clock starts now.
    t->liveness().SetWatched(
        t->IndexOf(e.id),
        e.id != my_id() && !old->Lost(e.id) && (scheduler_ != nullptr || e.id == kSchedulerId));
  }
  // The job is past its start: silence is judged by the heartbeat timeout
  // (the new process speaks as soon as it has the table).
  t->liveness().EndStartup();
  std::lock_guard<std::mutex> l(mu_);
  retired_tables_.push_back(std::move(table_owned_));
  table_owned_ = std::move(t);
  table_.store(table_owned_.get());
}

Status PostofficeImpl::ReportFilled() {
  Message m;
  m.meta.set_command(wire::NODE_LIVE);
  return SendTo(kSchedulerId, &m, kControlPriority);
}

bool PostofficeImpl::ServerReturning(int rank) const {
  std::lock_guard<std::mutex> l(mu_);
  return returning_.count(ServerId(rank)) > 0;
}

bool PostofficeImpl::SetReturning(int id, bool returning) {
  std::lock_guard<std::mutex> l(mu_);
  const bool was = returning_.count(id) > 0;
  if (returning) {
    returning_.insert(id);
  } else {
    returning_.erase(id);
  }
  return was;
}

void PostofficeImpl::MarkServerLive(int id, int64_t generation) {
  const NodeTable* t = table();
  const NodeEntry* e = t == nullptr ? nullptr : t->ById(id);
  if (e == nullptr || e->role != Role::kServer) return;
  SetReturning(id, false);
  t->MarkLive(id, generation);
  t->liveness().SetWatched(t->IndexOf(id), id != my_id() && scheduler_ != nullptr);
  LOG_IF(INFO, verbose() >= 1) << name() << ": " << e->name << " holds its key ranges again";
}

void PostofficeImpl::SetFailureHandler(FailureHandler handler) {
  std::lock_guard<std::mutex> l(mu_);
  on_failure_ = std::move(handler);
}

Status PostofficeImpl::WaitFor(std::unique_lock<std::mutex>* lock,
                               Duration timeout,
                               const std::function<bool()>& done,
                               const std::string& what) {
  const auto deadline = Clock::now() + timeout;
  while (!failed_ && !done()) {
    if (cv_.wait_until(*lock, deadline) == std::cv_status::timeout) {
      if (failed_ || done()) break;
      std::ostringstream os;
      os << name() << ": " << what << " did not complete within "
         << std::chrono::duration<double>(timeout).count() << " s";
      return Status::DeadlineExceeded(os.str());
    }
  }
  if (failed_) return failure_;
  return Status::OK();
}

Status PostofficeImpl::Start() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (state_ != State::kCreated) {
      return Status::FailedPrecondition(name() + ": Start called twice");
    }
    state_ = State::kStarting;
    start_ns_ = NowNs();
  }
  recv_thread_ = std::thread([this] { RecvLoop(); });
  timer_thread_ = std::thread([this] { TimerLoop(); });
  if (!scheduler_) {
    KV_RETURN_IF_ERROR(
        van_->Connect(kSchedulerId, root_ip_, config_.root_port, ""));
    Message reg;
    reg.meta.set_command(wire::REGISTER);
    wire::NodeInfo* me = reg.meta.mutable_control()->add_nodes();
    me->set_role(ToWireRole(role()));
    me->set_rank(config_.requested_rank);
    me->set_host(host_);
    me->set_port(port_);
    me->set_num_workers(config_.num_workers);
    me->set_num_servers(config_.num_servers);
    me->set_server_replicas(config_.server_replicas);
    me->set_pid(getpid());
    me->set_token(token());
    me->set_same_host(van_->SameHostAddress());
    me->set_launch_job_id(config_.job_id);
    LOG_IF(INFO, verbose() >= 1)
        << name() << ": registering with the scheduler at " << config_.root_uri
        << ":" << config_.root_port;
    KV_RETURN_IF_ERROR(SendTo(kSchedulerId, &reg, kControlPriority));
  }
  const Duration startup = std::chrono::duration_cast<Duration>(
      std::chrono::duration<double>(config_.startup_timeout_s));
  {
    // The timer thread fails the job at the start-up deadline; the extra
    // time here only guards against a bug there.
    std::unique_lock<std::mutex> l(mu_);
    KV_RETURN_IF_ERROR(WaitFor(
        &l, startup + 2 * options_.startup_grace,
        [this] { return table() != nullptr; }, "start-up"));
  }
  KV_RETURN_IF_ERROR(Barrier(kAllGroups, startup + options_.startup_grace));
  // Every node is up: from now on silence is judged by the heartbeat
  // timeout (before, a scheduler busy sending a large job its node table
  // could be silent longer; KVTRAIN_STARTUP_TIMEOUT judged it).
  if (const NodeTable* t = table()) t->liveness().EndStartup();
  return Status::OK();
}

void PostofficeImpl::InstallTable(std::unique_ptr<NodeTable> table,
                                  int my_rank) {
  std::lock_guard<std::mutex> l(mu_);
  const NodeEntry* me = table->ByToken(token());
  CHECK(me != nullptr) << "node table without this node";
  rank_.store(my_rank);
  my_id_.store(me->id);
  trace::SetProcessName(std::string(RoleName(me->role)) + " " + std::to_string(my_rank));
  // The scheduler watches every node; the others watch the scheduler (a
  // dead server or worker reaches them as the scheduler's abort).
  for (const NodeEntry& e : table->nodes()) {
    table->liveness().SetWatched(
        table->IndexOf(e.id),
        e.id != me->id && (scheduler_ != nullptr || e.id == kSchedulerId));
  }
  table_owned_ = std::move(table);
  table_.store(table_owned_.get());
  if (state_ == State::kStarting) state_ = State::kRunning;
  cv_.notify_all();
}

net::LivenessOptions PostofficeImpl::liveness_options() const {
  net::LivenessOptions o;
  o.heartbeat_interval_s = config_.heartbeat_interval_s;
  o.heartbeat_timeout_s = config_.heartbeat_timeout_s;
  // In a large job's start a node may take in the table and connect to its
  // peers for longer than the heartbeat timeout before its first message.
  o.first_message_timeout_s = config_.startup_timeout_s;
  return o;
}

void PostofficeImpl::AliasConn(int id, int conn) {
  std::lock_guard<std::mutex> l(mu_);
  conn_alias_[id] = conn;
}

void PostofficeImpl::OnDrop(int conn) {
  const int64_t now = NowNs();
  int id = conn;
  {
    std::lock_guard<std::mutex> l(mu_);
    // Every node leaves after the scheduler's TERMINATE (the job's
    // goodbye): a drop before it is a death.
    if ((state_ != State::kRunning && state_ != State::kFinalizing) ||
        terminated_ || failed_) {
      return;
    }
    for (const auto& [node, c] : conn_alias_) {
      if (c == conn) id = node;
    }
  }
  const NodeTable* t = table();
  if (t == nullptr) return;
  const int index = t->IndexOf(id);
  if (index < 0) return;
  LOG_IF(INFO, verbose() >= 1)
      << name() << ": the connection to " << t->nodes()[index].name
      << " dropped";
  t->liveness().Dropped(index, now);
}

int PostofficeImpl::ConnOf(int id) {
  if (!scheduler_) return id;
  std::lock_guard<std::mutex> l(mu_);
  auto it = conn_alias_.find(id);
  return it == conn_alias_.end() ? id : it->second;
}

void PostofficeImpl::StopThreads(Duration linger) {
  {
    std::lock_guard<std::mutex> l(timer_mu_);
    stop_.store(true);
    timer_cv_.notify_all();
  }
  if (van_ != nullptr) van_->Wake();
  if (timer_thread_.joinable()) timer_thread_.join();
  if (recv_thread_.joinable()) recv_thread_.join();
  van_->Close(linger);
}

Status PostofficeImpl::CheckRunning() const {
  std::lock_guard<std::mutex> l(mu_);
  if (failed_) return failure_;
  if (state_ == State::kRunning || state_ == State::kFinalizing) {
    return Status::OK();
  }
  return Status::FailedPrecondition(
      name() + (state_ == State::kStopped ? ": already finalized"
                                          : ": not started (call Start)"));
}

Status PostofficeImpl::SendTo(int to, Message* msg, int priority) {
  wire::Header& h = msg->meta;
  h.set_sender(my_id());
  h.set_recipient(to);
  const NodeTable* t = table();
  if (t != nullptr) h.set_job_id(t->job_id());
  LOG_IF(INFO, verbose() >= 2 && h.command() == wire::DATA)
      << name() << " -> " << PeerName(to) << ": " << DescribeData(*msg);
  Status s = van_->Send(ConnOf(to), priority, EncodeMessage(msg));
  if (!s.ok()) return s.Annotate(name() + " -> " + PeerName(to));
  return s;
}

SendBuffer PostofficeImpl::NewSendBuffer(int to, size_t size) {
  return van_->NewSendBuffer(ConnOf(to), size);
}

Status PostofficeImpl::SendData(int to, Message* msg) {
  return SendTo(to, msg, msg->meta.priority());
}

// ---- Failure ----

void PostofficeImpl::OnHandshakeFailure(int conn, const std::string& endpoint,
                                        const std::string& why, int in_a_row) {
  // Connections of a non-scheduler are named by the peer's node id.
  const std::string peer =
      scheduler_ ? "the node at " + endpoint : PeerName(conn) + " at " + endpoint;
  // On the same-host socket (no CURVE) a handshake that keeps failing is a
  // peer too busy to finish in time (hundreds of nodes on a few cores), or
  // a dead one, which the liveness rule names: ZeroMQ tries again, and
  // only a protocol error (final) ends the job.
  const bool same_host = endpoint.rfind("ipc://", 0) == 0;
  if (in_a_row < options_.handshake_failures_fatal ||
      (same_host && in_a_row != INT_MAX)) {
    KV_LOG_LIMITED(WARNING, bad_input_log_)
        << name() << ": the handshake with " << peer << " failed: " << why;
    return;
  }
  Fail(Status::Unavailable(name() + ": " + peer +
                           " refused the connection: " + why),
       /*broadcast=*/true);
}

void PostofficeImpl::Abort(const std::string& reason) {
  Fail(Status::Aborted(name() + ": " + reason), /*broadcast=*/true);
}

void PostofficeImpl::Fail(const Status& reason, bool broadcast, int skip_id) {
  FailureHandler handler;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_ || state_ == State::kStopped) return;
    failed_ = true;
    failure_ = reason;
    handler = on_failure_;
    cv_.notify_all();
  }
  LOG(ERROR) << name() << ": job failed: " << reason.message();
  {
    std::lock_guard<std::recursive_mutex> l(customers_mu_);
    for (auto& [app, c] : customers_) c->Abort(reason);
  }
  if (broadcast) {
    Message m;
    m.meta.set_command(wire::ABORT);
    m.meta.mutable_control()->set_reason(reason.message());
    const NodeTable* t = table();
    if (scheduler_ && t == nullptr) {
      scheduler_->AbortPending(reason.message());
    } else if (scheduler_) {
      for (const NodeEntry& e : t->nodes()) {
        if (e.id == kSchedulerId || e.id == skip_id) continue;
        Message copy = m;
        SendTo(e.id, &copy, kControlPriority);
      }
    } else if (t != nullptr) {
      SendTo(kSchedulerId, &m, kControlPriority);
    }
    // Give the ABORT messages a chance to leave before a handler exits.
    van_->Flush(std::chrono::seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (handler) {
    handler(reason);
  } else {
    DefaultFailureHandler();
  }
}

}  // namespace ps
}  // namespace kvtrain
