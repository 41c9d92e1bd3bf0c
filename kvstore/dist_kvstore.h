// The worker side of dist_sync, dist_device_sync, dist_async and dist_ssp
// (dist_async with bounded staleness, AsyncOptions): keys are
// placed on the servers and large ones cut into pieces
// (kvstore/placement.h); pushes, pulls and push-pulls all travel in
// buckets of about KVTRAIN_PS_BUCKET_BYTES (a piece alone, without
// copies), one request per server carrying that server's keys with a
// KeyRecord each (kvstore/request.h); gradients may travel compressed
// (dist_kvstore_compression.cc); the servers' optimizer and its states,
// RunServer (in server and scheduler processes) and Finalize are in
// dist_kvstore_commands.cc.
#ifndef KVTRAIN_KVSTORE_DIST_KVSTORE_H_
#define KVTRAIN_KVSTORE_DIST_KVSTORE_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "kvstore/handles.h"
#include "kvstore/keys.h"
#include "kvstore/settings.h"
#include "kvstore/compressor.h"
#include "kvstore/kvstore.h"
#include "kvstore/placement.h"
#include "kvstore/request.h"
#include "transport/ps/ps.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace kv {

// Key `id`'s server key for piece `piece` on the server of `range` (a
// row-sparse key: piece 0 on every server); an error naming the key when
// the range is too small.
StatusOr<uint64_t> ServerKey(const ps::KeyRange& range, uint64_t id, int piece,
                             const std::string& name);

// Thread-safe.
class DistKVStore : public KVStore {
 public:
  // Joins the job (or uses options.postoffice).
  static StatusOr<std::unique_ptr<KVStore>> Create(const std::string& type,
                                                   const KVStoreOptions& options);
  ~DistKVStore() override;

  Role role() const override;
  // Push-pulls are bucketed: push every key of a step, then wait (a Wait
  // sends a bucket that is not yet full).
  int rank() const override;
  int num_workers() const override;
  Status Barrier() override;
  Status Init(const std::vector<Key>& keys,
              const std::vector<Tensor>& values) override;
  StatusOr<KVHandle> PushAsync(const std::vector<Key>& keys,
                               const std::vector<Tensor>& values,
                               int priority) override;
  StatusOr<KVHandle> PullAsync(const std::vector<Key>& keys,
                               const std::vector<Tensor>& outs,
                               int priority) override;
  StatusOr<KVHandle> PushPullAsync(const std::vector<Key>& keys,
                                   const std::vector<Tensor>& values,
                                   const std::vector<Tensor>& outs,
                                   int priority) override;
  Status Wait(KVHandle handle) override;
  void Flush() override;
  Status SetOptimizer(const proto::OptimizerSpec& spec) override;
  Status SetUpdater(Updater updater) override;
  Status SaveOptimizerStates(const std::string& path) override;
  Status LoadOptimizerStates(const std::string& path) override;
  // Before Init, on every worker. The servers decode each push and, for
  // fp16, answer push-pulls with halves; dist_sync without SetOptimizer
  // answers 2bit and 1bit push-pulls with the step's sum as levels.
  Status SetGradientCompression(const proto::GradientCompression& spec) override;
  proto::GradientCompression gradient_compression() const override;
  proto::OptimizerSpec CorrectMomentum(const proto::OptimizerSpec& spec) override;
  bool SumsComeBackAsLevels() const override;
  bool AnswersRounded(int64_t size) const override;
  void RoundAsAnswered(float* v, int64_t n) const override;
  Status SaveResiduals(const std::string& path) override;
  Status LoadResiduals(const std::string& path) override;
  // dist_async and dist_ssp: the options travel in every push and pull;
  // the report asks every server (KV_ASYNC_STATS).
  Status SetAsyncOptions(const AsyncOptions& options) override;
  AsyncOptions async_options() const override;
  StatusOr<StalenessReport> TakeStalenessReport() override;
  std::pair<int64_t, double> TakeServerLosses() override;
  // A worker started again (its postoffice's incarnation > 0): Init sends
  // no values (the servers hold the job's) but asks each key's step
  // (KV_STEPS); the keys' step counters go on from the least, the step it
  // returns. Its first pulls take the values after exactly that step
  // (RequestInfo.exact), its first pushes may repeat the dead process's
  // (RequestInfo.replay); SetOptimizer and LoadOptimizerStates change
  // nothing on the servers.
  int64_t ResumeStep() const override { return resume_step_.load(); }
  // Row-sparse keys (dist_kvstore_sparse.cc): one request per call to
  // the servers that hold the call's rows (dist_sync pushes: to every
  // server, so that each counts every worker's push).
  Status InitRowSparse(const Key& key, const proto::SparseTableSpec& spec) override;
  StatusOr<KVHandle> PushRowSparseAsync(const Key& key, const Tensor& ids,
                                        const Tensor& rows, int priority) override;
  StatusOr<KVHandle> RowSparsePullAsync(const Key& key, const Tensor& ids,
                                        const Tensor& out, int priority) override;
  Status SaveRowSparse(const Key& key, const std::string& path) override;
  Status LoadRowSparse(const Key& key, const std::string& path) override;
  StatusOr<std::vector<proto::SparseTableStats>> RowSparseStats(const Key& key) override;
  Status RunServer() override;
  Status Finalize() override;
  void Abort(const std::string& reason) override;

 private:
  struct KeyInfo {
    std::string name;
    Shape shape;
    std::vector<Part> parts;            // in element order
    std::vector<uint64_t> server_keys;  // one per part, ascending
    std::vector<int64_t> part_bytes;
    int64_t pushes = 0;                 // this worker's push count
  };
  // Pushes, pulls or push-pulls of keys and pieces that travel as one
  // request (one message per server): filled by PushAsync, PullAsync and
  // PushPullAsync, sent by FlushBucket, and answered once, by the first
  // Wait of any handle it serves.
  struct Bucket {
    enum class Kind { kPush, kPull, kPushPull };
    struct Entry {
      std::string name;
      uint64_t server_key = 0;
      int64_t step = 0;
      KeyInfo* key = nullptr;    // whose step counter gave `step`
      ps::Blob value;            // the reduced push as it travels (pushes)
      int64_t count = 0;         // its elements
      CompressionType compression = proto::GradientCompression::NONE;
      bool half = false;         // answered as IEEE halves (fp16)
      int levels = 0;            // answered as levels of these bits
      std::vector<Tensor> outs;  // where the key's new value goes
    };
    std::vector<Entry> entries;  // until sent: guarded by bucket_mu_
    Kind kind = Kind::kPushPull;
    bool push() const { return kind != Kind::kPull; }
    bool pull() const { return kind != Kind::kPush; }
    int64_t bytes = 0;
    int priority = 0;
    std::mutex mu;
    bool sent GUARDED_BY(mu) = false;
    bool waited GUARDED_BY(mu) = false;
    bool landed GUARDED_BY(mu) = false;  // the transport writes the answer
    int64_t ts GUARDED_BY(mu) = -1;
    Status status GUARDED_BY(mu);  // the send's error, then the answer's
    std::vector<size_t> order GUARDED_BY(mu);  // entry of each answer
    // "fc1_weight, fc1_bias": the keys, for error messages.
    std::string Names() const;
  };
  // A row-sparse key: its table's server key on each server, in rank order.
  struct TableInfo {
    std::string name;
    proto::SparseTableSpec spec;
    std::vector<uint64_t> server_keys;
    int64_t pushes = 0;  // this worker's push count
  };
  StatusOr<TableInfo*> LookupTable(const Key& key) EXCLUDES(mu_);
  // Requests in flight for one handle, and what to do when they are done.
  // A push that never left: gives its step back when it is still the key's
  // latest, so the next push takes the step the servers wait for.
  void UndoPush(KeyInfo* ki, int64_t step) EXCLUDES(mu_);
  struct Pending {
    std::vector<int64_t> timestamps;
    std::vector<std::string> names;  // the key of each request
    std::vector<std::shared_ptr<Bucket>> buckets;
    std::function<Status()> finish;
  };

  // The key's inits, as lists of part indices: one request for all its
  // parts (one per server), or one per piece when it is cut into pieces (a
  // server takes one key per init).
  static std::vector<std::vector<size_t>> InitRequests(const KeyInfo& ki);
  // The init's keys and lengths, with `value`'s elements of those parts
  // (zero-copy).
  static ps::KVPairs InitPairs(const KeyInfo& ki, const std::vector<size_t>& request,
                               const Tensor& value);
  // Part `j` of the key's push as it travels: a view of `sum`, or encoded.
  ps::Blob PartValue(uint64_t id, const KeyInfo& ki, size_t j, const Tensor& sum,
                     bool compress);

  DistKVStore(const std::string& type, ps::Postoffice* po,
              std::unique_ptr<ps::Postoffice> owned, const StoreSettings& settings);
  Status CheckWorker(const char* call) const;
  // A request's proto::RequestInfo, serialized. `name`: KV_INIT only (the
  // server keeps it).
  static std::string RequestBody(proto::KVSyncMode mode, int64_t step,
                                 const std::string& name,
                                 const std::string& payload = "");
  // The key's metadata, checking that `shape` matches its Init shape.
  StatusOr<KeyInfo*> Lookup(const KeyGroup& g, const std::string& what)
      EXCLUDES(mu_);
  // A worker started again: the steps of its keys on the servers; every
  // key's counter goes on from the least (resume_step_).
  Status AskSteps() EXCLUDES(mu_);
  StatusOr<Tensor> Reduce(const std::vector<Tensor>& values);
  // Every push, pull and push-pull: adds one key's (push `values`, reduced,
  // and/or pull into `outs`) to the open bucket, piece by piece, sending a
  // bucket of another kind or that the next piece would overfill.
  Status AddToBucket(const KeyGroup* push, const KeyGroup* pull, int priority,
                     Pending* pending) EXCLUDES(bucket_mu_);
  // Sends the open bucket, if any: one request per server.
  Status FlushBucket() EXCLUDES(bucket_mu_);
  // FlushBucket's request: the bucket's keys in server-key order (into
  // b->order), their value lengths (pushes) and records.
  void BucketRequest(Bucket* b, std::vector<uint64_t>* keys, std::vector<int64_t>* lens,
                     std::vector<KeyRecord>* records) const;
  // The bucket's values in b->order: one entry's as it is, several copied
  // into one buffer (so callers may reuse theirs once Wait returns).
  static ps::Blob JoinValues(const Bucket& b);
  // The bucket's answer, written into every entry's outs (first call),
  // waiting at most `timeout`.
  Status WaitBucket(Bucket* b, ps::Duration timeout);
  KVHandle Track(Pending pending);
  // A keyless request of `command` to every server (after the open
  // bucket); their answers' values in rank order. `what` annotates errors.
  StatusOr<std::vector<std::string>> AskEveryServer(proto::KVCommand command,
                                                    const std::string& what);
  std::string Mode() const;
  // The request's mode and, for asynchronous stores, AsyncOptions.
  void SetMode(proto::RequestInfo* info) const;
  // The level bits a push-pull of a key of `size` elements asks for: dist
  // sync without an optimizer on the servers (they hold the step's sums),
  // and Compressor::LevelAnswer.
  int LevelAnswer(int64_t size) const;
  // The smallest piece of a key of `size` elements (Placement): about
  // piece_bytes of what a push-pull of it carries on the wire, the larger
  // of the push and its answer (so piece_bytes / 4 elements uncompressed,
  // twice that with fp16); of float32 bytes on one host
  // (StoreSettings::pieces_by_wire_bytes). 0 when piece_bytes is.
  int64_t PieceElements(int64_t size) const;

  ps::Postoffice* po_;
  std::unique_ptr<ps::Postoffice> owned_po_;
  std::unique_ptr<ps::KVWorker> worker_;
  const StoreSettings settings_;
  const bool sync_;
  const bool device_reduce_;
  bool finalized_ = false;
  // Started again to take a dead worker's place (ResumeStep).
  const bool rejoining_;
  std::atomic<int64_t> resume_step_{-1};
  // Until its first push: its pulls read the values after exactly each
  // key's step (RequestInfo.exact).
  std::atomic<bool> exact_pulls_{false};
  KeyTable keys_;
  Compressor compressor_;
  // SetOptimizer was called: the servers hold weights.
  std::atomic<bool> server_optimizer_{false};
  // AsyncOptions (asynchronous stores).
  std::atomic<int64_t> staleness_{-1};
  std::atomic<bool> staleness_lr_{false};

  std::mutex mu_;
  std::map<uint64_t, KeyInfo> info_ GUARDED_BY(mu_);
  std::map<uint64_t, TableInfo> tables_ GUARDED_BY(mu_);
  Placement placement_ GUARDED_BY(mu_);

  std::mutex bucket_mu_;
  std::shared_ptr<Bucket> open_ GUARDED_BY(bucket_mu_);

  kv::HandleTable<Pending> pending_;
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_DIST_KVSTORE_H_
