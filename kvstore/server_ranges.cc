// Server replicas: a copy applying its primary's updates, a range's snapshot
// for a server started again, and ServerRanges, the ranges one server holds.
#include "kvstore/server.h"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <utility>

#include "base/trace.h"
#include "kvstore/keys.h"
#include "compression/compression.h"
#include "tensor/blas.h"

namespace kvtrain {
namespace kv {

void ServerHandler::ApplyReplica(const ps::RequestMeta& meta, const ps::KVPairs& data,
                                 const proto::RequestInfo& info, ps::KVServer* server) {
  if (meta.sender_role != Role::kServer || data.num_keys() != 1 || !info.has_replica()) {
    server->RespondError(meta, Status::InvalidArgument(
                                   "a key range's update from " + meta.sender_name +
                                   ", which is no server, or without its key and record"));
    return;
  }
  const uint64_t key = data.key(0);
  const bool sparse = info.replica().sparse();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (filling_ && !(sparse ? sparse_.Has(key) : keys_.count(key) > 0)) {
      // Sent after the primary's snapshot, which has not arrived yet.
      waiting_.push_back({meta, data, info});
      return;
    }
  }
  if (sparse) return sparse_.ApplyReplica(meta, data, info, server);
  KeyState* st = FindOrRespond(key, meta, server);
  if (st == nullptr) return;
  const proto::ReplicaUpdate& r = info.replica();
  std::lock_guard<std::mutex> lock(st->mu);
  if (data.vals.size() != static_cast<size_t>(st->value.nbytes())) {
    server->RespondError(meta, KeyError(Status::Code::kInvalidArgument, st->name,
                                        "an update of " + std::to_string(data.vals.size() / 4) +
                                            " values from " + meta.sender_name +
                                            " for a key of " +
                                            std::to_string(st->value.size()) + " here"));
    return;
  }
  const Tensor grad = View(data.vals);
  if (info.mode() == proto::KV_ASYNC) {
    const int w = r.worker();
    if (w < 0 || w >= num_workers_) {
      server->RespondError(meta, KeyError(Status::Code::kInvalidArgument, st->name,
                                          "an update of worker " + std::to_string(w)));
      return;
    }
    if (!replica::Applied(st->applied, w, r.step())) {  // else: had it (a worker sent it again)
      const Status s = Apply(st, key, grad, /*accumulate=*/true, r.step_scale());
      if (!s.ok()) {
        server->RespondError(meta, s);
        return;
      }
      ++st->updates;
      st->clock[static_cast<size_t>(w)] = std::max(st->clock[static_cast<size_t>(w)], r.step());
      replica::Remember(&st->applied, num_workers_, w, r.step());
    }
    server->Respond(meta);
    return;
  }
  if (r.step() <= st->step) {  // had it (sent again)
    server->Respond(meta);
    return;
  }
  if (r.step() != st->step + 1) {
    server->RespondError(meta, KeyError(Status::Code::kInvalidArgument, st->name,
                                        "step " + std::to_string(r.step()) + " from " +
                                            meta.sender_name + " after step " +
                                            std::to_string(st->step)));
    return;
  }
  // As the primary applied it. Pushes this server summed for the step
  // itself (sent again to it after a failover, before this update, which
  // the lost primary sent before it died, arrived) give way to it: the
  // primary may have answered with it.
  st->first = grad;
  st->merge = Tensor();
  for (Tensor& t : st->parts) t = Tensor();
  CompleteStep(st, key, server);
  server->Respond(meta);
  // If this copy serves the range now (a late update of the lost primary),
  // its own copies get the update too before the answers go.
  if (PassOn(st, key, grad, server)) return;
  FinishStep(st, key, server);
  if (AdmitLater(st, key, server)) Advance(st, key, server);
}

namespace {

std::string FloatBytes(const Tensor& t) {
  return t.defined() ? std::string(static_cast<const char*>(t.raw_data()), t.nbytes())
                     : std::string();
}

Tensor FromFloatBytes(const std::string& b) {
  Tensor t = Tensor::Empty({static_cast<int64_t>(b.size() / sizeof(float))});
  std::memcpy(t.raw_data(), b.data(), b.size());
  return t;
}

}  // namespace

StatusOr<std::string> ServerHandler::Snapshot(const std::function<void()>& joined) {
  proto::RangeSnapshot snap;
  std::vector<std::pair<uint64_t, KeyState*>> states;
  std::shared_ptr<Optimizer> opt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, st] : keys_) states.emplace_back(key, st.get());
    opt = optimizer_;
    snap.set_optimizer(optimizer_body_);
  }
  // Every key locked, in key order: no update runs while the range is
  // taken, so values, steps and optimizer states are of one moment.
  std::vector<std::unique_lock<std::mutex>> locks;
  for (auto& [key, st] : states) locks.emplace_back(st->mu);
  if (opt) {
    KV_ASSIGN_OR_RETURN(std::string states_bytes, opt->SaveStates());
    snap.set_optimizer_states(std::move(states_bytes));
  }
  for (auto& [key, st] : states) {
    proto::KeySnapshot* k = snap.add_keys();
    k->set_key(key);
    k->set_name(st->name);
    k->set_value(FloatBytes(st->value));
    k->set_step(st->step);
    k->set_previous(FloatBytes(st->previous));
    k->set_updates(st->updates);
    k->set_mean_staleness(st->mean_staleness);
    for (int64_t c : st->clock) k->add_clock(c);
    for (int64_t c : st->seen) k->add_seen(c);
    for (const std::set<int64_t>& a : st->applied) {
      proto::AppliedSteps* steps = k->add_applied();
      for (int64_t step : a) steps->add_steps(step);
    }
  }
  // The tables too, and the new copy joins with all of them locked.
  sparse_.Snapshot(&snap, joined);
  return snap.SerializeAsString();
}

void ServerHandler::StartFilling() {
  std::lock_guard<std::mutex> lock(mu_);
  filling_ = true;
}

Status ServerHandler::Restore(const std::string& bytes, ps::KVServer* server) {
  proto::RangeSnapshot snap;
  if (!snap.ParseFromString(bytes)) return Status::DataLoss("a malformed key range snapshot");
  if (!snap.optimizer().empty()) KV_RETURN_IF_ERROR(InstallOptimizer(snap.optimizer()));
  if (std::shared_ptr<Optimizer> opt = optimizer(); opt && !snap.optimizer_states().empty()) {
    KV_RETURN_IF_ERROR(opt->LoadStates(snap.optimizer_states()));
  }
  KV_RETURN_IF_ERROR(sparse_.Restore(snap));
  std::vector<Waiting> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const proto::KeySnapshot& k : snap.keys()) {
      auto st = std::make_unique<KeyState>();
      st->name = k.name();
      st->value = FromFloatBytes(k.value());
      st->step = k.step();
      if (!k.previous().empty()) st->previous = FromFloatBytes(k.previous());
      st->pushed.assign(num_workers_, false);
      if (ordered_sum_) st->parts.resize(static_cast<size_t>(num_workers_));
      st->updates = k.updates();
      st->mean_staleness = k.mean_staleness();
      st->clock.assign(k.clock().begin(), k.clock().end());
      st->seen.assign(k.seen().begin(), k.seen().end());
      st->clock.resize(static_cast<size_t>(num_workers_), 0);
      st->seen.resize(static_cast<size_t>(num_workers_), 0);
      for (const proto::AppliedSteps& a : k.applied()) {
        st->applied.emplace_back(a.steps().begin(), a.steps().end());
      }
      keys_[k.key()] = std::move(st);
    }
    filling_ = false;
    waiting.swap(waiting_);
  }
  // In the order they came: those the snapshot holds already are answered.
  for (const Waiting& w : waiting) ApplyReplica(w.meta, w.data, w.info, server);
  return Status::OK();
}

std::vector<int> ServerRanges::Copies(int range) const {
  std::vector<int> live = po_->RangeServerRanks(range);
  if (live.empty() || live[0] != po_->rank()) return {};
  live.erase(live.begin());
  std::lock_guard<std::mutex> l(joining_mu_);
  auto it = joining_.find(range);
  if (it == joining_.end()) return live;
  for (int r : it->second) {
    if (po_->ServerReturning(r) && std::find(live.begin(), live.end(), r) == live.end()) {
      live.push_back(r);
    }
  }
  return live;
}

int ServerRanges::RangeOf(uint64_t key) const {
  auto after = std::upper_bound(ranges_.begin(), ranges_.end(), key,
                                [](uint64_t k, const ps::KeyRange& r) { return k < r.begin; });
  return static_cast<int>(after - ranges_.begin()) - 1;
}

void ServerRanges::Snapshot(const ps::RequestMeta& meta, const ps::KVPairs& data,
                            ps::KVServer* server) {
  const int range = data.num_keys() == 1 ? RangeOf(data.key(0)) : -1;
  auto it = handlers_.find(range);
  if (meta.sender_role != Role::kServer || it == handlers_.end() || !Primary(range)) {
    server->RespondError(meta, Status::FailedPrecondition(
                                   "a key range's snapshot asked of " + po_->name() +
                                   " by " + meta.sender_name +
                                   ", which is no server, or of a range this server is not "
                                   "the primary of"));
    return;
  }
  const int joiner = meta.sender_rank;
  StatusOr<std::string> snap = it->second->Snapshot([&] {
    std::lock_guard<std::mutex> l(joining_mu_);
    joining_[range].insert(joiner);
  });
  if (!snap.ok()) {
    server->RespondError(meta, snap.status());
    return;
  }
  ps::KVPairs out;
  out.keys = data.keys;
  out.vals = ps::Blob::FromString(std::move(snap).value());
  server->Respond(meta, out);
}

Status ServerRanges::Fill(ps::KVServer* server) {
  for (auto& [range, h] : handlers_) {
    ps::RequestOptions opts;
    opts.head = proto::KV_FILL;
    opts.body = proto::RequestInfo().SerializeAsString();
    KV_ASSIGN_OR_RETURN(int64_t ts,
                        to_copies_->Pull(ps::Blob::FromVector(std::vector<uint64_t>{
                                             ranges_[static_cast<size_t>(range)].begin}),
                                         opts));
    ps::PullResult result;
    KV_RETURN_IF_ERROR(to_copies_->Wait(ts, std::chrono::hours(1), &result)
                           .Annotate("copying key range " + std::to_string(range)));
    if (result.parts.size() != 1) {
      return Status::Internal("key range " + std::to_string(range) + ": no snapshot");
    }
    KV_RETURN_IF_ERROR(h->Restore(result.parts[0].vals.ToString(), server)
                           .Annotate("key range " + std::to_string(range)));
  }
  return po_->ReportFilled();
}

bool ServerRanges::Forward(int range, uint64_t key, std::string body, ps::Blob grad,
                           std::function<void()> done) {
  const std::vector<int> copies = Copies(range);
  if (copies.empty()) return false;
  struct Round {
    std::atomic<int> left;
    std::function<void()> done;
  };
  auto round = std::make_shared<Round>();
  round->left.store(static_cast<int>(copies.size()));
  round->done = std::move(done);
  ps::RequestOptions opts;
  opts.head = proto::KV_REPLICA;
  opts.body = std::move(body);
  const std::string name = po_->name();
  opts.callback = [round, name](const Status& s) {
    // A copy that cannot apply the update is a bug (it holds what the
    // primary holds); a lost one completes ok.
    LOG_IF(ERROR, !s.ok()) << name << ": a copy did not take an update: " << s;
    if (round->left.fetch_sub(1) == 1) round->done();
  };
  const ps::KVPairs kvs = ps::KVPairs::From({key}, std::move(grad));
  for (int c : copies) {
    StatusOr<int64_t> sent = to_copies_->PushToServer(c, kvs, opts);
    if (!sent.ok()) opts.callback(sent.status());
  }
  return true;
}

bool ServerRanges::Primary(int range) const {
  const std::vector<int> live = po_->RangeServerRanks(range);
  return !live.empty() && live[0] == po_->rank();
}

void ServerRanges::Handle(const ps::RequestMeta& meta, const ps::KVPairs& data,
                          ps::KVServer* server) {
  if (handlers_.size() == 1 && po_->server_replicas() == 0) {
    return handlers_.begin()->second->Handle(meta, data, server);
  }
  if (meta.head == proto::KV_FILL) return Snapshot(meta, data, server);
  if (data.num_keys() > 0) {
    const uint64_t key = data.key(0);
    const int range = RangeOf(key);
    auto it = handlers_.find(range);
    if (it == handlers_.end()) {
      server->RespondError(
          meta, Status::InvalidArgument(
                    "server key " + std::to_string(key) + " from " + meta.sender_name +
                    " lies in key range " + std::to_string(range) +
                    ", of which this server holds no copy (do all nodes have the same " +
                    env::kServerReplicas + "?)"));
      return;
    }
    return it->second->Handle(meta, data, server);
  }
  switch (static_cast<proto::KVCommand>(meta.head)) {
    case proto::KV_SET_OPTIMIZER: {
      for (auto& [range, h] : handlers_) {
        const Status s = h->InstallOptimizer(meta.body);
        if (!s.ok()) {
          server->RespondError(meta, s);
          return;
        }
      }
      server->Respond(meta);
      return;
    }
    case proto::KV_ASYNC_STATS: {
      // The counters of the ranges this server answers for; a copy that
      // is no primary counted the same pushes again.
      proto::AsyncStats sum;
      for (auto& [range, h] : handlers_) {
        const proto::AsyncStats c = h->TakeAsyncStats(meta.sender_rank);
        if (!Primary(range)) continue;
        sum.set_pushes(sum.pushes() + c.pushes());
        sum.set_staleness_sum(sum.staleness_sum() + c.staleness_sum());
        sum.set_staleness_max(std::max(sum.staleness_max(), c.staleness_max()));
        sum.set_held(sum.held() + c.held());
        sum.set_held_us(sum.held_us() + c.held_us());
      }
      ps::KVPairs answer;
      answer.vals = ps::Blob::FromString(sum.SerializeAsString());
      server->Respond(meta, answer);
      return;
    }
    case proto::KV_WORKER_DONE:
      if (ServerHandler::AnswerWorkerDone(meta, po_->num_workers(), server)) {
        WorkerDone(meta.sender_rank, server);
      }
      return;
    default:
      return handlers_.at(po_->rank())->Handle(meta, data, server);
  }
}

void ServerRanges::WorkerDone(int rank, ps::KVServer* server) {
  for (auto& [range, h] : handlers_) h->WorkerDone(rank, server);
}

void ServerRanges::ForgetWorker(int rank) {
  for (auto& [range, h] : handlers_) h->ForgetWorker(rank);
}

std::string ServerRanges::SparseReport() {
  std::string out;
  for (auto& [range, h] : handlers_) {
    const std::string r = h->sparse()->StatsReport();
    if (r.empty()) continue;
    if (!out.empty()) out += "; ";
    out += handlers_.size() > 1 ? "key range " + std::to_string(range) + ": " + r : r;
  }
  return out;
}

}  // namespace kv
}  // namespace kvtrain
