// local and device KVStores.
#include "kvstore/local_kvstore.h"

#include <glog/logging.h>

namespace kvtrain {
namespace kv {

LocalKVStore::LocalKVStore(const std::string& type, bool on_gpu)
    : InProcessKVStore(type), on_gpu_(on_gpu) {
  if (on_gpu_ && NumGpus() == 0) {
    LOG(INFO) << "KVStore '" << type << "': no GPU (" << NoGpuReason()
              << "); reducing and updating on the CPU";
  }
}

Device LocalKVStore::ReduceDevice(const std::vector<Tensor>& values) const {
  if (!on_gpu_) return Device::CPU();
  for (const Tensor& v : values) {
    if (v.device().is_gpu()) return v.device();
  }
  return NumGpus() > 0 ? Device::GPU(0) : Device::CPU();
}

Status LocalKVStore::Init(const std::vector<Key>& keys,
                          const std::vector<Tensor>& values) {
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, values, "init", &keys_));
  std::lock_guard<std::mutex> lock(mu_);
  for (const KeyGroup& g : groups) {
    if (g.tensors.size() > 1) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "init got " + std::to_string(g.tensors.size()) +
                          " values; give one per key");
    }
    if (store_.count(g.id)) {
      return KeyError(Status::Code::kAlreadyExists, g.name,
                      "already initialised");
    }
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const KeyGroup& g = groups[i];
    KV_ASSIGN_OR_RETURN(Tensor copy, g.tensors[0].CopyTo(ReduceDevice(g.tensors)));
    store_.emplace(g.id, Entry{keys[i], std::move(copy)});
  }
  return Status::OK();
}

StatusOr<LocalKVStore::Entry*> LocalKVStore::Find(const KeyGroup& g) {
  auto it = store_.find(g.id);
  if (it == store_.end()) {
    return KeyError(Status::Code::kNotFound, g.name,
                    "was never initialised (call Init first)");
  }
  return &it->second;
}

Status LocalKVStore::DoPush(const std::vector<Key>& keys,
                            const std::vector<Tensor>& values) {
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, values, "push", &keys_));
  std::lock_guard<std::mutex> lock(mu_);
  for (const KeyGroup& g : groups) {
    KV_ASSIGN_OR_RETURN(Entry * found, Find(g));
    Entry& e = *found;
    if (e.value.shape() != g.tensors[0].shape()) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "pushed shape " + g.tensors[0].shape().ToString() +
                          " but it was initialised with " +
                          e.value.shape().ToString());
    }
    if (g.tensors.size() == 1 && update_.optimizer() != nullptr &&
        g.tensors[0].device() == e.value.device()) {
      // One value where the store keeps the key, and the store's own
      // optimizer, which only reads the gradient: nothing to merge or copy.
      KV_RETURN_IF_ERROR(update_.Apply(e.key, g.name, g.tensors[0], &e.value));
      continue;
    }
    KV_ASSIGN_OR_RETURN(Tensor merged, SumOn(g.tensors, e.value.device()));
    if (update_.active()) {
      KV_RETURN_IF_ERROR(update_.Apply(e.key, g.name, merged, &e.value));
    } else {
      e.value = std::move(merged);
    }
  }
  return Status::OK();
}

Status LocalKVStore::DoPull(const std::vector<Key>& keys,
                            const std::vector<Tensor>& outs) {
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, outs, "pull", &keys_));
  std::lock_guard<std::mutex> lock(mu_);
  for (const KeyGroup& g : groups) {
    KV_ASSIGN_OR_RETURN(Entry * found, Find(g));
    const Tensor& v = found->value;
    if (v.shape() != g.tensors[0].shape()) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "pull into shape " + g.tensors[0].shape().ToString() +
                          " but the value has shape " + v.shape().ToString());
    }
    KV_RETURN_IF_ERROR(Broadcast(v, g.tensors));
  }
  return Status::OK();
}

KVHandle LocalKVStore::Finish(Status status) {
  return done_.Add(std::move(status));
}

StatusOr<KVHandle> LocalKVStore::PushAsync(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& values,
                                           int /*priority*/) {
  return Finish(DoPush(keys, values));
}

StatusOr<KVHandle> LocalKVStore::PullAsync(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& outs,
                                           int /*priority*/) {
  return Finish(DoPull(keys, outs));
}

StatusOr<KVHandle> LocalKVStore::PushPullAsync(const std::vector<Key>& keys,
                                               const std::vector<Tensor>& values,
                                               const std::vector<Tensor>& outs,
                                               int /*priority*/) {
  Status s = DoPush(keys, values);
  if (s.ok()) s = DoPull(keys, outs);
  return Finish(std::move(s));
}

Status LocalKVStore::Wait(KVHandle handle) {
  Status s;
  KV_RETURN_IF_ERROR(done_.Take(handle, &s));
  return s;
}

}  // namespace kv
}  // namespace kvtrain
