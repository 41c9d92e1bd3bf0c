// SchedulerCore: registrations, ranks, barriers, terminate, deadline report.
#include "transport/ps/scheduler.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <random>
#include <sstream>

namespace kvtrain {
namespace ps {
namespace {

// Rejected registrations get an answer up to this many times (a flood of
// bogus registrations must not open unbounded connections).
constexpr int kMaxRejectReplies = 64;

std::string Addr(const wire::NodeInfo& n) {
  return n.host() + ":" + std::to_string(n.port());
}

std::string RoleWord(wire::Role r) {
  return r == wire::SERVER ? "server" : r == wire::WORKER ? "worker" : "node";
}

std::string NewJobId() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(getpid()));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(gen()));
  return buf;
}

// The roster's view of a registration: servers are group kServers, workers
// kWorkers (OnRegister admits no other role).
net::RosterEntry Entry(const wire::NodeInfo& info, const std::string& token) {
  net::RosterEntry e;
  e.group = info.role() == wire::SERVER ? SchedulerCore::kServers : SchedulerCore::kWorkers;
  e.rank = info.rank();
  e.host = info.host();
  e.port = info.port();
  e.conn = token;
  return e;
}

}  // namespace

SchedulerCore::SchedulerCore(PostofficeImpl* po)
    : po_(po),
      roster_({{"server", po->config().num_servers, false},
               {"worker", po->config().num_workers, false}}) {}

Status SchedulerCore::SendViaConn(int conn, Message* msg) {
  msg->meta.set_sender(kSchedulerId);
  msg->meta.set_recipient(0);
  return po_->van()->Send(conn, kControlPriority, EncodeMessage(msg));
}

void SchedulerCore::Reject(const wire::NodeInfo& info, const std::string& why) {
  KV_LOG_LIMITED(WARNING, log_limiter_)
      << po_->name() << ": rejected the registration of a "
      << RoleWord(info.role()) << " at " << Addr(info) << ": " << why;
  if (++rejected_ > kMaxRejectReplies) return;
  const int conn = next_conn_++;
  if (!po_->van()->Connect(conn, info.host(), info.port(), info.same_host()).ok()) return;
  Message m;
  m.meta.set_command(wire::ABORT);
  *m.meta.mutable_control()->add_nodes() = info;
  m.meta.mutable_control()->set_reason("the scheduler rejected this " +
                                       RoleWord(info.role()) + " at " +
                                       Addr(info) + ": " + why);
  SendViaConn(conn, &m);
}

void SchedulerCore::OnRegister(const std::string& token, const Message& msg) {
  const wire::Control& c = msg.meta.control();
  if (c.nodes_size() != 1 || c.nodes(0).token() != token ||
      (c.nodes(0).role() != wire::SERVER &&
       c.nodes(0).role() != wire::WORKER) ||
      c.nodes(0).host().empty() || c.nodes(0).port() <= 0 ||
      c.nodes(0).port() > 65535) {
    KV_LOG_LIMITED(WARNING, log_limiter_)
        << po_->name() << ": dropped a malformed registration from connection "
        << PrintableToken(token);
    return;
  }
  const wire::NodeInfo& info = c.nodes(0);
  const NodeConfig& cfg = po_->config();
  std::unique_lock<std::mutex> l(mu_);
  // The job's own checks first (a late node is told the job is full, not
  // that it belongs elsewhere), then the roster's.
  std::string why;
  if (roster_.complete()) {
    if (TryRejoin(token, info)) return;
  } else if (info.launch_job_id() != cfg.job_id) {
    auto shown = [](const std::string& id) {
      return id.empty() ? std::string("(unset)") : "\"" + id + "\"";
    };
    why = "it belongs to job " + shown(info.launch_job_id()) + " (" + env::kJobId +
          ") but this scheduler runs job " + shown(cfg.job_id) +
          "; is it pointed at another job's scheduler?";
  } else if (info.num_workers() != cfg.num_workers ||
             info.num_servers() != cfg.num_servers) {
    why = "it was started with " + std::string(env::kNumWorker) + "=" +
          std::to_string(info.num_workers()) + " and " + env::kNumServer + "=" +
          std::to_string(info.num_servers()) + " but the scheduler with " +
          std::to_string(cfg.num_workers) + " and " + std::to_string(cfg.num_servers);
  } else if (info.server_replicas() != cfg.server_replicas) {
    why = "it was started with " + std::string(env::kServerReplicas) + "=" +
          std::to_string(info.server_replicas()) + " but the scheduler with " +
          std::to_string(cfg.server_replicas) +
          " (every node must keep the same copies of the servers' keys)";
  }
  if (why.empty()) why = roster_.Add(Entry(info, token));
  if (why == net::Roster::kRepeat) return;
  if (!why.empty()) return Reject(info, why);
  Pending p;
  p.info = info;
  p.conn = next_conn_++;
  Status s = po_->van()->Connect(p.conn, info.host(), info.port(), info.same_host());
  pending_.push_back(std::move(p));  // pending_[i] is roster_.entries()[i]
  if (!s.ok()) {
    // The node could never be answered: the job cannot start (waiting for
    // the deadline would only hide why).
    l.unlock();
    po_->Fail(Status::Unavailable(po_->name() + " cannot connect to the " +
                                  RoleWord(info.role()) + " at " + Addr(info) + ": " +
                                  s.message()),
              /*broadcast=*/true);
    return;
  }
  LOG_IF(INFO, po_->verbose() >= 1)
      << po_->name() << ": registered a " << RoleWord(info.role()) << " at "
      << Addr(info) << " (pid " << info.pid() << "); " << roster_.Progress();
  if (roster_.complete()) Complete();
}

std::vector<NodeEntry> SchedulerCore::RankNodes() {
  // Within a role: the ranks the nodes asked for (DMLC_RANK) when they are
  // exactly 0..n-1, else ascending address (host, then port).
  std::string note;
  const std::vector<std::vector<size_t>> ranked = roster_.Ranked(&note);
  LOG_IF(WARNING, !note.empty()) << po_->name() << ": " << note;
  std::vector<NodeEntry> entries;
  NodeEntry me;
  me.role = Role::kScheduler;
  me.id = kSchedulerId;
  me.host = po_->host();
  me.port = po_->port();
  me.token = po_->token();
  me.same_host = po_->van()->SameHostAddress();
  me.pid = getpid();
  me.name = NodeName(me.role, 0, me.host, me.port);
  entries.push_back(me);
  for (size_t group = 0; group < ranked.size(); ++group) {
  for (size_t rank = 0; rank < ranked[group].size(); ++rank) {
    const Pending& p = pending_[ranked[group][rank]];
    NodeEntry e;
    const bool server = group == kServers;
    e.role = server ? Role::kServer : Role::kWorker;
    e.rank = static_cast<int>(rank);
    e.id = server ? ServerId(e.rank) : WorkerId(e.rank);
    e.host = p.info.host();
    e.port = p.info.port();
    e.token = p.info.token();
    e.same_host = p.info.same_host();
    e.pid = p.info.pid();
    e.name = NodeName(e.role, e.rank, e.host, e.port);
    po_->AliasConn(e.id, p.conn);
    conn_of_[e.id] = p.conn;
    LOG_IF(INFO, po_->verbose() >= 1)
        << po_->name() << ": rank assigned: " << e.name << " (node id " << e.id
        << ", pid " << e.pid << ")";
    entries.push_back(std::move(e));
  }
  }
  return entries;
}

Message SchedulerCore::TableMessage(const std::vector<NodeEntry>& entries) {
  Message table;
  table.meta.set_command(wire::NODE_TABLE);
  for (const NodeEntry& e : entries) {
    wire::NodeInfo* n = table.meta.mutable_control()->add_nodes();
    n->set_role(ToWireRole(e.role));
    n->set_rank(e.rank);
    n->set_id(e.id);
    n->set_host(e.host);
    n->set_port(e.port);
    n->set_token(e.token);
    n->set_same_host(e.same_host);
    n->set_pid(e.pid);
    n->set_num_workers(po_->config().num_workers);
    n->set_num_servers(po_->config().num_servers);
  }
  return table;
}

void SchedulerCore::Complete() {
  std::vector<NodeEntry> entries = RankNodes();
  const Message table = TableMessage(entries);
  auto t = std::make_unique<NodeTable>(std::move(entries), NewJobId(),
                                       po_->liveness_options());
  const NodeTable* installed = t.get();
  po_->InstallTable(std::move(t), 0);
  for (const NodeEntry& e : installed->nodes()) {
    if (e.id == kSchedulerId) continue;
    Message copy = table;
    Status s = po_->SendTo(e.id, &copy, kControlPriority);
    LOG_IF(WARNING, !s.ok()) << s;
  }
  LOG_IF(INFO, po_->verbose() >= 1)
      << po_->name() << ": all " << pending_.size()
      << " nodes registered; node table sent (job " << installed->job_id()
      << ")";
}

void SchedulerCore::OnBarrier(int from, int groups, int64_t seq) {
  const NodeTable* t = po_->table();
  const NodeEntry* e = t == nullptr ? nullptr : t->ById(from);
  if (e == nullptr || groups <= 0 || groups > kAllGroups ||
      !(groups & GroupOf(e->role)) || seq <= 0) {
    KV_LOG_LIMITED(WARNING, log_limiter_)
        << po_->name() << ": ignored a bad barrier request from node " << from;
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    arrived_[{groups, seq}].insert(from);
  }
  MaybeEndBarrier(groups, seq);
}

bool SchedulerCore::MaybeEndBarrier(int groups, int64_t seq) {
  const NodeTable* t = po_->table();
  const std::vector<int> members = t->Members(groups);
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = arrived_.find({groups, seq});
    if (it == arrived_.end()) return false;
    for (int id : members) {
      if (!it->second.count(id)) return false;
    }
    arrived_.erase(it);
    int64_t& passed = passed_[groups];
    if (seq > passed) passed = seq;
  }
  LOG_IF(INFO, po_->verbose() >= 1)
      << po_->name() << ": barrier over " << GroupName(groups) << " #" << seq
      << " complete (" << members.size() << " nodes)";
  for (int id : members) {
    if (id == kSchedulerId) {
      po_->MarkBarrierDone(groups, seq);
      continue;
    }
    Message m;
    m.meta.set_command(wire::BARRIER_DONE);
    m.meta.mutable_control()->set_barrier_group(groups);
    m.meta.mutable_control()->set_barrier_seq(seq);
    po_->SendTo(id, &m, kControlPriority);
  }
  return true;
}

void SchedulerCore::OnTerminate(int from) {
  const NodeTable* t = po_->table();
  if (t == nullptr) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    finished_.insert(from);
    LOG_IF(INFO, po_->verbose() >= 1)
        << po_->name() << ": " << t->ById(from)->name << " finished ("
        << finished_.size() << " of " << t->Members(kAllGroups).size() << ")";
  }
  MaybeTerminate();
}

void SchedulerCore::MaybeTerminate() {
  const NodeTable* t = po_->table();
  const std::vector<int> live = t->Members(kAllGroups);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (terminating_) return;
    for (int id : live) {
      if (!finished_.count(id)) return;
    }
    terminating_ = true;
  }
  std::vector<int> to = live;
  {
    // Servers started again and still being filled leave with the job.
    std::lock_guard<std::mutex> l(mu_);
    to.insert(to.end(), filling_.begin(), filling_.end());
  }
  for (int id : to) {
    if (id == kSchedulerId) continue;
    Message m;
    m.meta.set_command(wire::TERMINATE);
    po_->SendTo(id, &m, kControlPriority);
  }
  po_->MarkTerminated();
}

void SchedulerCore::OnLost(int id, const std::string& why) {
  const NodeTable* t = po_->table();
  for (int to : t->Members(kAllGroups)) {
    if (to == kSchedulerId) continue;
    Message m;
    m.meta.set_command(wire::NODE_LOST);
    wire::NodeInfo* n = m.meta.mutable_control()->add_nodes();
    n->set_id(id);
    m.meta.mutable_control()->set_reason(why);
    po_->SendTo(to, &m, kControlPriority);
  }
  {
    // A server started again may have registered before the death of the
    // one it replaces was known: taken in now, after every node heard of
    // the death (so none takes the new process for a copy).
    std::lock_guard<std::mutex> l(mu_);
    filling_.erase(id);
    std::vector<Parked> parked;
    parked.swap(parked_);
    for (const Parked& p : parked) {
      if (AwayFor(p.info) != id || !TryRejoin(p.token, p.info)) parked_.push_back(p);
    }
  }
  std::vector<std::pair<int, int64_t>> open;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [barrier, in] : arrived_) open.push_back(barrier);
  }
  for (const auto& [groups, seq] : open) MaybeEndBarrier(groups, seq);
  bool any_finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    any_finished = !finished_.empty();
  }
  if (any_finished) MaybeTerminate();
}

void SchedulerCore::OnWorkerGone(int id, const std::string& death) {
  const NodeConfig& cfg = po_->config();
  std::lock_guard<std::mutex> l(mu_);
  if (finished_.count(id) || away_.count(id)) return;
  away_[id] = {death, std::chrono::steady_clock::now()};
  // One line per event in the job's output: the scheduler's.
  LOG(WARNING) << po_->name() << ": " << death << "; the job waits up to "
               << net::FormatSeconds(cfg.rejoin_timeout_s) << " for it to be started again ("
               << env::kWorkerRestarts << "=" << cfg.worker_restarts << ", "
               << env::kRejoinTimeout << ")";
  // Its new process may have registered already.
  std::vector<Parked> parked;
  parked.swap(parked_);
  for (const Parked& p : parked) {
    if (AwayFor(p.info) < 0 || !TryRejoin(p.token, p.info)) parked_.push_back(p);
  }
}

void SchedulerCore::CheckAway() {
  const NodeConfig& cfg = po_->config();
  std::string failure;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = std::chrono::steady_clock::now();
    for (auto it = parked_.begin(); it != parked_.end();) {
      if (std::chrono::duration<double>(now - it->since).count() <= cfg.rejoin_timeout_s) {
        ++it;
        continue;
      }
      Reject(it->info, "the job is running and no worker of it died for this one to take "
                       "the place of (within " + net::FormatSeconds(cfg.rejoin_timeout_s) +
                       ", " + env::kRejoinTimeout + ")");
      it = parked_.erase(it);
    }
    for (const auto& [id, a] : away_) {
      if (std::chrono::duration<double>(now - a.since).count() <= cfg.rejoin_timeout_s) continue;
      failure = a.death + "; it was not started again within " +
                net::FormatSeconds(cfg.rejoin_timeout_s) + " (" + env::kRejoinTimeout + ", " +
                env::kWorkerRestarts + "=" + std::to_string(cfg.worker_restarts) + ")";
      break;
    }
  }
  if (!failure.empty()) po_->Fail(Status::Unavailable(failure), /*broadcast=*/true);
}

int SchedulerCore::AwayFor(const wire::NodeInfo& info) const {
  if (info.role() == wire::SERVER) {
    // A lost server (server replicas) asked for by its rank.
    const NodeConfig& cfg = po_->config();
    if (cfg.server_replicas == 0 || info.rank() < 0 || info.rank() >= cfg.num_servers) return -1;
    return po_->table()->Lost(ServerId(info.rank())) ? ServerId(info.rank()) : -1;
  }
  if (info.rank() >= 0 && away_.count(WorkerId(info.rank()))) return WorkerId(info.rank());
  if (info.rank() < 0 && away_.size() == 1) return away_.begin()->first;
  return -1;
}

bool SchedulerCore::TryRejoin(const std::string& token, const wire::NodeInfo& info) {
  const NodeConfig& cfg = po_->config();
  const bool server = info.role() == wire::SERVER;
  if ((info.role() != wire::WORKER && !server) || cfg.worker_restarts == 0 ||
      (server && cfg.server_replicas == 0)) {
    return false;
  }
  const int id = AwayFor(info);
  if (id < 0) {
    // Before the old process's death was noticed: it waits for that.
    for (const Parked& p : parked_) {
      if (p.token == token) return true;
    }
    if (info.rank() >= (server ? cfg.num_servers : cfg.num_workers) ||
        (server && info.rank() < 0)) {
      return false;
    }
    parked_.push_back({token, info, std::chrono::steady_clock::now()});
    LOG_IF(INFO, po_->verbose() >= 1)
        << po_->name() << ": a " << RoleWord(info.role()) << " at " << Addr(info)
        << " registered while the job runs: waiting for the death of the one it replaces";
    return true;
  }
  if (info.launch_job_id() != cfg.job_id || info.num_workers() != cfg.num_workers ||
      info.num_servers() != cfg.num_servers || info.server_replicas() != cfg.server_replicas) {
    Reject(info, "it would take the place of a dead " + RoleWord(info.role()) +
                     " but was started with another "
                 "job's settings (" + std::string(env::kJobId) + ", " + env::kNumWorker + ", " +
                 env::kNumServer + " or " + env::kServerReplicas + ")");
    return true;
  }
  const NodeTable* t = po_->table();
  const NodeEntry* old = t->ById(id);
  const int conn = next_conn_++;
  const Status s = po_->van()->Connect(conn, info.host(), info.port(), info.same_host());
  if (!s.ok()) {
    Reject(info, "the scheduler cannot connect to it: " + s.message());
    return true;
  }
  const NodeEntry e = WithNewProcess(*old, info);
  po_->ReplaceNode(e);
  po_->AliasConn(id, conn);
  auto old_conn = conn_of_.find(id);
  if (old_conn != conn_of_.end()) po_->van()->Disconnect(old_conn->second);
  conn_of_[id] = conn;
  const int times = ++incarnation_[id];
  if (server) {
    filling_.insert(id);
    po_->SetReturning(id, true);
    // Watched while it fills: a death then is reported as any server's.
    po_->table()->liveness().SetWatched(po_->table()->IndexOf(id), true);
    LOG(WARNING) << po_->name() << ": " << e.name << " is back (started again, time " << times
                 << "); it copies its key ranges from their primaries";
  } else {
    const double away_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - away_[id].since)
            .count();
    away_.erase(id);
    LOG(WARNING) << po_->name() << ": " << e.name << " is back (started again, time " << times
                 << ") " << net::FormatSeconds(away_s) << " after its death was known";
  }
  std::set<int>& waiting = taking_in_[id];
  waiting.clear();
  wire::NodeInfo back = info;
  back.set_id(id);
  back.set_rank(e.rank);
  for (int to : t->Members(kServerGroup | kWorkerGroup)) {
    if (to == id) continue;
    waiting.insert(to);
    Message m;
    m.meta.set_command(wire::NODE_BACK);
    *m.meta.mutable_control()->add_nodes() = back;
    po_->SendTo(to, &m, kControlPriority);
  }
  if (waiting.empty()) SendRejoinTable(id);
  return true;
}

void SchedulerCore::OnBackTaken(int from, int id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = taking_in_.find(id);
  if (it == taking_in_.end() || !it->second.erase(from) || !it->second.empty()) return;
  SendRejoinTable(id);
}

void SchedulerCore::SendRejoinTable(int id) {
  taking_in_.erase(id);
  const NodeTable* t = po_->table();
  Message table = TableMessage(t->nodes());
  wire::Control* c = table.meta.mutable_control();
  c->set_incarnation(incarnation_[id]);
  for (const auto& [groups, seq] : passed_) (*c->mutable_barriers_passed())[groups] = seq;
  for (const NodeEntry& e : t->nodes()) {
    if (t->Lost(e.id)) c->add_lost(e.id);
    if (t->Generation(e.id) > 0) (*c->mutable_generations())[e.id] = t->Generation(e.id);
  }
  const Status s = po_->SendTo(id, &table, kControlPriority);
  LOG_IF(WARNING, !s.ok()) << s;
}

void SchedulerCore::OnFilled(int from) {
  int64_t generation;
  std::vector<int> to;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!filling_.erase(from)) return;
    generation = ++generations_;
    po_->MarkServerLive(from, generation);
    to = po_->table()->Members(kServerGroup | kWorkerGroup);
  }
  const NodeTable* t = po_->table();
  LOG(WARNING) << po_->name() << ": " << t->ById(from)->name
               << " holds the key ranges it copies again (after the copies that never died)";
  for (int id : to) {
    Message m;
    m.meta.set_command(wire::NODE_LIVE);
    m.meta.mutable_control()->add_nodes()->set_id(from);
    m.meta.mutable_control()->set_generation(generation);
    po_->SendTo(id, &m, kControlPriority);
  }
}

std::string SchedulerCore::StartupFailure(double timeout_s) {
  const NodeConfig& c = po_->config();
  std::lock_guard<std::mutex> l(mu_);
  std::ostringstream os;
  os << "start-up deadline of " << timeout_s << " s (" << env::kStartupTimeout
     << ") passed with " << c.num_workers - roster_.count(kWorkers) << " of "
     << c.num_workers << " workers and "
     << c.num_servers - roster_.count(kServers) << " of " << c.num_servers
     << " servers missing; registered: "
     // A few by address (which hosts did come), not a thousand.
     << roster_.Registered(8);
  return os.str();
}

void SchedulerCore::AbortPending(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  for (const Pending& p : pending_) {
    Message m;
    m.meta.set_command(wire::ABORT);
    *m.meta.mutable_control()->add_nodes() = p.info;
    m.meta.mutable_control()->set_reason(reason);
    SendViaConn(p.conn, &m);
  }
}

}  // namespace ps
}  // namespace kvtrain
