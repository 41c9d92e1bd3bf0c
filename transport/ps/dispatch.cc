// The receive thread (decode, check, dispatch every message) and the timer
// thread (heartbeats, start-up deadline, dead peers) of a Postoffice.
#include <algorithm>
#include <climits>
#include <set>
#include <sstream>

#include "transport/ps/postoffice_impl.h"
#include "net/same_host.h"
#include "transport/ps/scheduler.h"

namespace kvtrain {
namespace ps {
namespace {

// DATA messages held for an application id nobody registered yet.
constexpr size_t kMaxEarlyMessages = 10000;

}  // namespace

void PostofficeImpl::RecvLoop() {
  while (!stop_.load()) {
    std::string token;
    Message msg;
    StatusOr<bool> got = RecvMessage(&token, &msg);
    if (early_pending_.load()) DeliverEarly();
    if (!got.ok()) {
      KV_LOG_LIMITED(WARNING, bad_input_log_) << name() << ": " << got.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (*got) Handle(token, std::move(msg));
  }
}

StatusOr<bool> PostofficeImpl::RecvMessage(std::string* token, Message* msg) {
  RawMessage raw;
  KV_ASSIGN_OR_RETURN(bool got, van_->Recv(&raw));
  if (!got) return false;
  if (!raw.error.ok()) {
    const NodeTable* t = table();
    const bool from_peer = t != nullptr && t->ByToken(raw.token) != nullptr;
    if (raw.error.code() == Status::Code::kDataLoss && from_peer) {
      // A peer's message was lost on the way: the job cannot go on
      // without it, so it fails now, naming the peer, instead of hanging.
      Abort(name() + " lost a message from " + PeerName(raw.token) + ": " +
            raw.error.message());
      return false;
    }
    if (raw.error.code() != Status::Code::kUnavailable || !from_peer) {
      Drop(raw.token, raw.error.message());
      return false;
    }
    // A peer's message this process cannot read is lost: the job cannot go
    // on without it, so it fails now, naming the peer, instead of hanging.
    // (From a connection that is no peer of the job, it is only dropped.)
    Abort(name() + " cannot read a message from " + PeerName(raw.token) + ": " +
          raw.error.message() + " (KVTRAIN_SHM_BYTES=0 turns shared memory off)");
    return false;
  }
  Status s = DecodeMessage(std::move(raw.frames), msg, raw.in_shm);
  if (!s.ok()) {
    Drop(raw.token, s.message());
    return false;
  }
  *token = std::move(raw.token);
  return true;
}

std::string PostofficeImpl::PeerName(const std::string& token) {
  const NodeTable* t = table();
  const NodeEntry* e = t == nullptr ? nullptr : t->ByToken(token);
  return e != nullptr ? e->name : "connection " + PrintableToken(token);
}

void PostofficeImpl::Drop(const std::string& token, const std::string& why) {
  KV_LOG_LIMITED(WARNING, bad_input_log_)
      << name() << ": dropped a message from " << PeerName(token) << ": " << why;
}

void PostofficeImpl::Handle(const std::string& token, Message&& msg) {
  const wire::Header& h = msg.meta;
  if (h.command() == wire::REGISTER) {
    if (scheduler_) {
      scheduler_->OnRegister(token, msg);
    } else {
      Drop(token, "REGISTER sent to a " + std::string(RoleName(role())));
    }
    return;
  }
  const NodeTable* t = table();
  if (t == nullptr) {
    HandleBeforeTable(token, std::move(msg));
    return;
  }
  const NodeEntry* from = t->ByToken(token);
  if (from == nullptr) return Drop(token, "unregistered peer");
  if (h.sender() != from->id) {
    return Drop(token, "sender id " + std::to_string(h.sender()) +
                           " does not match its connection");
  }
  if (h.job_id() != t->job_id()) {
    return Drop(token, "job id \"" + h.job_id() + "\" is not this job's");
  }
  if (h.recipient() != my_id()) {
    return Drop(token, "addressed to node " + std::to_string(h.recipient()));
  }
  t->Touch(from->id, NowNs());
  const wire::Control& c = h.control();
  switch (h.command()) {
    case wire::DATA:
      LOG_IF(INFO, verbose() >= 2)
          << name() << " <- " << from->name << ": " << DescribeData(msg);
      return DeliverData(std::move(msg));
    case wire::HEARTBEAT:
      return;
    case wire::BARRIER:
      if (!scheduler_) return Drop(token, "BARRIER sent to a non-scheduler");
      return scheduler_->OnBarrier(from->id, c.barrier_group(),
                                   c.barrier_seq());
    case wire::BARRIER_DONE:
      if (from->id != kSchedulerId) return Drop(token, "BARRIER_DONE");
      return MarkBarrierDone(c.barrier_group(), c.barrier_seq());
    case wire::TERMINATE:
      if (scheduler_) return scheduler_->OnTerminate(from->id);
      if (from->id != kSchedulerId) return Drop(token, "TERMINATE");
      return MarkTerminated();
    case wire::NODE_LOST:
      if (scheduler_ || from->id != kSchedulerId || c.nodes_size() != 1) {
        return Drop(token, "NODE_LOST");
      }
      return LoseServer(c.nodes(0).id(), c.reason());
    case wire::NODE_LIVE:
      if (scheduler_) return scheduler_->OnFilled(from->id);
      if (from->id != kSchedulerId || c.nodes_size() != 1) return Drop(token, "NODE_LIVE");
      return MarkServerLive(c.nodes(0).id(), c.generation());
    case wire::NODE_BACK:
      if (scheduler_) {
        if (c.nodes_size() != 1) return Drop(token, "NODE_BACK");
        return scheduler_->OnBackTaken(from->id, c.nodes(0).id());
      }
      if (from->id != kSchedulerId || c.nodes_size() != 1) return Drop(token, "NODE_BACK");
      return TakeBack(token, c.nodes(0));
    case wire::ABORT:
      if (!scheduler_ && from->id != kSchedulerId) {
        return Drop(token, "ABORT from a non-scheduler");
      }
      return Fail(Status::Aborted(c.reason()), scheduler_ != nullptr, from->id);
    default:
      return Drop(token, "unexpected " + wire::Command_Name(h.command()));
  }
}

void PostofficeImpl::HandleBeforeTable(const std::string& token,
                                       Message&& msg) {
  const wire::Header& h = msg.meta;
  // Only the scheduler writes to a node before the table, and it echoes
  // the node's own registration (with its random token).
  const wire::Control& c = h.control();
  const bool echoes_me =
      !scheduler_ && c.nodes_size() > 0 &&
      (h.command() == wire::ABORT ? c.nodes(0).token() == this->token() : true);
  if (echoes_me && h.command() == wire::NODE_TABLE) {
    return HandleNodeTable(token, msg);
  }
  if (echoes_me && h.command() == wire::ABORT) {
    return Fail(Status::Aborted(c.reason()), false);
  }
  Drop(token, wire::Command_Name(h.command()) + " before the job started");
}

void PostofficeImpl::HandleNodeTable(const std::string& token,
                                     const Message& msg) {
  const wire::Control& c = msg.meta.control();
  std::vector<NodeEntry> entries;
  std::set<int> ids;
  int servers = 0, workers = 0, my_rank = -1;
  bool scheduler_ok = false;
  for (const wire::NodeInfo& n : c.nodes()) {
    NodeEntry e;
    if (!FromWireRole(n.role(), &e.role)) return Drop(token, "bad node table");
    e.rank = n.rank();
    e.id = n.id();
    e.host = n.host();
    e.port = n.port();
    e.token = n.token();
    e.same_host = n.same_host();
    e.pid = n.pid();
    e.name = NodeName(e.role, e.rank, e.host, e.port);
    const int want = e.role == Role::kScheduler ? kSchedulerId
                     : e.role == Role::kServer  ? ServerId(e.rank)
                                                : WorkerId(e.rank);
    if (e.rank < 0 || e.id != want || !ids.insert(e.id).second) {
      return Drop(token, "node table with inconsistent ranks");
    }
    if (e.role == Role::kScheduler) scheduler_ok = e.token == token;
    if (e.role == Role::kServer) ++servers;
    if (e.role == Role::kWorker) ++workers;
    if (e.token == this->token()) {
      if (e.role != role() || e.host != host_ || e.port != port_) {
        return Drop(token, "node table misplaces this node");
      }
      my_rank = e.rank;
    }
    entries.push_back(std::move(e));
  }
  if (!scheduler_ok || my_rank < 0 || servers != config_.num_servers ||
      workers != config_.num_workers || msg.meta.job_id().empty()) {
    return Drop(token, "node table does not match this job");
  }
  auto t = std::make_unique<NodeTable>(std::move(entries), msg.meta.job_id(),
                                       liveness_options());
  for (int id : c.lost()) t->MarkLost(id);
  for (const auto& [id, generation] : c.generations()) {
    const bool lost = t->Lost(id);
    t->MarkLive(id, generation);
    if (lost) t->MarkLost(id);
  }
  for (const NodeEntry& e : t->nodes()) {
    if (!Connects(e, my_rank)) continue;
    Status s = van_->Connect(e.id, e.host, e.port, e.same_host);
    if (!s.ok())
      return Fail(s.Annotate(name() + ": connecting to " + e.name), false);
    LOG_IF(INFO, verbose() >= 1)
        << name() << ": connecting to " << e.name
        << (van_->SameHostAddress().empty() || net::SameHostEndpoint(e.same_host).empty()
                ? " over TCP"
                : " over the same-host socket");
  }
  LOG_IF(INFO, verbose() >= 1)
      << NodeName(role(), my_rank, host_, port_) << ": assigned rank "
      << my_rank << " of " << (role() == Role::kServer ? servers : workers)
      << " " << RoleName(role()) << "s (job " << msg.meta.job_id() << ")";
  if (c.incarnation() > 0) {
    incarnation_.store(c.incarnation());
    std::lock_guard<std::mutex> l(mu_);
    // A worker started again passes the barriers the job has passed: its
    // program enters them again on its way back to where the job is.
    for (const auto& [groups, seq] : c.barriers_passed()) barrier_done_[groups] = seq;
    LOG(WARNING) << NodeName(role(), my_rank, host_, port_)
                 << ": rejoined the running job (started again, time " << c.incarnation() << ")";
  }
  InstallTable(std::move(t), my_rank);
}

bool PostofficeImpl::Connects(const NodeEntry& e, int my_rank) const {
  if (my_rank < 0) my_rank = rank();
  if (e.id == kSchedulerId) return false;
  // Servers and workers only talk to the other role (and the scheduler,
  // connected already), as in ps-lite: a mesh of every node would open
  // n^2 connections, most of them never used.
  if (e.role != role()) return true;
  // With server replicas a server also talks to the servers whose key
  // ranges it copies and to those copying its own: within R of its rank.
  const int n = config_.num_servers, r = config_.server_replicas;
  if (r == 0 || role() != Role::kServer) return false;
  const int d = ((e.rank - my_rank) % n + n) % n;
  return d != 0 && (d <= r || n - d <= r);
}

void PostofficeImpl::TakeBack(const std::string& token, const wire::NodeInfo& n) {
  const NodeTable* t = table();
  const NodeEntry* old = t->ById(n.id());
  const bool worker = old != nullptr && old->role == Role::kWorker && n.role() == wire::WORKER &&
                      n.id() == WorkerId(n.rank());
  const bool server = old != nullptr && old->role == Role::kServer && n.role() == wire::SERVER &&
                      n.id() == ServerId(n.rank()) && config_.server_replicas > 0;
  if (!(worker || server) || n.rank() != old->rank || n.token().empty()) {
    return Drop(token, "NODE_BACK naming no worker or server of this job");
  }
  const NodeEntry e = WithNewProcess(*old, n);
  ReplaceNode(e);
  if (server) SetReturning(e.id, true);
  if (Connects(e)) {
    van_->Disconnect(e.id);
    const Status s = van_->Connect(e.id, e.host, e.port, e.same_host);
    if (!s.ok()) return Fail(s.Annotate(name() + ": connecting to " + e.name), false);
  }
  {
    std::lock_guard<std::recursive_mutex> l(customers_mu_);
    for (auto& [app, c] : customers_) c->PeerBack(e.id);
  }
  LOG_IF(INFO, verbose() >= 1) << name() << ": took in " << e.name << ", started again";
  Message ack;
  ack.meta.set_command(wire::NODE_BACK);
  ack.meta.mutable_control()->add_nodes()->set_id(e.id);
  SendTo(kSchedulerId, &ack, kControlPriority);
}

namespace {

// customers_'s key: an application id and which side of its requests.
int Channel(int app, bool serves) { return app * 2 + (serves ? 1 : 0); }

}  // namespace

Status PostofficeImpl::RegisterCustomer(Customer* c) {
  std::lock_guard<std::recursive_mutex> l(customers_mu_);
  const int channel = Channel(c->app_id(), c->serves());
  if (customers_.count(channel)) {
    return Status::AlreadyExists("application id " +
                                 std::to_string(c->app_id()) +
                                 " is already used on " + name());
  }
  customers_[channel] = c;
  if (early_.count(channel)) {
    early_pending_.store(true);
    van_->Wake();  // the receive loop delivers them
  }
  return Status::OK();
}

void PostofficeImpl::UnregisterCustomer(Customer* c) {
  std::lock_guard<std::recursive_mutex> l(customers_mu_);
  auto it = customers_.find(Channel(c->app_id(), c->serves()));
  if (it != customers_.end() && it->second == c) customers_.erase(it);
}

void PostofficeImpl::DeliverData(Message&& msg) {
  std::lock_guard<std::recursive_mutex> l(customers_mu_);
  const int app = msg.meta.app_id();
  const int channel = Channel(app, msg.meta.request());
  auto it = customers_.find(channel);
  if (it == customers_.end()) {
    if (early_count_ >= kMaxEarlyMessages) {
      KV_LOG_LIMITED(WARNING, bad_input_log_)
          << name() << ": dropped a message for application id " << app
          << ": nothing registered it and " << kMaxEarlyMessages
          << " messages already wait";
      return;
    }
    early_[channel].push_back(std::move(msg));
    ++early_count_;
    return;
  }
  auto early = early_.find(channel);
  if (early != early_.end()) {
    for (Message& m : early->second) it->second->Accept(std::move(m));
    early_count_ -= early->second.size();
    early_.erase(early);
  }
  it->second->Accept(std::move(msg));
}

void PostofficeImpl::DeliverEarly() {
  std::lock_guard<std::recursive_mutex> l(customers_mu_);
  early_pending_.store(false);
  for (auto it = early_.begin(); it != early_.end();) {
    auto c = customers_.find(it->first);
    if (c == customers_.end()) {
      ++it;
      continue;
    }
    for (Message& m : it->second) c->second->Accept(std::move(m));
    early_count_ -= it->second.size();
    it = early_.erase(it);
  }
}

// ---- Timer thread ----

void PostofficeImpl::TimerLoop() {
  const auto tick = std::chrono::duration<double>(
      net::PeerLiveness::TickSeconds(liveness_options()));
  for (;;) {
    {
      std::unique_lock<std::mutex> l(timer_mu_);
      timer_cv_.wait_for(l, tick, [this] { return stop_.load(); });
      if (stop_.load()) return;
    }
    State state;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (failed_) continue;
      state = state_;
    }
    const int64_t now = NowNs();
    if (state == State::kStarting && table() == nullptr) {
      const double waited = (now - start_ns_) / 1e9;
      if (scheduler_ && waited > config_.startup_timeout_s) {
        Fail(Status::DeadlineExceeded(
                 scheduler_->StartupFailure(config_.startup_timeout_s)),
             true);
      } else if (!scheduler_ && waited > config_.startup_timeout_s +
                                             std::chrono::duration<double>(
                                                 options_.startup_grace)
                                                 .count()) {
        Fail(Status::DeadlineExceeded(
                 "no node table from the scheduler at " + config_.root_uri +
                 ":" + std::to_string(config_.root_port) + " within " +
                 net::FormatSeconds(waited) + " (is the scheduler running? " +
                 env::kRootUri + "/" + env::kRootPort + ")"),
             false);
      }
      continue;
    }
    const NodeTable* t = table();
    if (t == nullptr ||
        (state != State::kRunning && state != State::kFinalizing)) {
      continue;
    }
    CheckPeers(now);
    if (scheduler_) scheduler_->CheckAway();
    if (t->liveness().HeartbeatDue(now)) SendHeartbeats();
  }
}

void PostofficeImpl::SendHeartbeats() {
  const NodeTable* t = table();
  if (t == nullptr) return;
  for (const NodeEntry& e : t->nodes()) {
    if (e.id == my_id()) continue;
    if (!scheduler_ && e.id != kSchedulerId) continue;
    Message m;
    m.meta.set_command(wire::HEARTBEAT);
    SendTo(e.id, &m, kControlPriority);
  }
}

void PostofficeImpl::CheckPeers(int64_t now_ns) {
  const NodeTable* t = table();
  if (t == nullptr) return;
  for (const net::PeerLiveness::Death& d : t->liveness().Check(now_ns)) {
    const NodeEntry& e = t->nodes()[d.peer];
    if (e.role == Role::kServer && config_.server_replicas > 0) {
      LoseServer(e.id, d.why);
      continue;
    }
    if (e.role == Role::kWorker && config_.worker_restarts > 0 && scheduler_) {
      // The launcher starts it again: the job waits for it.
      t->liveness().SetWatched(d.peer, false);
      scheduler_->OnWorkerGone(e.id, net::DeathMessage(e.name, d.why));
      continue;
    }
    Fail(Status::Unavailable(net::DeathMessage(e.name, d.why)),
         scheduler_ != nullptr, e.id);
    return;
  }
}

}  // namespace ps
}  // namespace kvtrain
