#include "kvstore/sparse/server.h"

#include <cstring>
#include <sstream>
#include <utility>

#include "base/logging.h"

namespace kvtrain {
namespace sparse {
namespace {

Status KeyBad(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("key " + key + ": " + what);
}

// Why a sync request of `step` on table `st` can never be answered (a
// finished worker never pushed it), or "".
template <typename KeyState>
std::string Blocking(const kv::FinishedWorkers* finished, const KeyState& st, int64_t step) {
  if (finished == nullptr) return "";
  return finished->Blocking("it", st.step, [&st](int r) { return st.pushed[r]; }, step);
}

}  // namespace

SparseServer::KeyState* SparseServer::Find(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : it->second.get();
}

void SparseServer::Handle(proto::KVCommand command, const ps::RequestMeta& meta,
                          const ps::KVPairs& data, const proto::RequestInfo& info,
                          ps::KVServer* server) {
  if (data.num_keys() != 1) {
    server->RespondError(meta, Status::InvalidArgument(
                                   "row-sparse requests carry one key per server, got " +
                                   std::to_string(data.num_keys())));
    return;
  }
  if (command == proto::KV_SPARSE_INIT) return Init(meta, data, info, server);
  KeyState* st = Find(data.key(0));
  if (st == nullptr) {
    server->RespondError(meta, Status::NotFound(
                                   "row-sparse server key " + std::to_string(data.key(0)) +
                                   " was not initialised (from " + meta.sender_name + ")"));
    return;
  }
  std::lock_guard<std::mutex> lock(st->mu);
  const Deferred req{meta, data, info};
  switch (command) {
    case proto::KV_SPARSE_PUSH:
      return Push(st, req, server);
    case proto::KV_SPARSE_PULL:
      if (!st->sync || info.step() <= st->answered) return AnswerPull(st, req, server);
      if (info.step() > st->step + kSyncWindow) {
        server->RespondError(
            meta, KeyBad(st->table->key(),
                         meta.sender_name + " pulled step " + std::to_string(info.step()) +
                             ", more than " + std::to_string(kSyncWindow) +
                             " steps ahead of step " + std::to_string(st->step) +
                             ", the last this server applied"));
        return;
      }
      if (const std::string why = Blocking(finished_, *st, info.step()); !why.empty()) {
        server->RespondError(meta, KeyBad(st->table->key(), why));
        return;
      }
      st->pulls.push_back(req);
      return;
    case proto::KV_SPARSE_SAVE:
      // After the sender's last push was applied, like a pull.
      if (st->sync && info.step() > st->answered) {
        st->pulls.push_back(req);
        return;
      }
      return Save(st, req, server);
    case proto::KV_SPARSE_LOAD:
      return Load(st, req, server);
    case proto::KV_SPARSE_STATS:
      server->Respond(meta, ps::KVPairs::From(
                                {data.key(0)},
                                ps::Blob::FromString(
                                    st->table->stats().ToProto().SerializeAsString())));
      return;
    default:
      server->RespondError(meta, Status::InvalidArgument("unknown row-sparse command " +
                                                         std::to_string(command)));
  }
}

void SparseServer::Init(const ps::RequestMeta& meta, const ps::KVPairs& data,
                        const proto::RequestInfo& info, ps::KVServer* server) {
  const std::string& name = info.key_name();
  StatusOr<std::unique_ptr<Table>> table = Table::Create(name, info.sparse());
  if (!table.ok()) {
    server->RespondError(meta, table.status());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(data.key(0));
  if (it != keys_.end()) {
    const Table& old = *it->second->table;
    if (old.key() == name &&
        old.spec().SerializeAsString() == info.sparse().SerializeAsString()) {
      server->Respond(meta);  // the same declaration again (a rank 0 restart)
    } else {
      server->RespondError(meta, KeyBad(name, "already initialised as a different table"));
    }
    return;
  }
  auto st = std::make_unique<KeyState>(std::move(table).value());
  st->key = data.key(0);
  st->sync = info.mode() != proto::KV_ASYNC;
  st->pushed.assign(static_cast<size_t>(num_workers_), false);
  if (replicated_) st->parts.resize(static_cast<size_t>(num_workers_));
  keys_.emplace(data.key(0), std::move(st));
  server->Respond(meta);
}

Status SparseServer::Parse(KeyState* st, const Deferred& req, bool with_rows,
                           const int64_t** ids, size_t* n, const float** rows) {
  const Table& t = *st->table;
  const size_t row_bytes =
      sizeof(int64_t) + (with_rows ? static_cast<size_t>(t.width()) * sizeof(float) : 0);
  const size_t bytes = req.data.vals.size();
  if (bytes % row_bytes != 0) {
    return KeyBad(t.key(), req.meta.sender_name + " sent " + std::to_string(bytes) +
                               " bytes, not a whole number of " +
                               (with_rows ? "(id, row of " + std::to_string(t.width()) +
                                                " floats) pairs"
                                          : std::string("int64 row ids")));
  }
  *n = bytes / row_bytes;
  *ids = reinterpret_cast<const int64_t*>(req.data.vals.data());
  if (rows != nullptr) {
    *rows = reinterpret_cast<const float*>(req.data.vals.data() + *n * sizeof(int64_t));
  }
  return CheckIds(t.key(), t.spec(), *ids, *n);
}

void SparseServer::Push(KeyState* st, const Deferred& push, ps::KVServer* server) {
  if (!st->sync) return AsyncPush(st, push, server);
  Admit(st, push, server);
  Advance(st, server);
}

void SparseServer::AsyncPush(KeyState* st, const Deferred& push, ps::KVServer* server) {
  const int rank = push.meta.sender_rank;
  const int64_t step = push.info.step();
  const bool worker =
      push.meta.sender_role == Role::kWorker && rank >= 0 && rank < num_workers_;
  if (forward_ && !worker) {
    server->RespondError(push.meta, KeyBad(st->table->key(), push.meta.sender_name +
                                                                 " is not one of the job's " +
                                                                 std::to_string(num_workers_) +
                                                                 " workers"));
    return;
  }
  if (forward_ && push.meta.resent && replica::Applied(st->applied, rank, step)) {
    server->Respond(push.meta);  // applied before (sent again after a failover)
    return;
  }
  const int64_t* ids;
  const float* rows;
  size_t n;
  Status s = Parse(st, push, true, &ids, &n, &rows);
  if (s.ok()) {
    // Async: the push is its own update (ids are unique per sender).
    RowSum sum(st->table->width());
    sum.Add(ids, n, rows);
    const std::shared_ptr<Optimizer> opt = optimizer_();
    s = st->table->Update(sum.ids().data(), sum.size(), sum.rows().data(), opt.get());
  }
  if (!s.ok()) {
    server->RespondError(push.meta, s);
    return;
  }
  if (forward_) {
    replica::Remember(&st->applied, num_workers_, rank, step);
    proto::RequestInfo info;
    info.set_mode(proto::KV_ASYNC);
    info.mutable_replica()->set_step(step);
    info.mutable_replica()->set_worker(rank);
    info.mutable_replica()->set_sparse(true);
    const ps::RequestMeta meta = push.meta;
    if (Forward(st, push.data.key(0), info, push.data.vals,
                [server, meta] { server->Respond(meta); })) {
      return;
    }
  }
  server->Respond(push.meta);
}

void SparseServer::Advance(KeyState* st, ps::KVServer* server) {
  while (!st->forwarding && st->num_pushed == num_workers_) {
    if (CompleteStep(st, server)) return;  // goes on once the copies have it
    FinishStep(st, server);
    AdmitLater(st, server);
  }
}

void SparseServer::AdmitLater(KeyState* st, ps::KVServer* server) {
  auto range = st->later.equal_range(st->step + 1);
  std::vector<Deferred> next;
  for (auto it = range.first; it != range.second; ++it) next.push_back(it->second);
  st->later.erase(range.first, range.second);
  for (const Deferred& d : next) Admit(st, d, server);
}

bool SparseServer::Forward(KeyState* st, uint64_t key, const proto::RequestInfo& info,
                           ps::Blob vals, std::function<void()> then) {
  return replica::ForwardThen(forward_, &st->mu, key, info.SerializeAsString(),
                              std::move(vals), std::move(then));
}

bool SparseServer::Admit(KeyState* st, const Deferred& push, ps::KVServer* server) {
  const std::string& key = st->table->key();
  const int rank = push.meta.sender_rank;
  const int64_t step = push.info.step();
  const std::string& who = push.meta.sender_name;
  if (push.meta.sender_role != Role::kWorker || rank < 0 || rank >= num_workers_) {
    server->RespondError(push.meta, KeyBad(key, who + " is not one of the job's " +
                                                    std::to_string(num_workers_) +
                                                    " workers"));
    return false;
  }
  if (forward_ && push.meta.resent && step <= st->step + 1) {
    // Sent again to this new primary after a failover: a step it holds
    // already (applied, with this push in it) or one it summed the push
    // for. Acknowledged once every copy holds it.
    const bool had = step <= st->step || st->pushed[static_cast<size_t>(rank)];
    if (had && step <= st->answered) {
      server->Respond(push.meta);
      return false;
    }
    if (had) {
      st->acks.push_back(push);
      return false;
    }
  }
  if (step <= st->step || step > st->step + kSyncWindow) {
    server->RespondError(
        push.meta, KeyBad(key, who + " pushed step " + std::to_string(step) +
                                   " but this server is summing step " +
                                   std::to_string(st->step + 1) + " (at most " +
                                   std::to_string(kSyncWindow) + " ahead)"));
    return false;
  }
  const int64_t* ids;
  const float* rows;
  size_t n;
  const Status s = Parse(st, push, true, &ids, &n, &rows);
  if (!s.ok()) {
    server->RespondError(push.meta, s);
    return false;
  }
  if (const std::string why = Blocking(finished_, *st, step); !why.empty()) {
    server->RespondError(push.meta, KeyBad(key, why));
    return false;
  }
  if (step > st->step + 1) {
    // Acknowledged when its step begins, as dense pushes are: a worker that
    // pushes without pulling runs at most a step ahead of the slowest, not
    // into the window's end.
    st->later.emplace(step, push);
    return false;
  }
  if (st->pushed[static_cast<size_t>(rank)]) {
    server->RespondError(push.meta, KeyBad(key, who + " pushed step " + std::to_string(step) +
                                                    " twice"));
    return false;
  }
  if (replicated_) {
    st->parts[static_cast<size_t>(rank)] = push;  // added in CompleteStep
  } else {
    st->sum.Add(ids, n, rows);
  }
  st->pushed[static_cast<size_t>(rank)] = true;
  ++st->num_pushed;
  if (forward_) {
    st->acks.push_back(push);  // once every copy holds the step
  } else {
    server->Respond(push.meta);
  }
  return st->num_pushed == num_workers_;
}

bool SparseServer::CompleteStep(KeyState* st, ps::KVServer* server) {
  if (replicated_) {
    for (Deferred& d : st->parts) {
      const int64_t* ids;
      const float* rows;
      size_t n;
      // Parsed and checked once already, at Admit.
      if (Parse(st, d, true, &ids, &n, &rows).ok()) st->sum.Add(ids, n, rows);
      d = Deferred();
    }
  }
  const std::shared_ptr<Optimizer> opt = optimizer_();
  const Status s =
      st->table->Update(st->sum.ids().data(), st->sum.size(), st->sum.rows().data(), opt.get());
  if (!s.ok()) LOG(ERROR) << "row-sparse update failed: " << s.message();
  // Replicas: the step's ids, then their summed rows, to the other copies.
  std::shared_ptr<std::string> update;
  if (forward_ && s.ok()) {
    const size_t n = st->sum.size();
    update = std::make_shared<std::string>(
        n * sizeof(int64_t) + st->sum.rows().size() * sizeof(float), '\0');
    std::memcpy(update->data(), st->sum.ids().data(), n * sizeof(int64_t));
    std::memcpy(update->data() + n * sizeof(int64_t), st->sum.rows().data(),
                st->sum.rows().size() * sizeof(float));
  }
  st->sum.Clear();
  st->pushed.assign(st->pushed.size(), false);
  st->num_pushed = 0;
  ++st->step;
  if (!s.ok()) {
    FinishStep(st, server, s);
    return false;
  }
  if (update == nullptr) return false;
  proto::RequestInfo info;
  info.set_mode(proto::KV_SYNC);
  info.mutable_replica()->set_step(st->step);
  info.mutable_replica()->set_sparse(true);
  st->forwarding = true;
  const bool sent = Forward(st, st->key, info, ps::Blob(update, update->data(), update->size()),
                            [this, st, server] {
                              st->forwarding = false;
                              FinishStep(st, server);
                              AdmitLater(st, server);
                              Advance(st, server);
                            });
  if (!sent) st->forwarding = false;
  return sent;
}

void SparseServer::FinishStep(KeyState* st, ps::KVServer* server, const Status& s) {
  st->answered = st->step;
  std::vector<Deferred> acks;
  acks.swap(st->acks);
  for (const Deferred& a : acks) server->Respond(a.meta);
  std::vector<Deferred> waiting;
  waiting.swap(st->pulls);
  for (const Deferred& d : waiting) {
    if (d.info.step() <= st->answered) {
      if (s.ok() && d.meta.head == proto::KV_SPARSE_SAVE) {
        Save(st, d, server);
      } else if (s.ok()) {
        AnswerPull(st, d, server);
      } else {
        server->RespondError(d.meta, s);
      }
    } else {
      st->pulls.push_back(d);
    }
  }
}

void SparseServer::AnswerPull(KeyState* st, const Deferred& pull, ps::KVServer* server) {
  const int64_t* ids;
  size_t n;
  const Status s = Parse(st, pull, false, &ids, &n, nullptr);
  if (!s.ok()) {
    server->RespondError(pull.meta, s);
    return;
  }
  const size_t bytes = n * static_cast<size_t>(st->table->width()) * sizeof(float);
  ps::SendBuffer out = server->NewAnswerBuffer(pull.meta, bytes);
  st->table->Read(ids, n, reinterpret_cast<float*>(out.data), /*use=*/!replicated_);
  server->Respond(pull.meta, ps::KVPairs::From({pull.data.key(0)}, out.blob));
}

void SparseServer::Save(KeyState* st, const Deferred& req, ps::KVServer* server) {
  std::string bytes = st->table->Save();
  server->Respond(req.meta, ps::KVPairs::From({req.data.key(0)},
                                              ps::Blob::FromString(std::move(bytes))));
}

void SparseServer::Load(KeyState* st, const Deferred& req, ps::KVServer* server) {
  const Status s = st->table->Load(req.data.vals.ToString());
  if (s.ok()) {
    server->Respond(req.meta);
  } else {
    server->RespondError(req.meta, s);
  }
}

bool SparseServer::Has(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.count(key) > 0;
}

void SparseServer::ApplyReplica(const ps::RequestMeta& meta, const ps::KVPairs& data,
                                const proto::RequestInfo& info, ps::KVServer* server) {
  KeyState* st = data.num_keys() == 1 ? Find(data.key(0)) : nullptr;
  if (st == nullptr) {
    server->RespondError(meta, Status::NotFound(
                                   "a row-sparse update from " + meta.sender_name +
                                   " of a table not held here"));
    return;
  }
  std::lock_guard<std::mutex> lock(st->mu);
  const proto::ReplicaUpdate& r = info.replica();
  const Deferred update{meta, data, info};
  const int64_t* ids;
  const float* rows;
  size_t n;
  Status s = Parse(st, update, true, &ids, &n, &rows);
  if (!s.ok()) {
    server->RespondError(meta, s);
    return;
  }
  const std::shared_ptr<Optimizer> opt = optimizer_();
  if (!st->sync) {
    const int w = r.worker();
    if (w < 0 || w >= num_workers_) {
      server->RespondError(meta, KeyBad(st->table->key(), "an update of worker " +
                                                              std::to_string(w) + " from " +
                                                              meta.sender_name));
      return;
    }
    if (!replica::Applied(st->applied, w, r.step())) {  // else: had it (a worker sent it again)
      RowSum sum(st->table->width());
      sum.Add(ids, n, rows);
      s = st->table->Update(sum.ids().data(), sum.size(), sum.rows().data(), opt.get());
      if (!s.ok()) {
        server->RespondError(meta, s);
        return;
      }
      replica::Remember(&st->applied, num_workers_, w, r.step());
    }
    server->Respond(meta);
    return;
  }
  if (r.step() <= st->step) {  // had it (summed the pushes sent again itself)
    server->Respond(meta);
    return;
  }
  if (r.step() != st->step + 1 || st->forwarding) {
    server->RespondError(meta, KeyBad(st->table->key(),
                                      "step " + std::to_string(r.step()) + " from " +
                                          meta.sender_name + " after step " +
                                          std::to_string(st->step)));
    return;
  }
  // As the primary applied it. Pushes this server summed for the step
  // itself (sent again to it after a failover, before this update, which
  // the lost primary sent before it died, arrived) give way to it; their
  // acknowledgements go with the step's.
  for (Deferred& d : st->parts) d = Deferred();
  st->sum.Clear();
  st->pushed.assign(st->pushed.size(), false);
  st->num_pushed = 0;
  s = st->table->Update(ids, n, rows, opt.get());
  if (!s.ok()) {
    server->RespondError(meta, s);
    return;
  }
  ++st->step;
  server->Respond(meta);
  // If this copy serves the range now (a late update of the lost primary),
  // its own copies get the update too before the answers go.
  st->forwarding = true;
  if (Forward(st, st->key, info, data.vals, [this, st, server] {
        st->forwarding = false;
        FinishStep(st, server);
        AdmitLater(st, server);
        Advance(st, server);
      })) {
    return;
  }
  st->forwarding = false;
  FinishStep(st, server);
  AdmitLater(st, server);
  Advance(st, server);
}

void SparseServer::Snapshot(proto::RangeSnapshot* snap, const std::function<void()>& then) {
  std::vector<KeyState*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, st] : keys_) all.push_back(st.get());
  }
  // Every table locked, in key order: no update runs while they are taken.
  std::vector<std::unique_lock<std::mutex>> locks;
  for (KeyState* st : all) locks.emplace_back(st->mu);
  for (KeyState* st : all) {
    proto::SparseKeySnapshot* k = snap->add_sparse();
    k->set_key(st->key);
    k->set_table(st->table->Save());
    k->set_sync(st->sync);
    k->set_step(st->step);
    for (const std::set<int64_t>& a : st->applied) {
      proto::AppliedSteps* steps = k->add_applied();
      for (int64_t step : a) steps->add_steps(step);
    }
  }
  then();
}

Status SparseServer::Restore(const proto::RangeSnapshot& snap) {
  for (const proto::SparseKeySnapshot& k : snap.sparse()) {
    std::string name;
    proto::SparseTableSpec spec;
    KV_RETURN_IF_ERROR(Table::PeekShard(k.table(), &name, &spec));
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Table> table, Table::Create(name, spec));
    KV_RETURN_IF_ERROR(table->Load(k.table()));
    auto st = std::make_unique<KeyState>(std::move(table));
    st->key = k.key();
    st->sync = k.sync();
    st->step = k.step();
    st->answered = k.step();
    st->pushed.assign(static_cast<size_t>(num_workers_), false);
    if (replicated_) st->parts.resize(static_cast<size_t>(num_workers_));
    for (const proto::AppliedSteps& a : k.applied()) {
      st->applied.emplace_back(a.steps().begin(), a.steps().end());
    }
    std::lock_guard<std::mutex> lock(mu_);
    keys_[k.key()] = std::move(st);
  }
  return Status::OK();
}

void SparseServer::WorkerDone(ps::KVServer* server) {
  std::vector<KeyState*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, st] : keys_) all.push_back(st.get());
  }
  for (KeyState* st : all) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (!st->sync) continue;
    auto fail = [&](const Deferred& d) {
      const std::string why = Blocking(finished_, *st, d.info.step());
      if (why.empty()) return false;
      server->RespondError(d.meta, KeyBad(st->table->key(), why));
      return true;
    };
    std::vector<Deferred> pulls;
    pulls.swap(st->pulls);
    for (Deferred& p : pulls) {
      if (p.info.step() <= st->answered || !fail(p)) st->pulls.push_back(std::move(p));
    }
    for (auto it = st->later.begin(); it != st->later.end();) {
      it = fail(it->second) ? st->later.erase(it) : std::next(it);
    }
  }
}

std::string SparseServer::StatsReport() {
  std::vector<KeyState*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, st] : keys_) all.push_back(st.get());
  }
  std::ostringstream o;
  for (KeyState* st : all) {
    std::lock_guard<std::mutex> lock(st->mu);
    o << "table " << st->table->key() << ": " << st->table->stats().ToString() << "\n";
  }
  return o.str();
}

}  // namespace sparse
}  // namespace kvtrain
