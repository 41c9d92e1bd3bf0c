// ServerHandler: the KVStore commands on a parameter server, dist_sync's steps,
// the optimizer's commands (dist_async in server_async.cc, requests' keys in
// server_push_pull.cc, replicas and ServerRanges in server_ranges.cc).
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
      if (AnswerWorkerDone(meta, num_workers_, server)) WorkerDone(meta.sender_rank, server);
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

bool ServerHandler::AnswerWorkerDone(const ps::RequestMeta& meta, int num_workers,
                                     ps::KVServer* server) {
  if (meta.sender_role != Role::kWorker || meta.sender_rank < 0 ||
      meta.sender_rank >= num_workers) {
    server->RespondError(meta, Status::InvalidArgument("KV_WORKER_DONE from " + meta.sender_name +
                                                       ", which is not a worker"));
    return false;
  }
  server->Respond(meta);
  return true;
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

}  // namespace kv
}  // namespace kvtrain
