// Pieces shared by the KVStore types: the key table (user keys to internal
// ids), grouping a call's tensors by key with their checks, summing values
// across devices, the store's environment settings, and states files.
#ifndef KVTRAIN_KVSTORE_COMMON_H_
#define KVTRAIN_KVSTORE_COMMON_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "base/thread_annotations.h"
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

// "key fc1_weight: <message>".
Status KeyError(Status::Code code, const std::string& name,
                const std::string& message);

// Settings from the environment (see base/env.h).
struct StoreSettings {
  // Arrays with at least this many elements are split across all servers.
  int64_t bigarray_bound = 1000000;
  // Handler threads per server.
  int server_threads = 2;
  // Dist stores: push-pulls of keys below this many bytes travel together,
  // one request per server (0: one request per key).
  int64_t bucket_bytes = 1 << 20;
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

// Stores that update in this process (local, device, dist_allreduce) share
// these. The updater applies `opt` with the store's key ids, the ids the
// servers of dist_sync use, so states files agree between store types.
Updater OptimizerUpdater(std::shared_ptr<Optimizer> opt, KeyTable* keys);
// One optimizer's states in a states file; `opt` is null when the store has
// no optimizer (none set, or a custom updater). Load returns what it restored.
Status SaveProcessStates(const std::shared_ptr<Optimizer>& opt,
                         const std::string& path, const std::string& store_type);
StatusOr<std::string> LoadProcessStates(Optimizer* opt, const std::string& path,
                                        const std::string& store_type);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_COMMON_H_
