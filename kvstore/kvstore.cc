// KVStore::Create and the synchronous forms of the calls.
#include "kvstore/kvstore.h"

#include "kvstore/allreduce_kvstore.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/local_kvstore.h"

namespace kvtrain {

using kv::StoreSettings;

const std::vector<std::string>& KVStore::Types() {
  static const std::vector<std::string> kTypes = {
      "local", "device", "dist_sync", "dist_device_sync", "dist_async",
      "dist_allreduce"};
  return kTypes;
}

StatusOr<std::unique_ptr<KVStore>> KVStore::Create(const std::string& type,
                                                   const KVStoreOptions& options) {
  if (type == "local" || type == "device") {
    return std::unique_ptr<KVStore>(new kv::LocalKVStore(type, type == "device"));
  }
  if (type == "dist_sync" || type == "dist_device_sync" || type == "dist_async") {
    return kv::DistKVStore::Create(type, options);
  }
  if (type == "dist_allreduce") {
    if (options.communicator) {
      return CreateAllreduceKVStore(options.communicator, options);
    }
    const EnvLookup& env = options.env;
    const auto role = env(env::kRole);
    const bool mpi = env(env::kOmpiSize) || env(env::kPmiSize);
    if (!mpi && role == "scheduler") return kv::AllreduceKVStore::RendezvousOnly(options);
    if (!mpi && role == "server") {
      return Status::FailedPrecondition(
          "dist_allreduce has no servers, but this process has DMLC_ROLE=server "
          "(launch with -s 0)");
    }
    std::shared_ptr<collective::Communicator> comm;
    if (!mpi && !role) {
      // Not launched: a group of one.
      KV_ASSIGN_OR_RETURN(auto group, collective::Communicator::CreateLocalGroup(1));
      comm = group[0];
    } else {
      KV_ASSIGN_OR_RETURN(comm, collective::Communicator::CreateFromEnv(env));
    }
    return CreateAllreduceKVStore(comm, options);
  }
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
  KV_ASSIGN_OR_RETURN(int64_t bucket_bytes,
                      GetIntVar(options.env, env::kAllreduceBucketBytes, 4 << 20, 4,
                                int64_t{1} << 40));
  return std::unique_ptr<KVStore>(new kv::AllreduceKVStore(
      std::move(communicator), static_cast<size_t>(bucket_bytes), settings.timeout));
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

Status KVStore::RunServer() {
  return Status::FailedPrecondition("RunServer: the '" + type_ +
                                    "' store has no servers");
}

}  // namespace kvtrain
