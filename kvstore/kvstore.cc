// KVStore::Create and the synchronous forms of the calls.
#include "kvstore/kvstore.h"

#include "compression/compression.h"

#include "kvstore/allreduce_kvstore.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/local_kvstore.h"
#include "kvstore/settings.h"

namespace kvtrain {

using kv::StoreSettings;

const std::vector<std::string>& KVStore::Types() {
  static const std::vector<std::string> kTypes = {
      "local", "device", "dist_sync", "dist_device_sync", "dist_async",
      "dist_ssp", "dist_allreduce"};
  return kTypes;
}

StatusOr<std::unique_ptr<KVStore>> KVStore::Create(const std::string& type,
                                                   const KVStoreOptions& options) {
  if (type == "local" || type == "device") {
    return std::unique_ptr<KVStore>(new kv::LocalKVStore(type, type == "device"));
  }
  if (type == "dist_sync" || type == "dist_device_sync" || type == "dist_async" ||
      type == "dist_ssp") {
    return kv::DistKVStore::Create(type, options);
  }
  if (type == "dist_allreduce") return kv::AllreduceKVStore::Create(options);
  std::string valid;
  for (const std::string& t : Types()) valid += (valid.empty() ? "" : ", ") + t;
  return Status::InvalidArgument("unknown KVStore type \"" + type +
                                 "\"; valid types: " + valid);
}

StatusOr<std::unique_ptr<KVStore>> CreateAllreduceKVStore(
    std::shared_ptr<collective::Communicator> communicator,
    const KVStoreOptions& options) {
  if (!communicator) {
    return Status::InvalidArgument("CreateAllreduceKVStore: no communicator");
  }
  KV_ASSIGN_OR_RETURN(StoreSettings settings, StoreSettings::FromEnv(options.env));
  KV_ASSIGN_OR_RETURN(size_t bucket_bytes, kv::AllreduceBucketBytes(options.env));
  return std::unique_ptr<KVStore>(new kv::AllreduceKVStore(
      std::move(communicator), bucket_bytes, settings.timeout, /*owns_comm=*/false));
}

Status KVStore::Push(const std::vector<Key>& keys,
                     const std::vector<Tensor>& values, int priority) {
  KV_ASSIGN_OR_RETURN(KVHandle h, PushAsync(keys, values, priority));
  return Wait(h);
}

Status KVStore::Pull(const std::vector<Key>& keys, const std::vector<Tensor>& outs,
                     int priority) {
  KV_ASSIGN_OR_RETURN(KVHandle h, PullAsync(keys, outs, priority));
  return Wait(h);
}

Status KVStore::PushPull(const std::vector<Key>& keys,
                         const std::vector<Tensor>& values,
                         const std::vector<Tensor>& outs, int priority) {
  KV_ASSIGN_OR_RETURN(KVHandle h, PushPullAsync(keys, values, outs, priority));
  return Wait(h);
}

Status KVStore::SetGradientCompression(const proto::GradientCompression& spec) {
  (void)spec;
  return Status::FailedPrecondition(
      "gradient compression applies to what travels between processes: the '" + type_ +
      "' store sends nothing (use dist_sync, dist_device_sync, dist_async or "
      "dist_allreduce)");
}

Status KVStore::SetAsyncOptions(const AsyncOptions& options) {
  (void)options;
  return Status::FailedPrecondition(
      "bounded staleness and staleness-aware updates are for asynchronous stores "
      "(dist_async, dist_ssp); the '" + type_ + "' store " +
      (sums_workers() ? "sums every worker's step before it updates"
                      : "updates in this process"));
}

StatusOr<StalenessReport> KVStore::TakeStalenessReport() {
  return Status::FailedPrecondition("the '" + type_ +
                                    "' store has no staleness: only dist_async and dist_ssp do");
}

Status KVStore::InitRowSparse(const Key& key, const proto::SparseTableSpec& spec) {
  (void)spec;
  return Status::FailedPrecondition("key " + key.ToString() + ": the '" + type_ +
                                    "' store has no row-sparse keys (it has no servers "
                                    "to hold a table; use dist_sync or dist_async)");
}

StatusOr<KVHandle> KVStore::PushRowSparseAsync(const Key& key, const Tensor& ids,
                                               const Tensor& rows, int priority) {
  (void)ids, (void)rows, (void)priority;
  return InitRowSparse(key, {});
}

StatusOr<KVHandle> KVStore::RowSparsePullAsync(const Key& key, const Tensor& ids,
                                               const Tensor& out, int priority) {
  (void)ids, (void)out, (void)priority;
  return InitRowSparse(key, {});
}

Status KVStore::PushRowSparse(const Key& key, const Tensor& ids, const Tensor& rows,
                              int priority) {
  KV_ASSIGN_OR_RETURN(KVHandle h, PushRowSparseAsync(key, ids, rows, priority));
  return Wait(h);
}

Status KVStore::RowSparsePull(const Key& key, const Tensor& ids, const Tensor& out,
                              int priority) {
  KV_ASSIGN_OR_RETURN(KVHandle h, RowSparsePullAsync(key, ids, out, priority));
  return Wait(h);
}

Status KVStore::SaveRowSparse(const Key& key, const std::string& path) {
  (void)path;
  return InitRowSparse(key, {});
}

StatusOr<std::vector<proto::SparseTableStats>> KVStore::RowSparseStats(const Key& key) {
  KV_RETURN_IF_ERROR(InitRowSparse(key, {}));
  return std::vector<proto::SparseTableStats>{};
}

Status KVStore::LoadRowSparse(const Key& key, const std::string& path) {
  (void)path;
  return InitRowSparse(key, {});
}

bool KVStore::KeepsResiduals() const { return kv::HasResidual(gradient_compression().type()); }

std::string KVStore::CompressionName() const {
  return kv::CompressionName(gradient_compression().type());
}

Status KVStore::SaveResiduals(const std::string& path) {
  (void)path;
  return Status::FailedPrecondition("SaveResiduals: the '" + type_ +
                                    "' store keeps no compression residuals");
}

Status KVStore::LoadResiduals(const std::string& path) {
  (void)path;
  return Status::FailedPrecondition("LoadResiduals: the '" + type_ +
                                    "' store keeps no compression residuals");
}

Status KVStore::RunServer() {
  return Status::FailedPrecondition("RunServer: the '" + type_ +
                                    "' store has no servers");
}

}  // namespace kvtrain
