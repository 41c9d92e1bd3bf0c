// ServerHandler: the KVStore commands on a parameter server.
#include "base/trace.h"
#include "kvstore/server.h"

#include <cstring>
#include <utility>

#include <glog/logging.h>

#include "ops/tensor/blas.h"

namespace kvtrain {
namespace kv {
namespace {

// The received values as a float tensor, keeping the message alive.
Tensor View(const ps::Blob& vals) {
  ps::Blob keep = vals;
  return Tensor::Wrap(const_cast<char*>(vals.data()),
                      {static_cast<int64_t>(vals.size() / sizeof(float))},
                      DType::kFloat32, Device::CPU(), [keep] {});
}

Status NamedError(const std::string& key, const std::string& message,
                  Status::Code code = Status::Code::kInvalidArgument) {
  const std::string m = "key " + key + ": " + message;
  return code == Status::Code::kNotFound ? Status::NotFound(m)
       : code == Status::Code::kAlreadyExists ? Status::AlreadyExists(m)
       : code == Status::Code::kFailedPrecondition ? Status::FailedPrecondition(m)
                                                   : Status::InvalidArgument(m);
}

}  // namespace

void ServerHandler::Handle(const ps::RequestMeta& meta, const ps::KVPairs& data,
                           ps::KVServer* server) {
  trace::Scope span("server", "handle from " + meta.sender_name, meta.timestamp);
  proto::RequestInfo info;
  if (!info.ParseFromString(meta.body) ||
      static_cast<int>(info.command()) != meta.head) {
    server->RespondError(meta, Status::InvalidArgument(
        "malformed KVStore request from " + meta.sender_name));
    return;
  }
  const bool keyed = info.command() == proto::KV_INIT ||
                     info.command() == proto::KV_PUSH ||
                     info.command() == proto::KV_PULL;
  if (keyed && data.num_keys() != 1) {
    server->RespondError(meta, Status::InvalidArgument(
        "KVStore requests carry one key per server, got " +
        std::to_string(data.num_keys())));
    return;
  }
  switch (info.command()) {
    case proto::KV_INIT: return Init(meta, data, info, server);
    case proto::KV_PUSH: return Push(meta, data, info, server);
    case proto::KV_PULL: return Pull(meta, data, info, server);
    case proto::KV_SET_OPTIMIZER: return SetOptimizer(meta, info, server);
    case proto::KV_SAVE_STATES: return SaveStates(meta, server);
    case proto::KV_LOAD_STATES: return LoadStates(meta, data, server);
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
    uint64_t key, const std::string& name, const ps::RequestMeta& meta,
    ps::KVServer* server) {
  KeyState* st = Find(key);
  if (st == nullptr) {
    server->RespondError(meta, NamedError(name, "was never initialised (call Init first)",
                                          Status::Code::kNotFound));
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (keys_.count(key)) {
      server->RespondError(meta, NamedError(info.key_name(), "initialised twice",
                                            Status::Code::kAlreadyExists));
      return;
    }
    keys_.emplace(key, std::move(st));
  }
  server->Respond(meta);
}

void ServerHandler::Push(const ps::RequestMeta& meta, const ps::KVPairs& data,
                         const proto::RequestInfo& info, ps::KVServer* server) {
  const uint64_t key = data.key(0);
  KeyState* st = FindOrRespond(key, info.key_name(), meta, server);
  if (st == nullptr) return;
  std::lock_guard<std::mutex> lock(st->mu);
  if (data.vals.size() != st->value.nbytes()) {
    server->RespondError(meta, NamedError(
        st->name, "pushed " + std::to_string(data.vals.size() / 4) +
                      " values but this server holds " +
                      std::to_string(st->value.size()) + " of it"));
    return;
  }
  if (info.mode() == proto::KV_ASYNC) {
    const Status s = Apply(st, key, View(data.vals), /*accumulate=*/true);
    if (!s.ok()) {
      server->RespondError(meta, s);
    } else if (meta.pull) {
      RespondValue(st, key, meta, server);
    } else {
      server->Respond(meta);
    }
    return;
  }
  SyncPush(st, key, Deferred{meta, data, info}, server);
}

void ServerHandler::SyncPush(KeyState* st, uint64_t key, const Deferred& push,
                             ps::KVServer* server) {
  const int rank = push.meta.sender_rank;
  const int64_t step = push.info.step();
  const std::string who = push.meta.sender_name;
  if (rank < 0 || rank >= num_workers_) {
    server->RespondError(push.meta, NamedError(st->name, "push from " + who +
                                                             ", which is not a worker"));
    return;
  }
  if (step <= st->step) {
    server->RespondError(push.meta, NamedError(
        st->name, who + " pushed step " + std::to_string(step) +
                      " again (step " + std::to_string(st->step) + " is applied)"));
    return;
  }
  if (step > st->step + 1) {  // an early push: its step has not begun
    st->later.emplace(step, push);
    return;
  }
  if (st->pushed[rank]) {
    server->RespondError(push.meta, NamedError(
        st->name, who + " pushed step " + std::to_string(step) + " twice"));
    return;
  }
  const Tensor grad = View(push.data.vals);
  if (st->num_pushed == 0) {
    if (!st->merge.defined()) st->merge = Tensor::Empty(grad.shape());
    CHECK(st->merge.CopyFrom(grad).ok());
  } else {
    CHECK(blas::Axpy(1.0f, grad, &st->merge).ok());
  }
  st->pushed[rank] = true;
  ++st->num_pushed;
  if (push.meta.pull) {
    st->pulls.push_back(push);  // answered with this step's result
  } else {
    server->Respond(push.meta);
  }
  if (st->num_pushed == num_workers_) CompleteStep(st, key, server);
}

void ServerHandler::CompleteStep(KeyState* st, uint64_t key, ps::KVServer* server) {
  Status s;
  if (optimizer() == nullptr) {
    // The sum is the new value: swap buffers instead of copying. The old
    // value becomes next step's sum buffer unless a response still sends it.
    std::swap(st->value, st->merge);
    if (st->merge.storage().use_count() > 1) st->merge = Tensor();
  } else {
    s = Apply(st, key, st->merge, /*accumulate=*/false);
  }
  if (!s.ok()) LOG(ERROR) << "server update failed: " << s;
  ++st->step;
  st->pushed.assign(num_workers_, false);
  st->num_pushed = 0;
  std::vector<Deferred> waiting;
  waiting.swap(st->pulls);
  for (Deferred& p : waiting) {
    if (p.info.step() > st->step) {
      st->pulls.push_back(std::move(p));
    } else if (!s.ok()) {
      server->RespondError(p.meta, s);
    } else {
      RespondValue(st, key, p.meta, server);
    }
  }
  auto range = st->later.equal_range(st->step + 1);
  std::vector<Deferred> next;
  for (auto it = range.first; it != range.second; ++it) next.push_back(it->second);
  st->later.erase(range.first, range.second);
  for (const Deferred& p : next) SyncPush(st, key, p, server);
}

Status ServerHandler::Apply(KeyState* st, uint64_t key, const Tensor& grad,
                            bool accumulate) {
  // A response may still be sending the value (zero-copy): write a copy.
  if (st->value.storage().use_count() > 1) st->value = st->value.Clone();
  if (std::shared_ptr<Optimizer> opt = optimizer()) {
    return opt->Update(static_cast<int64_t>(key), st->value, grad)
        .Annotate("key " + st->name + ": update");
  }
  return accumulate ? blas::Axpy(1.0f, grad, &st->value) : st->value.CopyFrom(grad);
}

void ServerHandler::RespondValue(KeyState* st, uint64_t key,
                                 const ps::RequestMeta& meta, ps::KVServer* server) {
  const Tensor& v = st->value;
  ps::Blob vals(v.storage(), v.raw_data(), v.nbytes());
  server->Respond(meta, ps::KVPairs::From({key}, vals));
}

void ServerHandler::Pull(const ps::RequestMeta& meta, const ps::KVPairs& data,
                         const proto::RequestInfo& info, ps::KVServer* server) {
  const uint64_t key = data.key(0);
  KeyState* st = FindOrRespond(key, info.key_name(), meta, server);
  if (st == nullptr) return;
  std::lock_guard<std::mutex> lock(st->mu);
  if (info.mode() == proto::KV_ASYNC || info.step() <= st->step) {
    RespondValue(st, key, meta, server);
  } else {
    st->pulls.push_back(Deferred{meta, data, info});
  }
}

void ServerHandler::SetOptimizer(const ps::RequestMeta& meta,
                                 const proto::RequestInfo& info,
                                 ps::KVServer* server) {
  proto::OptimizerSpec spec;
  if (!spec.ParseFromString(info.payload())) {
    server->RespondError(meta, Status::InvalidArgument("malformed optimizer spec"));
    return;
  }
  StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(spec);
  if (!opt.ok()) {
    server->RespondError(meta, opt.status());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    optimizer_ = std::shared_ptr<Optimizer>(std::move(opt).value());
  }
  server->Respond(meta);
}

void ServerHandler::SaveStates(const ps::RequestMeta& meta, ps::KVServer* server) {
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

}  // namespace kv
}  // namespace kvtrain
