// KVStore helpers: keys, grouping, reduction, settings, states files.
#include "kvstore/common.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/file.h"
#include "kvstore/sparse/table.h"
#include "tensor/blas.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace kv {

namespace {
constexpr uint64_t kNameBase = uint64_t{1} << 32;
}  // namespace

StatusOr<uint64_t> KeyTable::Id(const Key& key) {
  if (!key.is_name()) {
    if (key.id() < 0) {
      return Status::InvalidArgument("key " + std::to_string(key.id()) +
                                     ": int keys must be >= 0 (or use a name)");
    }
    return static_cast<uint64_t>(key.id());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(key.name());
  if (it != by_name_.end()) return it->second;
  const uint64_t id = kNameBase + by_name_.size();
  by_name_.emplace(key.name(), id);
  names_.emplace(id, key.name());
  return id;
}

std::string KeyTable::Name(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(id);
  return it != names_.end() ? it->second : std::to_string(id);
}

StatusOr<SparseIds> SparseIdsOnHost(const std::string& name,
                                    const proto::SparseTableSpec& spec,
                                    const Tensor& ids) {
  if (!ids.defined()) {
    return KeyError(Status::Code::kInvalidArgument, name, "row ids are undefined");
  }
  if (ids.dtype() != DType::kInt64) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    std::string("row ids must be int64, got ") + DTypeName(ids.dtype()));
  }
  if (ids.ndim() != 1) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    "row ids must be 1-D, got shape " + ids.shape().ToString());
  }
  SparseIds out;
  if (ids.device().is_cpu()) {
    out.host = ids;
  } else {
    KV_ASSIGN_OR_RETURN(out.host, ids.CopyTo(Device::CPU()));
  }
  out.data = out.host.data<int64_t>();
  out.n = static_cast<size_t>(ids.size());
  KV_RETURN_IF_ERROR(sparse::CheckIds(name, spec, out.data, out.n));
  return out;
}

Status CheckSparseRows(const std::string& name, int64_t width, size_t n,
                       const Tensor& rows, const char* what) {
  if (!rows.defined()) {
    return KeyError(Status::Code::kInvalidArgument, name, std::string(what) + " are undefined");
  }
  if (rows.dtype() != DType::kFloat32) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    std::string(what) + " must be float32, got " + DTypeName(rows.dtype()));
  }
  const Shape want({static_cast<int64_t>(n), width});
  if (rows.shape() != want) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    std::string(what) + " have shape " + rows.shape().ToString() +
                        " but " + std::to_string(n) + " row ids of a table of width " +
                        std::to_string(width) + " need " + want.ToString());
  }
  return Status::OK();
}

StatusOr<SparseIds> CheckRowSparseCall(const std::string& name,
                                       const proto::SparseTableSpec& spec, const Tensor& ids,
                                       const Tensor& rows, const char* what) {
  KV_ASSIGN_OR_RETURN(SparseIds out, SparseIdsOnHost(name, spec, ids));
  KV_RETURN_IF_ERROR(CheckSparseRows(name, spec.width(), out.n, rows, what));
  return out;
}

namespace {
constexpr char kTableFileMagic[8] = {'K', 'V', 'S', 'P', 'F', 'I', 'L', '1'};
}  // namespace

Status WriteTableFile(const std::string& path, const std::vector<std::string>& shards) {
  std::string out(kTableFileMagic, sizeof(kTableFileMagic));
  auto put = [&out](int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<int64_t>(shards.size()));
  for (const std::string& shard : shards) {
    put(static_cast<int64_t>(shard.size()));
    out += shard;
  }
  return WriteChecksummedFile(path, out);
}

StatusOr<std::vector<std::string>> ReadTableFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  const Status bad = Status::DataLoss(path + " is not a kvtrain table file");
  size_t pos = 0;
  auto get = [&](int64_t* v) {
    if (bytes.size() - pos < sizeof(*v)) return false;
    std::memcpy(v, bytes.data() + pos, sizeof(*v));
    pos += sizeof(*v);
    return true;
  };
  if (bytes.size() < sizeof(kTableFileMagic) ||
      std::memcmp(bytes.data(), kTableFileMagic, sizeof(kTableFileMagic)) != 0) {
    return bad;
  }
  pos = sizeof(kTableFileMagic);
  int64_t n = 0;
  if (!get(&n) || n <= 0 || n > (1 << 20)) return bad;
  std::vector<std::string> shards;
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = 0;
    if (!get(&len) || len < 0 || static_cast<uint64_t>(len) > bytes.size() - pos) return bad;
    shards.emplace_back(bytes.data() + pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
  }
  if (pos != bytes.size()) return bad;
  return shards;
}

Status KeyError(Status::Code code, const std::string& name,
                const std::string& message) {
  const std::string m = "key " + name + ": " + message;
  switch (code) {
    case Status::Code::kNotFound: return Status::NotFound(m);
    case Status::Code::kAlreadyExists: return Status::AlreadyExists(m);
    case Status::Code::kFailedPrecondition: return Status::FailedPrecondition(m);
    case Status::Code::kInternal: return Status::Internal(m);
    default: return Status::InvalidArgument(m);
  }
}

StatusOr<std::vector<KeyGroup>> GroupByKey(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& tensors,
                                           const std::string& what,
                                           KeyTable* table) {
  if (keys.size() != tensors.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(tensors.size()) +
                                   " tensors");
  }
  std::vector<KeyGroup> groups;
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    KV_ASSIGN_OR_RETURN(uint64_t id, table->Id(keys[i]));
    const std::string name = keys[i].ToString();
    const Tensor& t = tensors[i];
    if (!t.defined()) {
      return KeyError(Status::Code::kInvalidArgument, name,
                      what + " got an undefined tensor");
    }
    if (t.dtype() != DType::kFloat32) {
      return KeyError(Status::Code::kInvalidArgument, name,
                      std::string(what) + " got a " + DTypeName(t.dtype()) +
                          " tensor; KVStore values are float32");
    }
    auto it = index.find(id);
    if (it == index.end()) {
      index.emplace(id, groups.size());
      groups.push_back(KeyGroup{id, name, {t}});
      continue;
    }
    KeyGroup& g = groups[it->second];
    if (g.tensors[0].shape() != t.shape()) {
      return KeyError(Status::Code::kInvalidArgument, name,
                      what + " got tensors of shapes " +
                          g.tensors[0].shape().ToString() + " and " +
                          t.shape().ToString() + " for one key");
    }
    g.tensors.push_back(t);
  }
  return groups;
}

StatusOr<Tensor> SumOn(const std::vector<Tensor>& values, const Device& device) {
  KV_ASSIGN_OR_RETURN(Tensor sum, values[0].CopyTo(device));
  Tensor staged;
  for (size_t i = 1; i < values.size(); ++i) {
    const Tensor* v = &values[i];
    if (v->device() != device) {
      if (!staged.defined()) {
        KV_ASSIGN_OR_RETURN(staged, Tensor::Create(sum.shape(), DType::kFloat32, device));
      }
      KV_RETURN_IF_ERROR(staged.CopyFrom(*v));
      v = &staged;
    }
    KV_RETURN_IF_ERROR(blas::Axpy(1.0f, *v, &sum));
  }
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(device));
  KV_RETURN_IF_ERROR(ctx->Synchronize());
  return sum;
}

Status Broadcast(const Tensor& src, const std::vector<Tensor>& outs) {
  for (Tensor out : outs) KV_RETURN_IF_ERROR(out.CopyFrom(src));
  return Status::OK();
}

StatusOr<StoreSettings> StoreSettings::FromEnv(const EnvLookup& env) {
  StoreSettings s;
  // KVTRAIN_BIGARRAY_BOUND wins; MXNet's name is accepted too.
  const char* bound_var = env(env::kBigArrayBound) ? env::kBigArrayBound
                                                   : env::kMxnetBigArrayBound;
  KV_ASSIGN_OR_RETURN(s.bigarray_bound,
                      GetIntVar(env, bound_var, s.bigarray_bound, 1,
                                int64_t{1} << 50));
  KV_ASSIGN_OR_RETURN(int64_t threads,
                      GetIntVar(env, env::kServerThreads, s.server_threads, 0, 256));
  s.server_threads = static_cast<int>(threads);
  s.server_threads_given = env(env::kServerThreads).has_value();
  KV_ASSIGN_OR_RETURN(s.bucket_bytes,
                      GetIntVar(env, env::kPsBucketBytes, s.bucket_bytes, 0, int64_t{1} << 40));
  s.bucket_bytes_given = env(env::kPsBucketBytes).has_value();
  s.piece_bytes_given = env(env::kPsPieceBytes).has_value();
  if (!s.piece_bytes_given && s.bucket_bytes_given)
    s.piece_bytes = s.bucket_bytes;
  KV_ASSIGN_OR_RETURN(
      s.piece_bytes,
      GetIntVar(env, env::kPsPieceBytes, s.piece_bytes, 0, int64_t{1} << 40));
  KV_ASSIGN_OR_RETURN(double timeout,
                      GetSecondsVar(env, env::kKVStoreTimeout, 600, 0.01, 86400 * 30));
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  KV_ASSIGN_OR_RETURN(s.keep_freed_memory,
                      GetBoolVar(env, env::kKeepFreedMemory, s.keep_freed_memory));
  return s;
}

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
    return opt->Update(static_cast<int64_t>(id), *weight, grad);
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
