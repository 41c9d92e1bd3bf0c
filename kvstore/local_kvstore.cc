// local and device KVStores.
#include "kvstore/local_kvstore.h"

#include <glog/logging.h>

#include "kvstore/sparse/rows.h"
#include "kvstore/device_sum.h"
#include "kvstore/in_process.h"
#include "kvstore/keys.h"
#include "kvstore/row_sparse_call.h"

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
    if (store_.count(g.id) || tables_.count(g.id)) {
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
    if (tables_.count(g.id)) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "is a row-sparse key: push it with PushRowSparse and pull "
                      "it with RowSparsePull");
    }
    return KeyError(Status::Code::kNotFound, g.name,
                    "was never initialised (call Init first)");
  }
  return &it->second;
}

StatusOr<sparse::Table*> LocalKVStore::FindTable(const Key& key, uint64_t* id) {
  KV_ASSIGN_OR_RETURN(*id, keys_.Id(key));
  auto it = tables_.find(*id);
  if (it != tables_.end()) return it->second.get();
  if (store_.count(*id)) {
    return KeyError(Status::Code::kInvalidArgument, key.ToString(),
                    "is a dense key: push and pull it with Push and Pull");
  }
  return KeyError(Status::Code::kNotFound, key.ToString(),
                  "was never initialised (call InitRowSparse first)");
}

Status LocalKVStore::InitRowSparse(const Key& key, const proto::SparseTableSpec& spec) {
  KV_ASSIGN_OR_RETURN(const uint64_t id, keys_.Id(key));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<sparse::Table> table,
                      sparse::Table::Create(key.ToString(), spec));
  std::lock_guard<std::mutex> lock(mu_);
  if (store_.count(id) || tables_.count(id)) {
    return KeyError(Status::Code::kAlreadyExists, key.ToString(), "already initialised");
  }
  tables_.emplace(id, std::move(table));
  return Status::OK();
}

Status LocalKVStore::DoPushRows(const Key& key, const Tensor& ids, const Tensor& rows) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id;
  KV_ASSIGN_OR_RETURN(sparse::Table * table, FindTable(key, &id));
  const std::string name = key.ToString();
  KV_ASSIGN_OR_RETURN(SparseIds host_ids,
                      CheckRowSparseCall(name, table->spec(), ids, rows, "pushed rows"));

  if (update_.active() && update_.optimizer() == nullptr) {
    return KeyError(Status::Code::kFailedPrecondition, name,
                    "a custom updater does not apply to row-sparse keys; use "
                    "SetOptimizer");
  }
  Tensor host_rows = rows;
  if (!rows.device().is_cpu()) {
    KV_ASSIGN_OR_RETURN(host_rows, rows.CopyTo(Device::CPU()));
  }
  sparse::RowSum sum(table->width());
  sum.Add(host_ids.data, host_ids.n, host_rows.data<float>());
  return table->Update(sum.ids().data(), sum.size(), sum.rows().data(),
                       update_.optimizer().get());
}

Status LocalKVStore::DoPullRows(const Key& key, const Tensor& ids, const Tensor& out) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id;
  KV_ASSIGN_OR_RETURN(sparse::Table * table, FindTable(key, &id));
  const std::string name = key.ToString();
  KV_ASSIGN_OR_RETURN(SparseIds host_ids,
                      CheckRowSparseCall(name, table->spec(), ids, out, "output rows"));

  if (out.device().is_cpu()) {
    table->Read(host_ids.data, host_ids.n, out.data<float>());
    return Status::OK();
  }
  Tensor host = Tensor::Empty(out.shape());
  table->Read(host_ids.data, host_ids.n, host.data<float>());
  Tensor dst = out;
  return dst.CopyFrom(host);
}

Status LocalKVStore::SaveRowSparse(const Key& key, const std::string& path) {
  std::string shard;
  {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t id;
    KV_ASSIGN_OR_RETURN(sparse::Table * table, FindTable(key, &id));
    shard = table->Save();
  }
  return WriteTableFile(path, {shard});
}

StatusOr<std::vector<proto::SparseTableStats>> LocalKVStore::RowSparseStats(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id;
  KV_ASSIGN_OR_RETURN(sparse::Table * table, FindTable(key, &id));
  return std::vector<proto::SparseTableStats>{table->stats().ToProto()};
}

Status LocalKVStore::LoadRowSparse(const Key& key, const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::vector<std::string> shards, ReadTableFile(path));
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id;
  KV_ASSIGN_OR_RETURN(sparse::Table * table, FindTable(key, &id));
  if (shards.size() != 1) {
    // Saved by a dist store: one table again.
    StatusOr<std::vector<std::string>> one =
        sparse::Table::Reshard(key.ToString(), table->spec(), shards, 1);
    if (!one.ok()) return one.status().Annotate(path);
    shards = std::move(one).value();
  }
  return table->Load(shards[0]).Annotate(path);
}

StatusOr<KVHandle> LocalKVStore::PushRowSparseAsync(const Key& key, const Tensor& ids,
                                                    const Tensor& rows, int priority) {
  (void)priority;
  return Finish(DoPushRows(key, ids, rows));
}

StatusOr<KVHandle> LocalKVStore::RowSparsePullAsync(const Key& key, const Tensor& ids,
                                                    const Tensor& out, int priority) {
  (void)priority;
  return Finish(DoPullRows(key, ids, out));
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
