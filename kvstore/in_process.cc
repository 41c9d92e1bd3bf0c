// States files, ProcessUpdate, InProcessKVStore.
#include "kvstore/in_process.h"
#include "kvstore/keys.h"

#include "base/file.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace kv {

Status WriteStatesFile(const std::string& path, const std::string& store_type,
                       const std::vector<std::string>& states) {
  proto::KVStoreStatesFile file;
  file.set_store_type(store_type);
  for (const std::string& s : states) file.add_states(s);
  // protobuf writes nothing (an empty string) above 2 GB.
  if (file.ByteSizeLong() > static_cast<size_t>(INT32_MAX)) {
    return Status::FailedPrecondition(
        "saving optimizer states: " + std::to_string(file.ByteSizeLong()) +
        " bytes; a states file holds at most 2147483647 (protobuf's 2 GB limit)");
  }
  return WriteChecksummedFile(path, file.SerializeAsString())
      .Annotate("saving optimizer states");
}

StatusOr<std::vector<std::string>> ReadStatesFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  proto::KVStoreStatesFile file;
  if (!file.ParseFromString(bytes) || file.store_type().empty()) {
    return Status::DataLoss(path + ": not an optimizer states file (corrupt or "
                            "written by something else)");
  }
  return std::vector<std::string>(file.states().begin(), file.states().end());
}

Status ProcessUpdate::SetOptimizer(const proto::OptimizerSpec& spec) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> created, Optimizer::Create(spec));
  std::shared_ptr<Optimizer> opt(std::move(created));
  KeyTable* keys = keys_;
  optimizer_ = opt;
  updater_ = [opt, keys](const Key& key, const Tensor& grad, Tensor* weight) {
    KV_ASSIGN_OR_RETURN(uint64_t id, keys->Id(key));
    return opt->Update(StateKey(id, 0), *weight, grad, Optimizer::Wait::kDone, 1.0f,
                       opt->MultsFor(key.ToString()));
  };
  return Status::OK();
}

void ProcessUpdate::SetUpdater(Updater updater) {
  optimizer_.reset();
  updater_ = std::move(updater);
}

Status ProcessUpdate::Apply(const Key& key, const std::string& name,
                            const Tensor& grad, Tensor* weight) const {
  return updater_(key, grad, weight).Annotate("key " + name + ": updater");
}

Status SaveProcessStates(const std::shared_ptr<Optimizer>& opt,
                         const std::string& path, const std::string& store_type) {
  if (!opt) {
    return Status::FailedPrecondition(
        "SaveOptimizerStates: no optimizer set (SetOptimizer first; a custom "
        "updater has no states to save)");
  }
  KV_ASSIGN_OR_RETURN(std::string states, opt->SaveStates());
  return WriteStatesFile(path, store_type, {states});
}

StatusOr<std::string> LoadProcessStates(Optimizer* opt, const std::string& path,
                                        const std::string& store_type) {
  KV_ASSIGN_OR_RETURN(std::vector<std::string> states, ReadStatesFile(path));
  if (states.size() != 1) {
    return Status::InvalidArgument(
        path + " holds the states of " + std::to_string(states.size()) +
        " servers; a '" + store_type +
        "' store has one optimizer (save them from a local, device or "
        "dist_allreduce store)");
  }
  if (opt == nullptr) {
    return Status::FailedPrecondition(
        "LoadOptimizerStates: no optimizer set (call SetOptimizer first)");
  }
  KV_RETURN_IF_ERROR(opt->LoadStates(states[0]).Annotate(path));
  return states[0];
}

Status InProcessKVStore::SetOptimizer(const proto::OptimizerSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  return update_.SetOptimizer(spec);
}

Status InProcessKVStore::SetUpdater(Updater updater) {
  std::lock_guard<std::mutex> lock(mu_);
  update_.SetUpdater(std::move(updater));
  return Status::OK();
}

Status InProcessKVStore::SaveOptimizerStates(const std::string& path) {
  std::shared_ptr<Optimizer> opt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    opt = update_.optimizer();
  }
  return SaveProcessStates(opt, path, type());
}

Status InProcessKVStore::LoadOptimizerStates(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return LoadStatesLocked(path).status();
}

StatusOr<std::string> InProcessKVStore::LoadStatesLocked(const std::string& path) {
  return LoadProcessStates(update_.optimizer().get(), path, type());
}

}  // namespace kv
}  // namespace kvtrain
