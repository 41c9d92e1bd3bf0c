// dist_allreduce: data parallelism without servers. Every worker keeps the
// whole model; pushed gradients are fused into buckets and summed across
// workers by the communicator's ring all-reduce on a background thread, as
// soon as a bucket is complete; then every worker applies the same update
// (optimizer or updater) to its own copy, so all copies stay equal.
#ifndef KVTRAIN_KVSTORE_ALLREDUCE_KVSTORE_H_
#define KVTRAIN_KVSTORE_ALLREDUCE_KVSTORE_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "transport/collective/communicator.h"
#include "kvstore/handles.h"
#include "kvstore/in_process.h"
#include "kvstore/keys.h"
#include "kvstore/compressor.h"
#include "kvstore/kvstore.h"
#include "ops/optimizer.h"

namespace kvtrain {
namespace kv {

// Thread-safe. Every worker must make the same calls (Init, pushes of the
// same keys, pulls, Barrier) in the same order per thread of control; the
// buckets a worker reduces follow from its calls alone, never from timing:
//  - Init's keys, in reverse order (backward produces the last layer's
//    gradients first), are cut into buckets of about bucket_bytes;
//  - buckets are sealed strictly in that cyclic order: a bucket is sealed
//    once all of its keys are pushed and the buckets before it are sealed,
//    or when a Wait needs a key of it (then the buckets up to it are sealed
//    with whatever was pushed);
//  - sealed buckets are all-reduced in order on one background thread.
class AllreduceKVStore : public InProcessKVStore {
 public:
  // KVStore::Create("dist_allreduce"): the group from options.communicator,
  // else joined from the environment (Open MPI, PMI or launch.py's DMLC_*
  // variables; a group of one when not launched). In launch.py's scheduler
  // process the store only serves the rendezvous; a server process is an
  // error (dist_allreduce has no servers).
  static StatusOr<std::unique_ptr<KVStore>> Create(const KVStoreOptions& options);
  // The scheduler process of a launch.py job: only serves the rendezvous.
  static std::unique_ptr<KVStore> RendezvousOnly(const KVStoreOptions& options);
  // `owns_comm`: Finalize and the destructor close the communicator (false
  // for one the caller passed in, which may carry other traffic).
  AllreduceKVStore(std::shared_ptr<collective::Communicator> comm,
                   size_t bucket_bytes, std::chrono::milliseconds timeout,
                   bool owns_comm);
  ~AllreduceKVStore() override;

  int rank() const override { return comm_->rank(); }
  int num_workers() const override { return comm_->size(); }
  // Also hands optimizer states that rank 0 loaded to every rank.
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
  // Every rank's states are the same; any rank may save them. Load: call it
  // on rank 0 (or on all) and then Barrier, which hands them to the others.
  Status LoadOptimizerStates(const std::string& path) override EXCLUDES(mu_);
  Status Finalize() override;
  void Abort(const std::string& reason) override;
  // Before Init, on every rank. Each bucket's compressed gradients are
  // all-gathered (every rank's encoding reaches every rank) and summed
  // after decoding, in place of the ring all-reduce of float32.
  Status SetGradientCompression(const proto::GradientCompression& spec) override;
  proto::GradientCompression gradient_compression() const override;
  // 2bit: momentum correction (KVStore::CorrectMomentum) on every rank.
  Status SetOptimizer(const proto::OptimizerSpec& spec) override;
  proto::OptimizerSpec CorrectMomentum(const proto::OptimizerSpec& spec) override;
  Status SaveResiduals(const std::string& path) override;
  Status LoadResiduals(const std::string& path) override;

 private:
  struct Entry {
    Key key = 0;
    Tensor value;  // CPU float32
    int bucket = -1;
    size_t offset = 0;  // in the bucket's buffer, in floats
    bool pending = false;  // pushed into the open round of its bucket
    uint64_t last_seq = 0;  // work item holding its latest sealed push
  };
  struct Bucket {
    std::vector<uint64_t> ids;  // members, in buffer order
    size_t count = 0;           // floats
    std::vector<float> buffer;  // the open round's gradients
    int pushed = 0;             // members pushed in the open round
  };
  struct Pending {
    std::vector<KeyGroup> pulls;
    Status status;  // an error found when the call was made
  };

  Status PushLocked(const std::vector<KeyGroup>& groups) REQUIRES(mu_);
  void SealReady() REQUIRES(mu_);
  void SealThrough(int bucket) REQUIRES(mu_);
  void SealOne() REQUIRES(mu_);
  // Queues `fn` for the background thread; returns its sequence number.
  uint64_t Enqueue(std::function<Status()> fn) REQUIRES(mu_);
  Status WaitSeq(std::unique_lock<std::mutex>* lock, uint64_t seq)
      REQUIRES(mu_);
  Status ReduceBucket(int bucket, std::vector<float> buffer,
                      std::vector<uint64_t> ids) EXCLUDES(mu_);
  // The bucket's members (`parts`: offset, count; `data` compacted) summed
  // in place over the ranks through their compressed encodings.
  Status GatherCompressed(const std::vector<uint64_t>& ids,
                          const std::vector<std::pair<size_t, size_t>>& parts, float* data)
      EXCLUDES(mu_);
  void WorkLoop();
  KVHandle AddPending(Pending p);

  std::shared_ptr<collective::Communicator> comm_;
  const size_t bucket_floats_;
  const std::chrono::milliseconds timeout_;
  const bool owns_comm_;

  std::condition_variable cv_;
  std::map<uint64_t, Entry> store_ GUARDED_BY(mu_);
  std::vector<Bucket> buckets_ GUARDED_BY(mu_);
  int seal_cursor_ GUARDED_BY(mu_) = 0;
  std::string loaded_states_ GUARDED_BY(mu_);  // to hand out at Barrier

  std::deque<std::pair<uint64_t, std::function<Status()>>> work_
      GUARDED_BY(mu_);
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t done_seq_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);  // sticky: the first background failure
  bool stop_ GUARDED_BY(mu_) = false;
  bool finalized_ GUARDED_BY(mu_) = false;

  kv::HandleTable<Pending> handles_;
  Compressor compressor_;
  // GatherCompressed's buffers (the background thread's only).
  std::string gather_mine_;
  std::vector<char> gather_all_;
  std::thread worker_;
};

// KVTRAIN_ALLREDUCE_BUCKET_BYTES (default 4 MiB).
StatusOr<size_t> AllreduceBucketBytes(const EnvLookup& env);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_ALLREDUCE_KVSTORE_H_
