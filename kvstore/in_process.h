// Stores that update in this process (local, device, dist_allreduce): the
// update, the store skeleton, and optimizer states files.
#ifndef KVTRAIN_KVSTORE_IN_PROCESS_H_
#define KVTRAIN_KVSTORE_IN_PROCESS_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "kvstore/keys.h"
#include "kvstore/kvstore.h"
#include "ops/optimizer.h"
#include "proto/kvstore.pb.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace kv {

// States files (proto KVStoreStatesFile), written atomically.
Status WriteStatesFile(const std::string& path, const std::string& store_type,
                       const std::vector<std::string>& states);
StatusOr<std::vector<std::string>> ReadStatesFile(const std::string& path);

// The update of a store that updates in this process (local, device,
// dist_allreduce): SetOptimizer's optimizer, its state under each key's
// StateKey (keys.h: the id, as on the server holding a whole key and in a
// trainer's own optimizer), or SetUpdater's function; and the optimizer's
// states files. Not thread-safe: the store guards it with its own mutex.
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

#endif  // KVTRAIN_KVSTORE_IN_PROCESS_H_
