// KVStore: the key-value store training code pushes gradients to and pulls
// weights from. Types: local (reduce and update on the CPU), device (on the
// GPUs), and the distributed dist_sync, dist_device_sync and dist_async,
// whose values live on parameter servers. Create one with KVStore::Create.
//
// Distributed jobs: every process of the job (started by tracker/launch.py
// with DMLC_ROLE=scheduler|server|worker) creates the same dist store. In a
// worker it is the store to train with; in a server or scheduler process it
// only serves: call RunServer(), which returns when the job ends.
#ifndef KVTRAIN_KVSTORE_KVSTORE_H_
#define KVTRAIN_KVSTORE_KVSTORE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "net/node_config.h"
#include "base/status.h"
#include "tensor/tensor.h"
#include "proto/kvstore.pb.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {

namespace ps {
class Postoffice;
}
namespace collective {
class Communicator;
}

// A key: a non-negative int or a string (a parameter's name). A store may
// hold both kinds. Value type, implicitly built from either.
class Key {
 public:
  Key(int id) : id_(id) {}                                   // NOLINT
  Key(const char* name) : id_(-1), name_(name) {}             // NOLINT
  Key(std::string name) : id_(-1), name_(std::move(name)) {}  // NOLINT

  bool is_name() const { return id_ < 0 && !name_.empty(); }
  int id() const { return id_; }
  const std::string& name() const { return name_; }
  // "3" or "fc1_weight".
  std::string ToString() const { return is_name() ? name_ : std::to_string(id_); }

 private:
  int id_;
  std::string name_;
};

// An update rule for the non-distributed types: weight <- f(weight, grad).
// `key` is the key as the caller gave it.
using Updater =
    std::function<Status(const Key& key, const Tensor& grad, Tensor* weight)>;

struct KVStoreOptions {
  // The environment (DMLC_*, PS_*, KVTRAIN_*) dist types are configured from.
  EnvLookup env = ProcessEnv();
  // Tests: an already started node to use instead of creating one from
  // `env`. It must outlive the store.
  ps::Postoffice* postoffice = nullptr;
  // dist_allreduce: the group to reduce over (e.g. a Split of the world:
  // the replicas of one model shard); null = join the job from `env`.
  std::shared_ptr<collective::Communicator> communicator;
};

// Handle of an asynchronous push/pull; pass it to Wait once.
using KVHandle = int64_t;

// How the servers of an asynchronous store (dist_async, dist_ssp) treat
// each worker's pushes.
struct AsyncOptions {
  // Bounded staleness (stale synchronous parallel): a worker's pull or
  // push-pull of a key after its t-th push is answered only once every
  // worker has pushed the key t - staleness times, so no worker runs more
  // than `staleness` steps ahead of the slowest (0: each step waits for
  // every worker's, as dist_sync, but every push is its own update). < 0:
  // unbounded (dist_async). dist_ssp's default is 2.
  int64_t staleness = -1;
  // Staleness-aware updates: each push's effective step, learning rate /
  // (1 - momentum), is divided by 1 + the updates its key received from
  // other pushes since this worker last read it: the momentum lowered
  // first, as asynchrony adds momentum of its own, then the learning rate
  // (Optimizer::Update's step_scale). Needs an optimizer on the servers.
  bool staleness_lr = false;
};

// dist_ssp's staleness bound unless SetAsyncOptions gives another.
inline constexpr int64_t kDefaultSspStaleness = 2;

// An asynchronous store's counters of one worker's pushes (every key and
// piece) over some period.
struct StalenessReport {
  int64_t pushes = 0;
  // Staleness: the updates a key received from other pushes between this
  // worker's read of it and its push's update.
  double mean = 0;
  int64_t max = 0;
  // Bounded staleness: this worker's answers (one per key or piece and
  // step) held for the slowest worker, and for how many seconds in all.
  int64_t held = 0;
  double held_seconds = 0;
};

// Thread-safe: calls may come from several threads (the trainer pushes from
// the engine's callbacks). Values are float32 tensors on any device.
class KVStore {
 public:
  // `type`: local, device, dist_sync, dist_device_sync, dist_async,
  // dist_ssp (dist_async with bounded staleness, AsyncOptions),
  // dist_allreduce (workers only, gradients summed by all-reduce). An
  // unknown type is an error listing the valid ones. Dist types read the
  // job's environment (NodeConfig) and join the job.
  static StatusOr<std::unique_ptr<KVStore>> Create(
      const std::string& type, const KVStoreOptions& options = {});
  // The valid type names.
  static const std::vector<std::string>& Types();

  virtual ~KVStore() = default;

  const std::string& type() const { return type_; }
  // This process's role; kWorker for non-distributed types.
  virtual Role role() const { return Role::kWorker; }
  bool is_worker() const { return role() == Role::kWorker; }
  // Worker rank and count; 0 and 1 for non-distributed types.
  virtual int rank() const { return 0; }
  virtual int num_workers() const { return 1; }
  // Waits for every worker.
  virtual Status Barrier() { return Status::OK(); }
  // A dist_* type: the job has other workers (and, but for
  // dist_allreduce, servers) that this store talks to.
  bool is_distributed() const { return type_.rfind("dist", 0) == 0; }
  // Whether one update applies the sum of every worker's gradients (the
  // synchronous dist types and dist_allreduce), not one worker's push
  // (dist_async, where each push is its own update). The trainer scales
  // gradients by 1/(batch x num_workers) only for these, as MXNet does.
  bool sums_workers() const { return is_distributed() && !is_async(); }
  // dist_async and dist_ssp: every push is its own update on the servers.
  bool is_async() const { return type_ == "dist_async" || type_ == "dist_ssp"; }
  // Whether every worker must run the same number of steps: the stores
  // that sum the workers' steps, and bounded staleness (a worker that
  // stopped early would hold the others forever).
  bool lockstep() const {
    return sums_workers() || (is_async() && async_options().staleness >= 0);
  }

  // Asynchronous stores: see AsyncOptions. Call it on every worker before
  // the first push. Other types are an error.
  virtual Status SetAsyncOptions(const AsyncOptions& options);
  virtual AsyncOptions async_options() const { return {}; }
  // Asynchronous stores: this worker's counters since the last call (or
  // the start), gathered from every server. Other types are an error.
  virtual StatusOr<StalenessReport> TakeStalenessReport();
  // Server replicas (docs/reliability.md): the servers this worker lost
  // since the last call and the pauses their deaths cost it, in seconds.
  // Zeros for other stores and jobs without losses.
  virtual std::pair<int64_t, double> TakeServerLosses() { return {0, 0.0}; }
  // A worker started again in a running job (launch.py --max-restarts):
  // after its Init, the steps the job completed without it, from which it
  // goes on (Fit positions its data there); -1 in a process of the job's
  // first start, and for other stores.
  virtual int64_t ResumeStep() const { return -1; }

  // Sets the keys' initial values. Dist types: rank 0's values win, and
  // every worker returns only when they are on the servers. A key may be
  // initialised once.
  virtual Status Init(const std::vector<Key>& keys,
                      const std::vector<Tensor>& values) = 0;

  // A step's calls: issue every key's PushPullAsync (or PushAsync) first,
  // then Wait on them; stores may gather the keys of a step into buckets
  // that travel or reduce together, and a Wait before the rest of its
  // bucket was pushed sends or reduces the bucket early.
  //
  // Pushes values: a key may appear several times (one value per device);
  // its values are summed first. Then the key's update runs: the optimizer
  // or updater if set, otherwise the stored value becomes the sum. Higher
  // `priority` goes first on the network. Values may be sent without a
  // copy: do not modify them until Wait returns.
  virtual StatusOr<KVHandle> PushAsync(const std::vector<Key>& keys,
                                       const std::vector<Tensor>& values,
                                       int priority = 0) = 0;
  // Copies each key's value into `outs` (a key may appear several times).
  // The tensors are views: their memory is written.
  virtual StatusOr<KVHandle> PullAsync(const std::vector<Key>& keys,
                                       const std::vector<Tensor>& outs,
                                       int priority = 0) = 0;
  // Push then pull the result, in one round trip for dist types.
  virtual StatusOr<KVHandle> PushPullAsync(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& values,
                                           const std::vector<Tensor>& outs,
                                           int priority = 0) = 0;
  // Waits for an asynchronous call; its error, if any, names the key.
  virtual Status Wait(KVHandle handle) = 0;
  // Sends at once what the store holds back to send with later calls (dist
  // types: the open bucket): the caller has made every call it is about to
  // wait for, e.g. a trainer's last push-pull of a step. Errors surface at
  // Wait. Optional: Wait sends it anyway.
  virtual void Flush() {}

  // Synchronous forms.
  Status Push(const std::vector<Key>& keys, const std::vector<Tensor>& values,
              int priority = 0);
  Status Pull(const std::vector<Key>& keys, const std::vector<Tensor>& outs,
              int priority = 0);
  Status PushPull(const std::vector<Key>& keys,
                  const std::vector<Tensor>& values,
                  const std::vector<Tensor>& outs, int priority = 0);

  // Row-sparse keys: a table of rows of spec.width float32 values indexed by
  // int64 row ids (an embedding), of which only the rows a call names move.
  // Rows come into being when first pushed (proto::SparseTableSpec: initial
  // values, admission, expiry, a row cap); dist types spread each table's
  // rows over all servers by a hash of the row id. Every type but
  // dist_allreduce (which has no servers) supports them.
  //
  // Declares `key` a row-sparse key. Dist types: rank 0's spec is sent,
  // and every worker returns once the servers hold the table.
  virtual Status InitRowSparse(const Key& key, const proto::SparseTableSpec& spec);
  // Pushes gradient rows: `ids` int64 (n), any order, repeats summed;
  // `rows` float32 (n, width). Then the touched rows are updated lazily by
  // the optimizer (SetOptimizer; only rows a push names change, and only
  // they carry optimizer state), or without one become the pushed sum.
  // dist_sync: a step sums every worker's push (a worker with no rows
  // pushes n = 0, which still counts). Do not modify the tensors until
  // Wait returns.
  virtual StatusOr<KVHandle> PushRowSparseAsync(const Key& key, const Tensor& ids,
                                                const Tensor& rows, int priority = 0);
  // Copies the rows of `ids` (int64 (n), repeats allowed) into `out`
  // (float32 (n, width)): rows never pushed read as their initial value.
  // dist_sync: the values after this worker's last push of the key was
  // applied (every worker's push of that step).
  virtual StatusOr<KVHandle> RowSparsePullAsync(const Key& key, const Tensor& ids,
                                                const Tensor& out, int priority = 0);
  Status PushRowSparse(const Key& key, const Tensor& ids, const Tensor& rows,
                       int priority = 0);
  // Writes the whole table of a row-sparse key (every server's shard: rows,
  // their optimizer state, recency and admission counters) to `path`,
  // atomically and checksummed; Load restores it into a table declared
  // with the same spec (dist types: on as many servers), and training goes
  // on exactly as it would have. Dist types: one worker calls them, after
  // its pushes were waited for.
  virtual Status SaveRowSparse(const Key& key, const std::string& path);
  // The counters of a row-sparse key's table, one entry per server (one
  // for the non-distributed types): rows held, created, evicted, expired,
  // ids awaiting admission, gradient rows dropped before admission, updates
  // and bytes held.
  virtual StatusOr<std::vector<proto::SparseTableStats>> RowSparseStats(const Key& key);
  virtual Status LoadRowSparse(const Key& key, const std::string& path);
  Status RowSparsePull(const Key& key, const Tensor& ids, const Tensor& out,
                       int priority = 0);

  // The optimizer applied on every push. Dist types: sent to the servers as
  // a protobuf (never code) and applied there.
  virtual Status SetOptimizer(const proto::OptimizerSpec& spec) = 0;
  // A custom update rule; non-distributed types only.
  virtual Status SetUpdater(Updater updater) = 0;
  // Every key's optimizer state, written atomically to `path`; for dist
  // types the servers' states are gathered. Load restores them.
  virtual Status SaveOptimizerStates(const std::string& path) = 0;
  virtual Status LoadOptimizerStates(const std::string& path) = 0;

  // Dist types (dist_sync, dist_device_sync, dist_async, dist_allreduce):
  // every later push sends its gradients compressed as `spec` says
  // (compression/compression.h: 2bit, 1bit, fp16). Call it on every worker
  // before Init. Other types, and a bad spec, are errors.
  virtual Status SetGradientCompression(const proto::GradientCompression& spec);
  // The spec set (type NONE when none was).
  virtual proto::GradientCompression gradient_compression() const { return {}; }
  // 2bit on every array (min_bytes 0) with an SGD optimizer that has
  // momentum m: momentum correction (kvstore/compressor.h,
  // Compressor::SetMomentum) keeps each key's velocity on the worker,
  // before error feedback, and the spec returned is the one
  // the update must then apply: momentum 0 and weight decay / (1 - m), what
  // momentum made of it. SetOptimizer does it itself; a worker that runs
  // the optimizer (FitOptions.update_on_kvstore false) builds it from the
  // spec returned. Otherwise `spec` as it is.
  virtual proto::OptimizerSpec CorrectMomentum(const proto::OptimizerSpec& spec) {
    return spec;
  }
  // Whether push-pulls of the compressed keys come back as each step's
  // summed codes in a few bits per value (levels, exact) when the workers
  // run the optimizer (no SetOptimizer): dist_sync and dist_device_sync with
  // 2bit or 1bit, the default pull, and few enough workers. Then both
  // directions travel compressed; with SetOptimizer the weights come back
  // in float32.
  virtual bool SumsComeBackAsLevels() const { return false; }
  // Whether this worker's push-pull answers for an array of `size` floats
  // come back rounded (to float16 halves: fp16 compression, or a spec's
  // pull fp16), so that the worker holds the servers' weights rounded and a
  // plain Pull, which is exact, differs from them. Only dist parameter-server
  // types round; with SetOptimizer unset the servers answer sums, which the
  // worker's own optimizer applies to its exact weights.
  virtual bool AnswersRounded(int64_t size) const {
    (void)size;
    return false;
  }
  // Rounds `n` floats as such an answer would be (see AnswersRounded).
  virtual void RoundAsAnswered(float* v, int64_t n) const {
    (void)v;
    (void)n;
  }
  // Whether the store keeps part of each push's gradients on this worker
  // (error feedback: 2bit and 1bit), which SaveResiduals must save with a
  // checkpoint and LoadResiduals restore.
  bool KeepsResiduals() const;
  // The compression's name as users write it ("2bit", "none").
  std::string CompressionName() const;
  // 2bit and 1bit keep what was not sent of each key's gradients on the
  // worker (error feedback). Save writes this worker's residuals to `path`
  // (atomically); Load restores them, checking the spec, rank and worker
  // count they were saved with. Every worker saves and loads its own.
  virtual Status SaveResiduals(const std::string& path);
  virtual Status LoadResiduals(const std::string& path);

  // Server and scheduler processes of dist types: serve until the job ends.
  // Workers and non-distributed types: an error.
  virtual Status RunServer();
  // Dist types: leave the job cleanly; every worker calls it once at the
  // end (it returns when every node has). A worker's store destroyed
  // without Finalize aborts the whole job at once, so a worker that fails
  // stops the others instead of leaving them waiting.
  virtual Status Finalize() { return Status::OK(); }
  // Dist types: fails the whole job at once with `reason` (e.g. the user
  // pressed Ctrl-C): this process's pending and later calls fail, and the
  // job's other processes are told. Non-distributed types: nothing to stop.
  // Thread-safe; callable while another thread waits in this store.
  virtual void Abort(const std::string& reason) { (void)reason; }

 protected:
  explicit KVStore(std::string type) : type_(std::move(type)) {}

 private:
  const std::string type_;
};

// A dist_allreduce store over an existing communicator (every rank of it
// creates one). Same as Create("dist_allreduce") with options.communicator.
StatusOr<std::unique_ptr<KVStore>> CreateAllreduceKVStore(
    std::shared_ptr<collective::Communicator> communicator,
    const KVStoreOptions& options = {});

// The weights of a table file written by SaveRowSparse: every row it holds
// (rows never trained are not in it: they read as the spec's initial
// value), without optimizer state, sorted by id, whatever the number of
// servers that held it. Errors name the file.
struct TableRows {
  std::string key;
  proto::SparseTableSpec spec;
  int64_t width = 0;
  std::vector<int64_t> ids;
  std::vector<float> rows;  // ids.size() x width
};
StatusOr<TableRows> ReadRowSparseTable(const std::string& table_path);

// Writes them to `out_path` (atomically) for serving or inspection:
//   kText: one line per row, "id v1 ... vW", each float exact (%.9g);
//   kBinary: "KVROWS01", int64 width, int64 n, then n int64 ids, then
//            n x width float32 (little-endian).
enum class RowExportFormat { kText, kBinary };
Status ExportRowSparseTable(const std::string& table_path, const std::string& out_path,
                            RowExportFormat format);

}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_KVSTORE_H_
