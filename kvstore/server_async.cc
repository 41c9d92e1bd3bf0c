// ServerHandler under dist_async and dist_ssp: each push applied as it comes,
// answers held for the slowest worker under bounded staleness, staleness counters.
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

}  // namespace kv
}  // namespace kvtrain
