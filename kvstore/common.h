// Pieces shared by the KVStore types: the key table (user keys to internal
// ids), grouping a call's tensors by key with their checks, summing values
// across devices, the store's environment settings, and states files.
#ifndef KVTRAIN_KVSTORE_COMMON_H_
#define KVTRAIN_KVSTORE_COMMON_H_

#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "compression/compression.h"
#include "kvstore/kvstore.h"
#include "ops/optimizer.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace kv {

// Maps keys to internal ids: int keys to themselves, names to 2^32 + the
// order in which this process first saw them (every worker of a job sees
// the same names in the same order, so ids agree). Thread-safe.
class KeyTable {
 public:
  StatusOr<uint64_t> Id(const Key& key) EXCLUDES(mu_);
  // The user's spelling of an internal id.
  std::string Name(uint64_t id) const EXCLUDES(mu_);

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> by_name_ GUARDED_BY(mu_);
  std::map<uint64_t, std::string> names_ GUARDED_BY(mu_);
};

// One key's tensors within a call, in call order.
struct KeyGroup {
  uint64_t id = 0;
  std::string name;
  std::vector<Tensor> tensors;
};

// Groups `tensors` by key (order of first appearance). Errors name the call
// and key: count mismatch, undefined tensor, non-float32, shapes of one key
// that differ.
StatusOr<std::vector<KeyGroup>> GroupByKey(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& tensors,
                                           const std::string& what,
                                           KeyTable* table);

// A new tensor on `device` holding the sum of `values` (inputs unchanged).
StatusOr<Tensor> SumOn(const std::vector<Tensor>& values, const Device& device);

// Copies `src` into every tensor of `outs`.
Status Broadcast(const Tensor& src, const std::vector<Tensor>& outs);

// The handles of a store's asynchronous calls: Add files what Wait will
// need and returns a new handle; Take hands it back once; an unknown or
// already-waited handle is an error naming it. Thread-safe.
template <typename T>
class HandleTable {
 public:
  KVHandle Add(T item) EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    const KVHandle h = next_++;
    items_.emplace(h, std::move(item));
    return h;
  }
  Status Take(KVHandle h, T* item) EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = items_.find(h);
    if (it == items_.end()) {
      return Status::InvalidArgument("KVStore::Wait: unknown handle " +
                                     std::to_string(h) +
                                     " (each handle is waited for once)");
    }
    *item = std::move(it->second);
    items_.erase(it);
    return Status::OK();
  }

 private:
  std::mutex mu_;
  KVHandle next_ GUARDED_BY(mu_) = 1;
  std::map<KVHandle, T> items_ GUARDED_BY(mu_);
};

// A row-sparse call's row ids, checked (int64, 1-D, valid for `spec`) and
// on the host.
struct SparseIds {
  Tensor host;
  const int64_t* data = nullptr;
  size_t n = 0;
};
StatusOr<SparseIds> SparseIdsOnHost(const std::string& name,
                                    const proto::SparseTableSpec& spec,
                                    const Tensor& ids);
// Checks that `rows` is float32 (n, width); errors name the key, `what`
// ("pushed rows", "pull output") and the shapes.
Status CheckSparseRows(const std::string& name, int64_t width, size_t n,
                       const Tensor& rows, const char* what);
// Both checks of a row-sparse push (`rows`: the gradients) or pull (the
// output): the ids on the host.
StatusOr<SparseIds> CheckRowSparseCall(const std::string& name,
                                       const proto::SparseTableSpec& spec, const Tensor& ids,
                                       const Tensor& rows, const char* what);

// A row-sparse key's saved table: its shards (one per server; one for the
// non-distributed types) in one checksummed file. Errors name the file.
Status WriteTableFile(const std::string& path, const std::vector<std::string>& shards);
StatusOr<std::vector<std::string>> ReadTableFile(const std::string& path);

// "key fc1_weight: <message>", with `code`.
Status KeyError(Status::Code code, const std::string& name,
                const std::string& message);

// Settings from the environment (see base/env.h).
struct StoreSettings {
  // Arrays with at least this many elements are split across all servers
  // (MXNet's default is 1,000,000; lower, the servers' links share a
  // mid-sized model's largest layers).
  int64_t bigarray_bound = 65536;
  // Handler threads per server (0: requests are handled on the receive
  // thread). Unless KVTRAIN_SERVER_THREADS gives it (server_threads_given),
  // DistKVStore::Create picks it from the job's hosts: on one host, every
  // request reaches the receive thread straight from its sender's ring
  // (net/shm_ring.h), and a handler thread would add a wake-up per request
  // on CPUs that every process of the job shares.
  static constexpr int kServerThreadsAcrossHosts = 2;
  static constexpr int kServerThreadsOneHost = 0;
  int server_threads = kServerThreadsAcrossHosts;
  bool server_threads_given = false;
  // Dist stores: push-pulls of keys travel together, one request per
  // server, up to this many bytes (0: one request per key). Unless
  // KVTRAIN_PS_BUCKET_BYTES gives it (bucket_bytes_given),
  // DistKVStore::Create picks it from the job's hosts: on one host a
  // transfer is a copy into shared memory, and each extra message costs
  // thread wake-ups on CPUs that every process of the job shares.
  static constexpr int64_t kBucketBytesAcrossHosts = 64 << 10;
  static constexpr int64_t kBucketBytesOneHost = 256 << 10;
  int64_t bucket_bytes = kBucketBytesAcrossHosts;
  bool bucket_bytes_given = false;
  // Larger keys are cut into pieces of about this many bytes of what their
  // push-pulls move on the wire, the heavier way (Placement;
  // DistKVStore::PieceElements), each a request of its own of at most this
  // many bytes (0: uncut). KVTRAIN_PS_PIECE_BYTES gives it, else
  // KVTRAIN_PS_BUCKET_BYTES where that is given, else Create picks it with
  // the hosts: between hosts, small pieces let the answer of one travel
  // while the next is still going out.
  static constexpr int64_t kPieceBytesAcrossHosts = 64 << 10;
  static constexpr int64_t kPieceBytesOneHost = 256 << 10;
  int64_t piece_bytes = kPieceBytesAcrossHosts;
  bool piece_bytes_given = false;
  // At most this many pieces per server slice of a key (Placement), picked
  // with the hosts: between hosts 8, so that the pieces of a mid-sized
  // layer stay near piece_bytes; on one host 4.
  static constexpr int kPiecesPerSliceAcrossHosts = 8;
  static constexpr int kPiecesPerSliceOneHost = 4;
  int pieces_per_slice = kPiecesPerSliceAcrossHosts;
  // Whether piece_bytes counts a compressed key's bytes on the wire (between
  // hosts, where a piece's bytes are its link time) or its float32 bytes
  // (on one host, where a piece pipelines the copies and the update).
  bool pieces_by_wire_bytes = true;
  // Longest wait for one push/pull/command.
  std::chrono::milliseconds timeout = std::chrono::seconds(600);
  // Tune glibc malloc for large messages (base/malloc_tuning.h).
  bool keep_freed_memory = true;

  static StatusOr<StoreSettings> FromEnv(const EnvLookup& env);
};

// States files (proto KVStoreStatesFile), written atomically.
Status WriteStatesFile(const std::string& path, const std::string& store_type,
                       const std::vector<std::string>& states);
StatusOr<std::vector<std::string>> ReadStatesFile(const std::string& path);

// The update of a store that updates in this process (local, device,
// dist_allreduce): SetOptimizer's optimizer, applied with the store's key
// ids (the ids dist_sync's servers use, so states files agree between store
// types), or SetUpdater's function; and the optimizer's states files. Not
// thread-safe: the store guards it with its own mutex.
class ProcessUpdate {
 public:
  explicit ProcessUpdate(KeyTable* keys) : keys_(keys) {}

  Status SetOptimizer(const proto::OptimizerSpec& spec);
  void SetUpdater(Updater updater);
  // Whether an optimizer or updater is set; without one a push stores the
  // merged value as it is.
  bool active() const { return static_cast<bool>(updater_); }
  // weight <- update(weight, grad); errors name the key.
  Status Apply(const Key& key, const std::string& name, const Tensor& grad,
               Tensor* weight) const;
  // Null without an optimizer (none set, or a custom updater).
  const std::shared_ptr<Optimizer>& optimizer() const { return optimizer_; }

 private:
  KeyTable* const keys_;
  std::shared_ptr<Optimizer> optimizer_;
  Updater updater_;
};

// The skeleton of a store that updates in this process (local, device,
// dist_allreduce): the key table, the store's mutex, and SetOptimizer /
// SetUpdater / optimizer states over a ProcessUpdate, written once.
class InProcessKVStore : public KVStore {
 public:
  Status SetOptimizer(const proto::OptimizerSpec& spec) override EXCLUDES(mu_);
  Status SetUpdater(Updater updater) override EXCLUDES(mu_);
  Status SaveOptimizerStates(const std::string& path) override EXCLUDES(mu_);
  // Restores the states into this process's optimizer.
  Status LoadOptimizerStates(const std::string& path) override EXCLUDES(mu_);

 protected:
  explicit InProcessKVStore(const std::string& type) : KVStore(type) {}
  // LoadOptimizerStates' work; returns what it restored.
  StatusOr<std::string> LoadStatesLocked(const std::string& path) REQUIRES(mu_);

  KeyTable keys_;
  std::mutex mu_;
  ProcessUpdate update_ GUARDED_BY(mu_){&keys_};
};

// One optimizer's states in a states file; `opt` is null when the store has
// no optimizer (none set, or a custom updater). Load returns what it restored.
Status SaveProcessStates(const std::shared_ptr<Optimizer>& opt,
                         const std::string& path, const std::string& store_type);
StatusOr<std::string> LoadProcessStates(Optimizer* opt, const std::string& path,
                                        const std::string& store_type);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_COMMON_H_
