// The server side of the dist KVStores: answers the workers' requests
// (kvstore.proto commands) on one parameter server.
//
// dist_sync: a key's update runs once the server holds exactly one push from
// every worker for the key's next step (tracked per worker rank and step);
// pulls of a step are answered after its update. Pushes for later steps
// wait their turn. dist_async: every push is applied when it arrives;
// with bounded staleness (dist_ssp) a worker's answers wait until every
// worker has pushed the key at least `step - staleness` times, and with
// staleness-aware updates each push's step is divided by 1 + the updates
// the key received since that worker last read it, or the key's recent
// mean of those if larger (Optimizer::Update's step_scale). Without an optimizer, sync keeps the step's summed
// gradients and async accumulates every push.
#ifndef KVTRAIN_KVSTORE_SERVER_H_
#define KVTRAIN_KVSTORE_SERVER_H_

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "transport/ps/ps.h"
#include "kvstore/sparse/finished_workers.h"
#include "kvstore/request.h"
#include "kvstore/sparse/replica.h"
#include "kvstore/sparse/server.h"
#include "ops/optimizer.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace kv {

// Thread-safe: the transport runs Handle on several threads, requests of one
// key in order.
class ServerHandler {
 public:
  // dist_sync: a worker's push or pull may be at most this many steps ahead
  // of the step the server is summing; further ahead is refused with an
  // error naming the worker, the key and both steps (a worker that waits
  // for each step's answer is never more than one ahead).
  static constexpr int64_t kSyncWindow = 16;
  // Staleness-aware updates divide a push's step by 1 + the larger of its
  // own staleness and the key's recent mean, in which each push weighs
  // this much: asynchrony acts as momentum of the whole process, so a push
  // that happened to miss nothing does not bring the full momentum back
  // (measured on the MLP: 0.003-0.005 closer to one process and to
  // dist_sync than the push's own staleness alone).
  static constexpr double kStalenessWeight = 0.05;

  // `key_base`: the first key of this server's range; a key less it is the
  // StateKey (keys.h) its optimizer state goes under.
  // `ordered_sum`: a dist_sync step sums its pushes in worker rank order,
  // not as they arrive, so that a step the workers send again to a new
  // primary after a failover sums to the bits the lost one passed on, or
  // would have (with one or two workers both orders give the same bits,
  // and pushes are summed as they arrive).
  ServerHandler(int num_workers, uint64_t key_base, bool ordered_sum = false)
      : num_workers_(num_workers),
        key_base_(key_base),
        ordered_sum_(ordered_sum && num_workers > 2),
        finished_(num_workers),
        sparse_(num_workers, [this] { return optimizer(); }, ordered_sum, &finished_),
        stats_(static_cast<size_t>(num_workers)) {}

  // The row-sparse keys' tables on this server.
  sparse::SparseServer* sparse() { return &sparse_; }

  void Handle(const ps::RequestMeta& meta, const ps::KVPairs& data,
              ps::KVServer* server);

  // Server replicas: passes the update of `key` on to the other live copies
  // of its range when this server is the range's primary, with the
  // KV_REPLICA request body `body` and values `grad`, and then calls `done`
  // (from another thread) once they all applied it. False when it sent
  // nothing (not the primary, or no live copy): the caller goes on at once.
  using Forwarder = replica::Forwarder;
  // Before the first request.
  void SetForwarder(Forwarder f) {
    forward_ = f;
    sparse_.SetForwarder(std::move(f));
  }
  // Before the first request (KVTRAIN_WORKER_RESTARTS > 0): dist_sync keys
  // keep their value before the last step, which a worker started again
  // pulls (RequestInfo.exact) to compute that step's gradient again.
  void KeepPreviousValues() { keep_previous_ = true; }
  // Worker `rank` was started again: drop what its dead process asked and
  // was not answered (its pushes already summed stay).
  void ForgetWorker(int rank) EXCLUDES(mu_);
  // KV_WORKER_DONE: answers `meta` (an error unless a worker of
  // `num_workers` sent it); false when it was refused.
  static bool AnswerWorkerDone(const ps::RequestMeta& meta, int num_workers,
                               ps::KVServer* server);
  // Worker `rank` finished. Requests that wait for a
  // dist_sync step it never pushed are answered with an error naming it,
  // and bounded-staleness answers stop waiting for it.
  void WorkerDone(int rank, ps::KVServer* server) EXCLUDES(mu_);

  // KV_FILL on the range's primary: the range as it is (every key locked
  // while it is taken; `joined` runs then, so that each later update of
  // every key goes to the new copy too), serialized RangeSnapshot.
  StatusOr<std::string> Snapshot(const std::function<void()>& joined) EXCLUDES(mu_);
  // On a server started again: until Restore, KV_REPLICA updates of keys
  // it does not hold yet wait (they came after the snapshot).
  void StartFilling() EXCLUDES(mu_);
  // The primary's snapshot: the keys, values, steps and optimizer states;
  // then the updates that waited.
  Status Restore(const std::string& snapshot, ps::KVServer* server) EXCLUDES(mu_);

  // KV_SET_OPTIMIZER's work: `body` is the request's RequestInfo.
  Status InstallOptimizer(const std::string& body) EXCLUDES(mu_);
  // KV_ASYNC_STATS's: worker `rank`'s counters since it last asked (reset).
  proto::AsyncStats TakeAsyncStats(int rank) EXCLUDES(stats_mu_);

 private:
  struct Gather;
  // The received values as a float tensor, keeping the message alive.
  static Tensor View(const ps::Blob& vals);
  // A push's values as float32: as they arrived, or decoded when the worker
  // compressed them (KeyRecord::compression). `n`: the key's elements here.
  // Errors name the key and the sender.
  static StatusOr<ps::Blob> PushedFloats(const KeyRecord& rec, const ps::Blob& vals, int64_t n,
                                         const std::string& name, const std::string& sender);
  // What holds for a whole request, shared by its keys.
  struct Request {
    ps::RequestMeta meta;
    proto::RequestInfo info;
  };
  // One key of a push, pull or push-pull, possibly waiting for a later
  // step. With several keys in the request, `gather` collects the answer
  // and `index` is the key's place in it.
  struct Deferred {
    std::shared_ptr<const Request> req;
    ps::KVPairs data;  // this key's, and its pushed values
    KeyRecord rec;
    std::shared_ptr<Gather> gather;
    int index = -1;
    const ps::RequestMeta& meta() const { return req->meta; }
    const proto::RequestInfo& info() const { return req->info; }
  };
  struct KeyState {
    std::mutex mu;
    std::string name;          // the user's key, for messages
    Tensor value;              // float32 (n), CPU
    int64_t step = 0;          // sync: completed steps
    Tensor previous;           // sync, KeepPreviousValues: after step - 1
    Tensor merge;              // sync: sum of this step's pushes
    Tensor first;              // sync: the step's only push so far, unsummed
                               // (a view of the received message: no copy)
    std::vector<bool> pushed;  // sync: by worker rank, this step
    std::vector<Tensor> parts;  // sync, ordered_sum_: this step's pushes by rank
    int num_pushed = 0;
    std::multimap<int64_t, Deferred> later;  // sync: pushes for later steps
    std::vector<Deferred> pulls;             // sync: answered after a step
    // sync, server replicas: pushes acknowledged after their step; whether
    // the last step is being passed on to the copies; the last update.
    std::vector<Deferred> acks;
    bool forwarding = false;
    Status update_status;
    // async: pushes applied; by worker rank, its pushes of the key (its
    // clock) and `updates` when it was last answered.
    int64_t updates = 0;
    // async: the key's recent staleness, each push weighing
    // kStalenessWeight (staleness-aware updates).
    double mean_staleness = 0;
    std::vector<int64_t> clock, seen;
    // async, server replicas: by worker rank, the steps of its last pushes
    // applied (replica::kRememberedPushes), to recognise one sent again.
    replica::AppliedSteps applied;
    // Bounded staleness: answers waiting for the slowest worker, since when.
    std::vector<std::pair<Deferred, std::chrono::steady_clock::time_point>> held;
    // sync: the value as levels, encoded for the first worker that asked
    // and sent to the others as it is (at step `levels_step`).
    ps::Blob levels;
    int64_t levels_step = -1;
    uint32_t levels_bits = 0;
  };

  void Init(const ps::RequestMeta& meta, const ps::KVPairs& data,
            const proto::RequestInfo& info, ps::KVServer* server);
  // KV_STEPS: each key's step (proto::KV_STEPS).
  void Steps(const ps::RequestMeta& meta, const ps::KVPairs& data,
             const proto::RequestInfo& info, ps::KVServer* server);
  // A sync pull with RequestInfo.exact: the value after the record's step.
  void AnswerExact(KeyState* st, uint64_t key, const Deferred& d, ps::KVServer* server)
      REQUIRES(st->mu);
  // Every push, pull and push-pull (server_push_pull.cc): each key by its
  // own rules, as its KeyRecord says; one answer once every key is done.
  void Serve(const ps::RequestMeta& meta, const ps::KVPairs& data,
             const proto::RequestInfo& info, ps::KVServer* server);
  // One key of it, its state locked.
  void ServeKey(KeyState* st, uint64_t key, const Deferred& d, ps::KVServer* server)
      REQUIRES(st->mu);
  // Answers a deferred request: with the key's value, an error, or (a push
  // without pull) an empty acknowledgement.
  void Answer(const Deferred& d, KeyState* st, uint64_t key, ps::KVServer* server)
      REQUIRES(st->mu);
  void Fail(const Deferred& d, const Status& error, ps::KVServer* server);
  // Why a dist_sync push or pull of `step` can never be answered (a worker
  // that finished never pushed it), or "".
  std::string Blocking(const KeyState& st, int64_t step) const {
    return finished_.Blocking("it", st.step, [&st](int r) { return st.pushed[r]; }, step);
  }
  void Ack(const Deferred& d, ps::KVServer* server);
  void SetOptimizer(const ps::RequestMeta& meta, const proto::RequestInfo& info,
                    ps::KVServer* server);
  void SaveStates(const ps::RequestMeta& meta, const ps::KVPairs& data, ps::KVServer* server);
  void LoadStates(const ps::RequestMeta& meta, const ps::KVPairs& data,
                  ps::KVServer* server);

  // Applies one async push (its size checked) and answers it: at once, or
  // once the slowest worker is close enough (RequestInfo.bounded); then
  // answers what the push released.
  void AsyncPush(KeyState* st, uint64_t key, const Deferred& push, ps::KVServer* server)
      REQUIRES(st->mu);
  // Answers an async pull or push-pull, or holds it while some worker's
  // clock is below its step - staleness.
  void AnswerAsync(KeyState* st, uint64_t key, const Deferred& d, ps::KVServer* server)
      REQUIRES(st->mu);
  void ReleaseHeld(KeyState* st, uint64_t key, ps::KVServer* server) REQUIRES(st->mu);
  // KV_ASYNC_STATS: the sender's counters since it last asked.
  void AsyncStats(const ps::RequestMeta& meta, ps::KVServer* server) EXCLUDES(stats_mu_);
  void CountStaleness(int rank, int64_t staleness) EXCLUDES(stats_mu_);
  void CountHeld(int rank, std::chrono::steady_clock::duration held) EXCLUDES(stats_mu_);

  // Applies one sync push (state locked), and completes every step it and
  // the pushes queued for later steps complete.
  void SyncPush(KeyState* st, uint64_t key, const Deferred& push,
                ps::KVServer* server) REQUIRES(st->mu);
  // Checks one sync push and adds it to its step's sum, queues it for a
  // later step, or answers it with an error. True when it completes the
  // step (every worker pushed).
  bool Admit(KeyState* st, const Deferred& push, ps::KVServer* server) REQUIRES(st->mu);
  // All workers pushed: update (CompleteStep), then answer this step's
  // pulls and pushes (FinishStep); with server replicas, the copies get the
  // update in between (Advance: then the steps queued after it).
  void CompleteStep(KeyState* st, uint64_t key, ps::KVServer* server)
      REQUIRES(st->mu);
  void FinishStep(KeyState* st, uint64_t key, ps::KVServer* server) REQUIRES(st->mu);
  void Advance(KeyState* st, uint64_t key, ps::KVServer* server) REQUIRES(st->mu);
  // With server replicas, the step just completed (its update `grad`) goes
  // to the range's other copies when this server is its primary, and its
  // answers and the steps queued after it follow once they hold it. False:
  // nothing sent; the caller finishes the step at once.
  bool PassOn(KeyState* st, uint64_t key, const Tensor& grad, ps::KVServer* server)
      REQUIRES(st->mu);
  // Admits the pushes queued for the next step: true when that completes it.
  bool AdmitLater(KeyState* st, uint64_t key, ps::KVServer* server) REQUIRES(st->mu);
  // Forwarder's call for one update; `then` runs under st->mu once every
  // copy applied it. False: nothing sent (run `then`'s work at once).
  bool Forward(KeyState* st, uint64_t key, proto::KVSyncMode mode,
               const proto::ReplicaUpdate& update, const Tensor& grad,
               std::function<void()> then) REQUIRES(st->mu);
  // KV_REPLICA on a copy: applies the primary's update.
  void ApplyReplica(const ps::RequestMeta& meta, const ps::KVPairs& data,
                    const proto::RequestInfo& info, ps::KVServer* server);
  Status Apply(KeyState* st, uint64_t key, const Tensor& grad, bool accumulate,
               float step_scale = 1.0f) REQUIRES(st->mu);
  // The key's value as the request asks for it (KeyRecord::half,
  // level_bits): float32, IEEE halves, or levels (an error naming the key
  // where the value is not a step's sum or takes too many values).
  StatusOr<ps::Blob> EncodedValue(KeyState* st, const Deferred& d) REQUIRES(st->mu);

  KeyState* Find(uint64_t key) EXCLUDES(mu_);
  // Find, answering `meta` with a not-found error if missing (naming the
  // server key: the name arrives with KV_INIT only; a worker checks its own
  // keys first and names them).
  KeyState* FindOrRespond(uint64_t key, const ps::RequestMeta& meta,
                          ps::KVServer* server) EXCLUDES(mu_);
  std::shared_ptr<Optimizer> optimizer() EXCLUDES(mu_);

  const int num_workers_;
  const uint64_t key_base_;
  const bool ordered_sum_;
  Forwarder forward_;
  bool keep_previous_ = false;
  // KV_SET_OPTIMIZER's body (for a snapshot); updates waiting for Restore.
  std::string optimizer_body_ GUARDED_BY(mu_);
  bool filling_ GUARDED_BY(mu_) = false;
  struct Waiting {
    ps::RequestMeta meta;
    ps::KVPairs data;
    proto::RequestInfo info;
  };
  std::vector<Waiting> waiting_ GUARDED_BY(mu_);
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<KeyState>> keys_ GUARDED_BY(mu_);
  std::shared_ptr<Optimizer> optimizer_ GUARDED_BY(mu_);
  FinishedWorkers finished_;
  sparse::SparseServer sparse_;
  std::mutex stats_mu_;
  // By worker rank, since it last asked (KV_ASYNC_STATS).
  std::vector<proto::AsyncStats> stats_ GUARDED_BY(stats_mu_);
};

// The key ranges one server process holds, each in its own ServerHandler:
// its own range and, with server replicas (KVTRAIN_SERVER_REPLICAS = R),
// the ranges of the R servers before it in rank order. A copy applies each
// update its range's primary passes on (KV_REPLICA), with its own values,
// steps, tables and optimizer state keyed as on the primary, so when it
// becomes the primary it answers exactly as the primary would have.
// Without replicas, one handler and no extra work. Thread-safe.
class ServerRanges {
 public:
  explicit ServerRanges(ps::Postoffice* po);

  // A request with keys goes to the handler of its first key's range (a
  // worker's request never spans ranges); a command without keys to every
  // handler where it changes them (the optimizer), else to the ranges this
  // server now serves as primary.
  void Handle(const ps::RequestMeta& meta, const ps::KVPairs& data, ps::KVServer* server);
  // The row-sparse tables' counters of every range held ("" if none).
  std::string SparseReport();
  // Worker `rank` was started again (ServerHandler::ForgetWorker).
  void ForgetWorker(int rank);
  // KV_WORKER_DONE on every range this server holds.
  void WorkerDone(int rank, ps::KVServer* server);
  // A server started again (Postoffice::incarnation() > 0): asks each
  // range's primary for the range (KV_FILL), takes it in, and tells the
  // scheduler, which makes it a copy again. Before, the updates the
  // primaries pass on wait (ServerHandler::StartFilling).
  Status Fill(ps::KVServer* server);

 private:
  // KV_FILL from a server started again: the range's snapshot, and from
  // then on its updates.
  void Snapshot(const ps::RequestMeta& meta, const ps::KVPairs& data, ps::KVServer* server);
  int RangeOf(uint64_t key) const;
  // Whether this server is the first live copy of `range`.
  bool Primary(int range) const;
  // The other live copies of `range` when this server is its primary.
  std::vector<int> Copies(int range) const;
  // Passes one update of `range` on to its copies (ServerHandler::Forwarder).
  bool Forward(int range, uint64_t key, std::string body, ps::Blob grad,
               std::function<void()> done);

  ps::Postoffice* const po_;
  const std::vector<ps::KeyRange> ranges_;
  std::map<int, std::unique_ptr<ServerHandler>> handlers_;  // by range; fixed
  std::unique_ptr<ps::KVWorker> to_copies_;  // with replicas
  // By range this server is the primary of: servers started again that
  // took its snapshot and are not yet copies in every node's table.
  mutable std::mutex joining_mu_;
  std::map<int, std::set<int>> joining_ GUARDED_BY(joining_mu_);
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SERVER_H_
