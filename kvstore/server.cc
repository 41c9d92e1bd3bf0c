// ServerHandler: the KVStore commands on a parameter server.
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

Tensor ServerHandler::View(const ps::Blob& vals) {
  ps::Blob keep = vals;
  return Tensor::Wrap(const_cast<char*>(vals.data()),
                      {static_cast<int64_t>(vals.size() / sizeof(float))},
                      DType::kFloat32, Device::CPU(), [keep] {});
}

StatusOr<ps::Blob> ServerHandler::PushedFloats(const KeyRecord& rec, const ps::Blob& vals,
                                               int64_t n, const std::string& name,
                                               const std::string& sender) {
  if (rec.compression == proto::GradientCompression::NONE) return vals;
  // Every element is written: no zero-fill.
  std::shared_ptr<float[]> out(new float[static_cast<size_t>(n)]);
  const Status s = Decode(rec.type(), vals.data(), vals.size(), n, out.get());
  if (!s.ok()) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    "push from " + sender + ": " + s.message());
  }
  return ps::Blob(out, out.get(), static_cast<size_t>(n) * sizeof(float));
}

void ServerHandler::Handle(const ps::RequestMeta& meta, const ps::KVPairs& data,
                           ps::KVServer* server) {
  trace::Scope span("server", "handle from ", meta.sender_name, meta.timestamp);
  proto::RequestInfo info;
  if (!info.ParseFromString(meta.body)) {
    server->RespondError(meta, Status::InvalidArgument(
        "malformed KVStore request from " + meta.sender_name));
    return;
  }
  if (info.bounded() && info.staleness() < 0) {
    server->RespondError(meta, Status::InvalidArgument(
        "KVStore request from " + meta.sender_name + " bounds staleness at " +
        std::to_string(info.staleness()) + " steps (must be >= 0)"));
    return;
  }
  const auto command = static_cast<proto::KVCommand>(meta.head);
  if (command == proto::KV_INIT && data.num_keys() != 1) {
    server->RespondError(meta, Status::InvalidArgument(
        "KVStore inits carry one key per server, got " + std::to_string(data.num_keys())));
    return;
  }
  switch (command) {
    case proto::KV_INIT: return Init(meta, data, info, server);
    case proto::KV_PUSH:
    case proto::KV_PULL: return Serve(meta, data, info, server);
    case proto::KV_SET_OPTIMIZER: return SetOptimizer(meta, info, server);
    case proto::KV_SAVE_STATES: return SaveStates(meta, data, server);
    case proto::KV_LOAD_STATES: return LoadStates(meta, data, server);
    case proto::KV_ASYNC_STATS: return AsyncStats(meta, server);
    case proto::KV_REPLICA: return ApplyReplica(meta, data, info, server);
    case proto::KV_STEPS: return Steps(meta, data, info, server);
    case proto::KV_WORKER_DONE:
      if (meta.sender_role != Role::kWorker || meta.sender_rank < 0 ||
          meta.sender_rank >= num_workers_) {
        server->RespondError(meta, Status::InvalidArgument(
            "KV_WORKER_DONE from " + meta.sender_name + ", which is not a worker"));
        return;
      }
      WorkerDone(meta.sender_rank, server);
      server->Respond(meta);
      return;
    case proto::KV_SPARSE_INIT:
    case proto::KV_SPARSE_PUSH:
    case proto::KV_SPARSE_PULL:
    case proto::KV_SPARSE_SAVE:
    case proto::KV_SPARSE_LOAD:
    case proto::KV_SPARSE_STATS:
      return sparse_.Handle(command, meta, data, info, server);
    default:
      server->RespondError(meta, Status::InvalidArgument(
          "unknown KVStore command " + std::to_string(meta.head)));
  }
}

ServerHandler::KeyState* ServerHandler::Find(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : it->second.get();
}

ServerHandler::KeyState* ServerHandler::FindOrRespond(
    uint64_t key, const ps::RequestMeta& meta, ps::KVServer* server) {
  KeyState* st = Find(key);
  if (st == nullptr) {
    server->RespondError(
        meta, Status::NotFound("server key " + std::to_string(key) +
                               " was never initialised (call Init first)"));
  }
  return st;
}

std::shared_ptr<Optimizer> ServerHandler::optimizer() {
  std::lock_guard<std::mutex> lock(mu_);
  return optimizer_;
}

void ServerHandler::Init(const ps::RequestMeta& meta, const ps::KVPairs& data,
                         const proto::RequestInfo& info, ps::KVServer* server) {
  const uint64_t key = data.key(0);
  auto st = std::make_unique<KeyState>();
  st->name = info.key_name();
  st->value = View(data.vals).Clone();
  st->pushed.assign(num_workers_, false);
  if (ordered_sum_) st->parts.resize(static_cast<size_t>(num_workers_));
  st->clock.assign(num_workers_, 0);
  st->seen.assign(num_workers_, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (keys_.count(key)) {
      server->RespondError(
          meta, KeyError(Status::Code::kAlreadyExists, info.key_name(),
                         "initialised twice"));
      return;
    }
    keys_.emplace(key, std::move(st));
  }
  server->Respond(meta);
}

void ServerHandler::AsyncPush(KeyState* st, uint64_t key, const Deferred& push,
                              ps::KVServer* server) {
  const int rank = push.meta().sender_rank;
  if (rank < 0 || rank >= num_workers_) {
    Fail(push,
         KeyError(Status::Code::kInvalidArgument, st->name,
                  "push from " + push.meta().sender_name + ", which is not a worker"),
         server);
    return;
  }
  if (forward_ && push.meta().resent && replica::Applied(st->applied, rank, push.rec.step)) {
    // Sent again after a failover, applied already (by this server as a
    // copy of the lost primary's update): answered, not applied twice.
    if (push.meta().pull) return AnswerAsync(st, key, push, server);
    return Ack(push, server);
  }
  // The updates since this worker read the key: other workers' pushes its
  // gradient did not see.
  const int64_t staleness = st->updates - st->seen[rank];
  st->mean_staleness += kStalenessWeight * (static_cast<double>(staleness) - st->mean_staleness);
  const double divisor = 1.0 + std::max(static_cast<double>(staleness), st->mean_staleness);
  const float step_scale = push.info().staleness_lr() ? static_cast<float>(1.0 / divisor) : 1.0f;
  const Status s = Apply(st, key, View(push.data.vals), /*accumulate=*/true, step_scale);
  if (!s.ok()) {
    Fail(push, s, server);
    return;
  }
  ++st->updates;
  st->clock[rank] = std::max(st->clock[rank], push.rec.step);
  if (forward_) replica::Remember(&st->applied, num_workers_, rank, push.rec.step);
  CountStaleness(rank, staleness);
  auto answer = [this, st, key, push, server] {
    if (push.meta().pull) {
      AnswerAsync(st, key, push, server);
    } else {
      Ack(push, server);
    }
    ReleaseHeld(st, key, server);
  };
  // Server replicas: answered once every copy applied it too.
  proto::ReplicaUpdate r;
  r.set_step(push.rec.step);
  r.set_worker(rank);
  r.set_step_scale(step_scale);
  if (Forward(st, key, proto::KV_ASYNC, r, View(push.data.vals), answer)) return;
  answer();
}

bool ServerHandler::Forward(KeyState* st, uint64_t key, proto::KVSyncMode mode,
                            const proto::ReplicaUpdate& update, const Tensor& grad,
                            std::function<void()> then) {
  if (!forward_) return false;
  proto::RequestInfo info;
  info.set_mode(mode);
  *info.mutable_replica() = update;
  ps::Blob vals(grad.storage(), grad.raw_data(), static_cast<size_t>(grad.nbytes()));
  return replica::ForwardThen(forward_, &st->mu, key, info.SerializeAsString(),
                              std::move(vals), std::move(then));
}

namespace {

// Whether every worker has pushed the key often enough for an answer at
// `step`: the step minus the bound, at most.
bool CloseEnough(const std::vector<int64_t>& clock, const proto::RequestInfo& info,
                 int64_t step, const FinishedWorkers& finished) {
  if (!info.bounded()) return true;
  const int64_t need = step - info.staleness();
  for (size_t r = 0; r < clock.size(); ++r) {
    // A finished worker pushes no more: it holds nobody back.
    if (clock[r] < need && !finished.done(static_cast<int>(r))) return false;
  }
  return true;
}

}  // namespace

void ServerHandler::AnswerAsync(KeyState* st, uint64_t key, const Deferred& d,
                                ps::KVServer* server) {
  const int rank = d.meta().sender_rank;
  const bool worker = rank >= 0 && rank < num_workers_;
  if (worker && !CloseEnough(st->clock, d.info(), d.rec.step, finished_)) {
    st->held.emplace_back(d, std::chrono::steady_clock::now());
    return;
  }
  if (worker) st->seen[rank] = st->updates;
  Answer(d, st, key, server);
}

void ServerHandler::ReleaseHeld(KeyState* st, uint64_t key, ps::KVServer* server) {
  if (st->held.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<Deferred, std::chrono::steady_clock::time_point>> waiting;
  waiting.swap(st->held);
  for (auto& [d, since] : waiting) {
    if (!CloseEnough(st->clock, d.info(), d.rec.step, finished_)) {
      st->held.emplace_back(std::move(d), since);
      continue;
    }
    CountHeld(d.meta().sender_rank, now - since);
    st->seen[d.meta().sender_rank] = st->updates;
    Answer(d, st, key, server);
  }
}

void ServerHandler::CountStaleness(int rank, int64_t staleness) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  proto::AsyncStats& c = stats_[rank];
  c.set_pushes(c.pushes() + 1);
  c.set_staleness_sum(c.staleness_sum() + staleness);
  c.set_staleness_max(std::max(c.staleness_max(), staleness));
}

void ServerHandler::CountHeld(int rank, std::chrono::steady_clock::duration held) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  proto::AsyncStats& c = stats_[rank];
  c.set_held(c.held() + 1);
  c.set_held_us(c.held_us() +
                std::chrono::duration_cast<std::chrono::microseconds>(held).count());
}

void ServerHandler::AsyncStats(const ps::RequestMeta& meta, ps::KVServer* server) {
  const int rank = meta.sender_rank;
  if (rank < 0 || rank >= num_workers_) {
    server->RespondError(meta, Status::InvalidArgument(
        "staleness counters asked for by " + meta.sender_name + ", which is not a worker"));
    return;
  }
  const proto::AsyncStats out = TakeAsyncStats(rank);
  ps::KVPairs answer;
  answer.vals = ps::Blob::FromString(out.SerializeAsString());
  server->Respond(meta, answer);
}

proto::AsyncStats ServerHandler::TakeAsyncStats(int rank) {
  proto::AsyncStats out;
  if (rank < 0 || rank >= num_workers_) return out;
  std::lock_guard<std::mutex> lock(stats_mu_);
  out.Swap(&stats_[static_cast<size_t>(rank)]);
  return out;
}

void ServerHandler::SyncPush(KeyState* st, uint64_t key, const Deferred& push,
                             ps::KVServer* server) {
  if (!Admit(st, push, server)) return;
  Advance(st, key, server);
}

void ServerHandler::Advance(KeyState* st, uint64_t key, ps::KVServer* server) {
  // Iterative: each completed step admits the pushes queued for the next
  // one, which may complete it in turn (no recursion per queued step).
  for (;;) {
    // With server replicas the step's update goes to the range's other
    // copies first, and its answers wait for them (so an answered step is
    // never lost), as do later steps.
    const Tensor grad = !forward_ ? Tensor() : st->first.defined() ? st->first : st->merge;
    CompleteStep(st, key, server);
    if (PassOn(st, key, grad, server)) return;
    FinishStep(st, key, server);
    if (!AdmitLater(st, key, server)) return;
  }
}

bool ServerHandler::PassOn(KeyState* st, uint64_t key, const Tensor& grad,
                           ps::KVServer* server) {
  proto::ReplicaUpdate r;
  r.set_step(st->step);
  st->forwarding = true;
  const bool sent = Forward(st, key, proto::KV_SYNC, r, grad, [this, st, key, server] {
    st->forwarding = false;
    FinishStep(st, key, server);
    if (AdmitLater(st, key, server)) Advance(st, key, server);
  });
  if (!sent) st->forwarding = false;
  return sent;
}

bool ServerHandler::AdmitLater(KeyState* st, uint64_t key, ps::KVServer* server) {
  (void)key;
  auto range = st->later.equal_range(st->step + 1);
  std::vector<Deferred> next;
  for (auto it = range.first; it != range.second; ++it) next.push_back(it->second);
  st->later.erase(range.first, range.second);
  bool complete = false;
  for (const Deferred& p : next) complete = Admit(st, p, server) || complete;
  return complete;
}

bool ServerHandler::Admit(KeyState* st, const Deferred& push, ps::KVServer* server) {
  const int rank = push.meta().sender_rank;
  const int64_t step = push.rec.step;
  const std::string who = push.meta().sender_name;
  if (rank < 0 || rank >= num_workers_) {
    Fail(push,
         KeyError(Status::Code::kInvalidArgument, st->name,
                  "push from " + who + ", which is not a worker"),
         server);
    return false;
  }
  if (forward_ && push.meta().resent && step == st->step) {
    // Sent again after a failover, and applied already (by this server as
    // a copy of the lost primary's update): answered, not applied twice;
    // once every copy has the step, if it is still being passed on.
    if (st->forwarding) {
      (push.meta().pull ? st->pulls : st->acks).push_back(push);
    } else if (push.meta().pull) {
      Answer(push, st, push.data.key(0), server);
    } else {
      Ack(push, server);
    }
    return false;
  }
  if (push.info().replay() &&
      (step == st->step || (step == st->step + 1 && !st->forwarding && st->pushed[rank]))) {
    // A worker started again pushes the step its dead process pushed
    // already: answered with the step's result, not summed twice.
    if (step == st->step && !st->forwarding) {
      if (push.meta().pull) {
        Answer(push, st, push.data.key(0), server);
      } else {
        Ack(push, server);
      }
    } else {
      (push.meta().pull ? st->pulls : st->acks).push_back(push);
    }
    return false;
  }
  if (step <= st->step) {
    Fail(push,
         KeyError(Status::Code::kInvalidArgument, st->name,
                  who + " pushed step " + std::to_string(step) +
                      " again (step " + std::to_string(st->step) +
                      " is applied)"),
         server);
    return false;
  }
  if (step > st->step + kSyncWindow) {
    Fail(push,
         KeyError(Status::Code::kInvalidArgument, st->name,
                  who + " pushed step " + std::to_string(step) + ", more than " +
                      std::to_string(kSyncWindow) + " steps ahead of step " +
                      std::to_string(st->step + 1) + ", which this server is summing"),
         server);
    return false;
  }
  if (const std::string why = Blocking(*st, step); !why.empty()) {
    Fail(push, KeyError(Status::Code::kFailedPrecondition, st->name, why), server);
    return false;
  }
  // An early push: its step has not begun (or the last step is still
  // being passed on to the range's copies).
  if (step > st->step + 1 || st->forwarding) {
    for (auto range = st->later.equal_range(step); range.first != range.second;
         ++range.first) {
      if (range.first->second.meta().sender_rank == rank) {
        Fail(push,
             KeyError(Status::Code::kInvalidArgument, st->name,
                      who + " pushed step " + std::to_string(step) + " twice"),
             server);
        return false;
      }
    }
    st->later.emplace(step, push);
    return false;
  }
  if (st->pushed[rank]) {
    Fail(push,
         KeyError(Status::Code::kInvalidArgument, st->name,
                  who + " pushed step " + std::to_string(step) + " twice"),
         server);
    return false;
  }
  const Tensor grad = View(push.data.vals);
  if (ordered_sum_) {
    // Kept until the step is complete, then summed in rank order.
    st->parts[static_cast<size_t>(rank)] = grad;
    if (st->num_pushed + 1 == num_workers_) {
      if (!st->merge.defined()) st->merge = Tensor::Empty(grad.shape());
      CHECK(st->merge.CopyFrom(st->parts[0]).ok());
      for (size_t r = 1; r < st->parts.size(); ++r) {
        CHECK(blas::Axpy(1.0f, st->parts[r], &st->merge).ok());
      }
      for (Tensor& t : st->parts) t = Tensor();
    }
  } else if (st->num_pushed == 0) {
    st->first = grad;  // a single worker's push is used as it arrived
  } else {
    if (st->first.defined()) {
      if (!st->merge.defined()) st->merge = Tensor::Empty(grad.shape());
      CHECK(st->merge.CopyFrom(st->first).ok());
      st->first = Tensor();
    }
    CHECK(blas::Axpy(1.0f, grad, &st->merge).ok());
  }
  st->pushed[rank] = true;
  ++st->num_pushed;
  if (push.meta().pull) {
    st->pulls.push_back(push);  // answered with this step's result
  } else if (forward_) {
    st->acks.push_back(push);  // acknowledged once every copy has the step
  } else {
    Ack(push, server);
  }
  return st->num_pushed == num_workers_;
}

void ServerHandler::CompleteStep(KeyState* st, uint64_t key,
                                 ps::KVServer* server) {
  if (keep_previous_) {
    // A response may still be sending the last one (zero-copy).
    if (!st->previous.defined() || st->previous.storage().use_count() > 1) {
      st->previous = Tensor::Empty(st->value.shape());
    }
    CHECK(st->previous.CopyFrom(st->value).ok());
  }
  Status s;
  if (st->first.defined()) {
    // One push this step: update straight from the received message.
    s = Apply(st, key, st->first, /*accumulate=*/false);
    st->first = Tensor();
  } else if (optimizer() == nullptr) {
    // The sum is the new value: swap buffers instead of copying. The old
    // value becomes next step's sum buffer unless a response still sends it.
    std::swap(st->value, st->merge);
    if (st->merge.storage().use_count() > 1) st->merge = Tensor();
  } else {
    s = Apply(st, key, st->merge, /*accumulate=*/false);
  }
  if (!s.ok()) LOG(ERROR) << "server update failed: " << s;
  st->update_status = s;
  ++st->step;
  st->pushed.assign(num_workers_, false);
  st->num_pushed = 0;
}

void ServerHandler::FinishStep(KeyState* st, uint64_t key, ps::KVServer* server) {
  const Status s = st->update_status;
  std::vector<Deferred> acks;
  acks.swap(st->acks);
  for (const Deferred& a : acks) Ack(a, server);
  std::vector<Deferred> waiting;
  waiting.swap(st->pulls);
  for (Deferred& p : waiting) {
    if (p.rec.step > st->step) {
      st->pulls.push_back(std::move(p));
    } else if (!s.ok()) {
      Fail(p, s, server);
    } else {
      Answer(p, st, key, server);
    }
  }
}

Status ServerHandler::Apply(KeyState* st, uint64_t key, const Tensor& grad,
                            bool accumulate, float step_scale) {
  // A response may still be sending the value (zero-copy): write a copy.
  if (st->value.storage().use_count() > 1) st->value = st->value.Clone();
  if (std::shared_ptr<Optimizer> opt = optimizer()) {
    return opt->Update(static_cast<int64_t>(key - key_base_), st->value, grad,
                       Optimizer::Wait::kDone, step_scale, opt->MultsFor(st->name))
        .Annotate("key " + st->name + ": update");
  }
  return accumulate ? blas::Axpy(1.0f, grad, &st->value)
                    : st->value.CopyFrom(grad);
}

StatusOr<ps::Blob> ServerHandler::EncodedValue(KeyState* st, const Deferred& d) {
  const Tensor& v = st->value;
  const uint32_t bits = d.rec.level_bits;
  if (bits > 0) {
    // Levels carry a step's summed pushes: only what a sync server without
    // an optimizer holds.
    if (d.info().mode() != proto::KV_SYNC || optimizer() != nullptr) {
      return KeyError(Status::Code::kFailedPrecondition, st->name,
                      "an answer as levels was asked for, but this server holds " +
                          std::string(d.info().mode() != proto::KV_SYNC
                                          ? "every push accumulated (dist_async)"
                                          : "weights (it runs the optimizer)") +
                          ", not the step's summed gradients");
    }
    if (st->levels_step == st->step && st->levels_bits == bits) return st->levels;
    auto out = std::make_shared<std::vector<char>>(LevelBytes(static_cast<int>(bits), v.size()));
    const Status s = EncodeLevels(v.data<float>(), v.size(), static_cast<int>(bits), out->data());
    if (!s.ok()) {
      return KeyError(Status::Code::kInvalidArgument, st->name,
                      "the step's summed pushes hold " + s.message() +
                          ": do the workers compress it alike?");
    }
    st->levels = ps::Blob(out, out->data(), out->size());
    st->levels_step = st->step;
    st->levels_bits = bits;
    return st->levels;
  }
  if (d.rec.half) {
    std::vector<uint16_t> halves(static_cast<size_t>(v.size()));
    FloatsToHalves(v.data<float>(), v.size(), halves.data());
    return ps::Blob::FromVector(std::move(halves));
  }
  // The value itself (zero-copy: Apply copies before writing a value that a
  // response still sends).
  return ps::Blob(v.storage(), v.raw_data(), v.nbytes());
}

Status ServerHandler::InstallOptimizer(const std::string& body) {
  proto::RequestInfo info;
  proto::OptimizerSpec spec;
  if (!info.ParseFromString(body) || !spec.ParseFromString(info.payload())) {
    return Status::InvalidArgument("malformed optimizer spec");
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> opt, Optimizer::Create(spec));
  std::lock_guard<std::mutex> lock(mu_);
  optimizer_ = std::shared_ptr<Optimizer>(std::move(opt));
  optimizer_body_ = body;
  return Status::OK();
}

void ServerHandler::SetOptimizer(const ps::RequestMeta& meta,
                                 const proto::RequestInfo& /*info*/,
                                 ps::KVServer* server) {
  const Status s = InstallOptimizer(meta.body);
  if (s.ok()) {
    server->Respond(meta);
  } else {
    server->RespondError(meta, s);
  }
}

void ServerHandler::SaveStates(const ps::RequestMeta& meta, const ps::KVPairs& data,
                               ps::KVServer* server) {
  std::shared_ptr<Optimizer> opt = optimizer();
  if (!opt) {
    server->RespondError(meta, Status::FailedPrecondition(
        "no optimizer on this server (SetOptimizer first)"));
    return;
  }
  StatusOr<std::string> states = opt->SaveStates();
  if (!states.ok()) {
    server->RespondError(meta, states.status());
    return;
  }
  ps::KVPairs out;
  out.vals = ps::Blob::FromString(std::move(states).value());
  out.keys = data.keys;  // asked of a key range: answered under its key
  server->Respond(meta, out);
}

void ServerHandler::LoadStates(const ps::RequestMeta& meta, const ps::KVPairs& data,
                               ps::KVServer* server) {
  std::shared_ptr<Optimizer> opt = optimizer();
  if (!opt) {
    server->RespondError(meta, Status::FailedPrecondition(
        "no optimizer on this server (SetOptimizer before LoadOptimizerStates)"));
    return;
  }
  const Status s = opt->LoadStates(data.vals.ToString());
  if (s.ok()) {
    server->Respond(meta);
  } else {
    server->RespondError(meta, s);
  }
}

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

void ServerHandler::Steps(const ps::RequestMeta& meta, const ps::KVPairs& data,
                          const proto::RequestInfo& info, ps::KVServer* server) {
  const size_t n = data.num_keys();
  const int rank = meta.sender_rank;
  if (n == 0 || rank < 0 || rank >= num_workers_) {
    server->RespondError(meta, Status::InvalidArgument(
                                   "a question for keys' steps from " + meta.sender_name +
                                   ", which is no worker, or without keys"));
    return;
  }
  std::vector<int64_t> steps;
  for (size_t i = 0; i < n; ++i) {
    KeyState* st = FindOrRespond(data.key(i), meta, server);
    if (st == nullptr) return;
    std::lock_guard<std::mutex> lock(st->mu);
    // -1: no worker ever pushed it (a key only read, or not yet trained).
    const bool untouched = info.mode() == proto::KV_ASYNC
                               ? st->updates == 0
                               : st->step == 0 && st->num_pushed == 0 && st->later.empty();
    steps.push_back(untouched                         ? -1
                    : info.mode() == proto::KV_ASYNC ? st->clock[static_cast<size_t>(rank)]
                                                     : st->step);
  }
  ps::KVPairs answer;
  answer.keys = data.keys;
  answer.vals = ps::Blob::FromVector(std::move(steps));
  server->Respond(meta, answer);
}

void ServerHandler::AnswerExact(KeyState* st, uint64_t key, const Deferred& d,
                                ps::KVServer* server) {
  const int64_t want = d.rec.step;
  if (want == st->step) return Answer(d, st, key, server);
  if (want + 1 == st->step && st->previous.defined()) {
    // The value before the last step: answered as the value is.
    std::swap(st->value, st->previous);
    Answer(d, st, key, server);
    std::swap(st->value, st->previous);
    return;
  }
  Fail(d,
       KeyError(Status::Code::kFailedPrecondition, st->name,
                d.meta().sender_name + " asked for the value after step " +
                    std::to_string(want) + " but this server is at step " +
                    std::to_string(st->step) +
                    (keep_previous_ ? " and keeps only the one before"
                                    : " and keeps no earlier one (is " +
                                          std::string(env::kWorkerRestarts) + " set?)")),
       server);
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

void ServerHandler::ForgetWorker(int rank) {
  std::vector<KeyState*> states;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, st] : keys_) states.push_back(st.get());
  }
  auto from = [rank](const Deferred& d) { return d.meta().sender_rank == rank; };
  for (KeyState* st : states) {
    std::lock_guard<std::mutex> lock(st->mu);
    st->pulls.erase(std::remove_if(st->pulls.begin(), st->pulls.end(), from), st->pulls.end());
    st->acks.erase(std::remove_if(st->acks.begin(), st->acks.end(), from), st->acks.end());
    for (auto it = st->later.begin(); it != st->later.end();) {
      it = from(it->second) ? st->later.erase(it) : std::next(it);
    }
    st->held.erase(std::remove_if(st->held.begin(), st->held.end(),
                                  [&](const auto& h) { return from(h.first); }),
                   st->held.end());
  }
}

void ServerHandler::WorkerDone(int rank, ps::KVServer* server) {
  finished_.Mark(rank);
  std::vector<std::pair<uint64_t, KeyState*>> states;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, st] : keys_) states.emplace_back(key, st.get());
  }
  for (auto& [key, st] : states) {
    std::lock_guard<std::mutex> lock(st->mu);
    auto fail = [&](const Deferred& d) {
      const std::string why = Blocking(*st, d.rec.step);
      if (why.empty()) return false;
      Fail(d, KeyError(Status::Code::kFailedPrecondition, st->name, why), server);
      return true;
    };
    std::vector<Deferred> pulls;
    pulls.swap(st->pulls);
    for (Deferred& p : pulls) {
      if (p.rec.step <= st->step || !fail(p)) st->pulls.push_back(std::move(p));
    }
    for (auto it = st->later.begin(); it != st->later.end();) {
      it = fail(it->second) ? st->later.erase(it) : std::next(it);
    }
    ReleaseHeld(st, key, server);
  }
  sparse_.WorkerDone(server);
}

ServerRanges::ServerRanges(ps::Postoffice* po)
    : po_(po), ranges_(po->ServerKeyRanges()) {
  const int n = po->num_servers();
  const bool replicas = po->server_replicas() > 0;
  for (int j = 0; j <= po->server_replicas(); ++j) {
    const int range = ((po->rank() - j) % n + n) % n;
    handlers_.emplace(range, std::make_unique<ServerHandler>(
                                 po->num_workers(), ranges_[static_cast<size_t>(range)].begin,
                                 /*ordered_sum=*/replicas));
    if (po->worker_restarts() > 0) handlers_.at(range)->KeepPreviousValues();
  }
  if (!replicas) return;
  // Started again: the updates primaries pass on wait for their snapshots.
  if (po->incarnation() > 0) {
    for (auto& [range, h] : handlers_) h->StartFilling();
  }
  // Requests to the other servers go out on the same application id: the
  // node's server side answers, this side sends.
  StatusOr<std::unique_ptr<ps::KVWorker>> w = ps::KVWorker::Create(po, 0);
  CHECK(w.ok()) << w.status();
  to_copies_ = std::move(w).value();
  for (auto& [range, h] : handlers_) {
    const int r = range;
    h->SetForwarder([this, r](uint64_t key, std::string body, ps::Blob grad,
                              std::function<void()> done) {
      return Forward(r, key, std::move(body), std::move(grad), std::move(done));
    });
  }
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
      if (meta.sender_role != Role::kWorker || meta.sender_rank < 0 ||
          meta.sender_rank >= po_->num_workers()) {
        server->RespondError(meta, Status::InvalidArgument(
            "KV_WORKER_DONE from " + meta.sender_name + ", which is not a worker"));
        return;
      }
      WorkerDone(meta.sender_rank, server);
      server->Respond(meta);
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
