#include "kvstore/sparse/server.h"

#include <cstring>
#include <sstream>

#include "base/logging.h"

namespace kvtrain {
namespace sparse {
namespace {

Status KeyBad(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("key " + key + ": " + what);
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
      if (!st->sync || info.step() <= st->step) return AnswerPull(st, req, server);
      if (info.step() > st->step + kSyncWindow) {
        server->RespondError(
            meta, KeyBad(st->table->key(),
                         meta.sender_name + " pulled step " + std::to_string(info.step()) +
                             ", more than " + std::to_string(kSyncWindow) +
                             " steps ahead of step " + std::to_string(st->step) +
                             ", the last this server applied"));
        return;
      }
      st->pulls.push_back(req);
      return;
    case proto::KV_SPARSE_SAVE:
      // After the sender's last push was applied, like a pull.
      if (st->sync && info.step() > st->step) {
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
  if (!st->sync) {
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
    if (s.ok()) {
      server->Respond(push.meta);
    } else {
      server->RespondError(push.meta, s);
    }
    return;
  }
  if (!Admit(st, push, server)) return;
  CompleteStep(st, server);
  // Pushes queued for the steps that follow.
  while (!st->later.empty() && st->later.begin()->first == st->step + 1) {
    bool complete = false;
    auto range = st->later.equal_range(st->step + 1);
    std::vector<Deferred> next;
    for (auto it = range.first; it != range.second; ++it) next.push_back(it->second);
    st->later.erase(range.first, range.second);
    for (const Deferred& d : next) complete = Admit(st, d, server) || complete;
    if (!complete) break;
    CompleteStep(st, server);
  }
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
  server->Respond(push.meta);
  return st->num_pushed == num_workers_;
}

void SparseServer::CompleteStep(KeyState* st, ps::KVServer* server) {
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
  st->sum.Clear();
  st->pushed.assign(st->pushed.size(), false);
  st->num_pushed = 0;
  ++st->step;
  std::vector<Deferred> waiting;
  waiting.swap(st->pulls);
  for (const Deferred& d : waiting) {
    if (d.info.step() <= st->step) {
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
