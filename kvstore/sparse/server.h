// The servers' side of row-sparse keys (the KV_SPARSE_* commands of
// proto/kvstore.proto): each server holds, for every sparse key, the table
// shard of the row ids that hash to it (ServerOfRow).
//
// dist_sync: every worker pushes each step to every server (with no rows
// where it touched none); once a server holds one push per worker for the
// key's next step, it sums the rows by id and applies one lazy update to the
// rows touched. A pull for step s is answered after step s's update.
// dist_async: each push is an update when it arrives; pulls are answered
// at once.
//
// Server replicas: the workers send to a key range's primary only, which
// passes each update (a sync step's summed rows, an async push's rows) on
// to the range's other copies (KV_REPLICA, ReplicaUpdate.sparse) and
// acknowledges the pushes and answers the step's pulls once every copy
// applied it, as for dense keys: an answered step is never lost, and a
// push a worker sends again to a new primary is recognised (by its step).
#ifndef KVTRAIN_KVSTORE_SPARSE_SERVER_H_
#define KVTRAIN_KVSTORE_SPARSE_SERVER_H_

#include <atomic>
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
#include "kvstore/sparse/replica.h"
#include "kvstore/sparse/rows.h"
#include "kvstore/sparse/table.h"
#include "ops/optimizer.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace sparse {

// Thread-safe; requests of one key arrive in order.
class SparseServer {
 public:
  // dist_sync: how many steps a push or pull may be ahead of the step being
  // summed before it is refused (the dense keys' window).
  static constexpr int64_t kSyncWindow = 16;

  // `optimizer`: the server's optimizer now (null: none set).
  // `replicated` (server replicas): every copy of a key range must hold
  // its tables bit for bit alike, so a dist_sync step adds its pushes' rows
  // in worker rank order, not as they arrive, and reads (which only the
  // range's primary answers) do not count as a use of a row: its recency
  // (LRU cap, expiry) counts updates only.
  // `finished`: the workers that finished (kv::FinishedWorkers; may be
  // null), which a sync step it never pushed can never include.
  SparseServer(int num_workers, std::function<std::shared_ptr<Optimizer>()> optimizer,
               bool replicated = false, const kv::FinishedWorkers* finished = nullptr)
      : num_workers_(num_workers),
        replicated_(replicated),
        finished_(finished),
        optimizer_(std::move(optimizer)) {}

  // Handles a KV_SPARSE_* request (data: one server key).
  void Handle(proto::KVCommand command, const ps::RequestMeta& meta,
              const ps::KVPairs& data, const proto::RequestInfo& info,
              ps::KVServer* server);

  // Server replicas (ServerHandler::Forwarder): passes an update of `key`
  // on to the range's other copies; false when there is none (not the
  // primary), and then `done` is not called. Before the first request.
  void SetForwarder(replica::Forwarder f) { forward_ = std::move(f); }
  // KV_REPLICA with ReplicaUpdate.sparse: the primary's update of a table.
  void ApplyReplica(const ps::RequestMeta& meta, const ps::KVPairs& data,
                    const proto::RequestInfo& info, ps::KVServer* server);
  // Whether server key `key` is a table here.
  bool Has(uint64_t key) EXCLUDES(mu_);
  // KV_FILL: every table into `snap` with every key locked, then runs
  // `then` (still locked).
  void Snapshot(proto::RangeSnapshot* snap, const std::function<void()>& then) EXCLUDES(mu_);
  // The tables of a snapshot (a server started again).
  Status Restore(const proto::RangeSnapshot& snap) EXCLUDES(mu_);

  // Every table's counters, one line per key: for PS_VERBOSE and metrics.
  std::string StatsReport() EXCLUDES(mu_);
  // A worker finished (after finished->Mark): the requests waiting for a
  // step it never pushed are answered with an error naming it.
  void WorkerDone(ps::KVServer* server) EXCLUDES(mu_);

 private:
  struct Deferred {
    ps::RequestMeta meta;
    ps::KVPairs data;
    proto::RequestInfo info;
  };
  struct KeyState {
    explicit KeyState(std::unique_ptr<Table> t)
        : table(std::move(t)), sum(table->width()) {}
    std::mutex mu;
    std::unique_ptr<Table> table;
    uint64_t key = 0;  // the server key
    bool sync = true;
    int64_t step = 0;                       // sync: completed steps
    RowSum sum;                             // sync: this step's rows
    std::vector<bool> pushed;               // sync: by worker rank
    std::vector<Deferred> parts;            // sync, replicated_: pushes by rank
    int num_pushed = 0;
    std::multimap<int64_t, Deferred> later;  // sync: pushes of later steps
    std::vector<Deferred> pulls;             // sync: answered after a step
    // Replicas: the last step every copy holds (pulls up to it are
    // answered), whether one is being passed on, the pushes acknowledged
    // once it is, and (async) by worker rank the steps of its last pushes
    // applied.
    int64_t answered = 0;
    bool forwarding = false;
    std::vector<Deferred> acks;
    replica::AppliedSteps applied;
  };

  void Init(const ps::RequestMeta& meta, const ps::KVPairs& data,
            const proto::RequestInfo& info, ps::KVServer* server);
  void Push(KeyState* st, const Deferred& push, ps::KVServer* server) REQUIRES(st->mu);
  // Adds a sync push to its step (or queues or refuses it); true when the
  // step is complete. A push is acknowledged when it is added: one for a
  // later step waits, unanswered, for its step to begin.
  bool Admit(KeyState* st, const Deferred& push, ps::KVServer* server) REQUIRES(st->mu);
  // Completes steps while one is complete and none is being passed on.
  void Advance(KeyState* st, ps::KVServer* server) REQUIRES(st->mu);
  // Sums and applies the step; true when its answers wait for the copies.
  bool CompleteStep(KeyState* st, ps::KVServer* server) REQUIRES(st->mu);
  // Answers the pushes and pulls of the steps applied so far.
  void FinishStep(KeyState* st, ps::KVServer* server, const Status& s = Status::OK())
      REQUIRES(st->mu);
  // Admits the queued pushes of the next step.
  void AdmitLater(KeyState* st, ps::KVServer* server) REQUIRES(st->mu);
  void AsyncPush(KeyState* st, const Deferred& push, ps::KVServer* server) REQUIRES(st->mu);
  // Passes an update on (replica::ForwardThen); `then` runs once every
  // copy has it, under st->mu. False when there is no copy.
  bool Forward(KeyState* st, uint64_t key, const proto::RequestInfo& info, ps::Blob vals,
               std::function<void()> then) REQUIRES(st->mu);
  void AnswerPull(KeyState* st, const Deferred& pull, ps::KVServer* server)
      REQUIRES(st->mu);
  void Save(KeyState* st, const Deferred& req, ps::KVServer* server) REQUIRES(st->mu);
  void Load(KeyState* st, const Deferred& req, ps::KVServer* server) REQUIRES(st->mu);
  // The ids and rows of a push (rows null for a pull), checked: errors name
  // the key, the sender and the size or id.
  Status Parse(KeyState* st, const Deferred& req, bool with_rows, const int64_t** ids,
               size_t* n, const float** rows) REQUIRES(st->mu);

  KeyState* Find(uint64_t key) EXCLUDES(mu_);

  const int num_workers_;
  const bool replicated_;
  const kv::FinishedWorkers* const finished_;
  const std::function<std::shared_ptr<Optimizer>()> optimizer_;
  replica::Forwarder forward_;
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<KeyState>> keys_ GUARDED_BY(mu_);
};

}  // namespace sparse
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SPARSE_SERVER_H_
