// KVStore helpers: keys, grouping, reduction, settings, states files.
#include "kvstore/common.h"

#include <glog/logging.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/file.h"
#include "kvstore/compression.h"
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

namespace kvtrain {
namespace kv {

namespace {

// The threshold a warning suggests, as a multiple of the gradient's mean
// |value|.
constexpr double kFitThresholdScale = 2.0;
// Momentum the MLP trained with at threshold 0.5 without momentum
// correction (0.9 diverged).
constexpr float kSafeMomentum = 0.5f;

}  // namespace

Status Compressor::Set(const proto::GradientCompression& spec, bool initialised) {
  KV_RETURN_IF_ERROR(CheckCompression(spec));
  if (initialised) {
    return Status::FailedPrecondition(
        "SetGradientCompression must come before Init: keys are initialised already");
  }
  std::lock_guard<std::mutex> l(mu_);
  spec_ = spec;
  if (spec_.type() != proto::GradientCompression::TWO_BIT) spec_.clear_threshold();
  residuals_.clear();
  return Status::OK();
}

proto::GradientCompression Compressor::spec() const {
  std::lock_guard<std::mutex> l(mu_);
  return spec_;
}

CompressionType Compressor::type() const {
  std::lock_guard<std::mutex> l(mu_);
  return spec_.type();
}

CompressionType Compressor::TypeFor(int64_t size) const {
  std::lock_guard<std::mutex> l(mu_);
  return size * 4 < spec_.min_bytes() ? proto::GradientCompression::NONE : spec_.type();
}

bool Compressor::HalfAnswer(int64_t size) const {
  std::lock_guard<std::mutex> l(mu_);
  return AnswersHalves(spec_, size);
}

int Compressor::LevelAnswer(int num_workers) const {
  std::lock_guard<std::mutex> l(mu_);
  if (spec_.pull() != proto::GradientCompression::PULL_DEFAULT) return 0;
  return LevelBits(spec_.type(), num_workers);
}

std::shared_ptr<std::vector<char>> Compressor::Encode(uint64_t id, int64_t size,
                                                      const float* grad, int64_t offset,
                                                      int64_t count) {
  auto out = std::make_shared<std::vector<char>>(EncodedBytes(TypeFor(size), count));
  EncodeTo(id, size, grad, offset, count, out->data());
  return out;
}

void Compressor::EncodeTo(uint64_t id, int64_t size, const float* grad, int64_t offset,
                          int64_t count, char* out) {
  CompressionType type;
  float threshold, momentum;
  bool auto_threshold;
  Residual* r = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    type = size * 4 < spec_.min_bytes() ? proto::GradientCompression::NONE : spec_.type();
    threshold = spec_.threshold();
    auto_threshold = spec_.auto_threshold();
    momentum = momentum_;
    if (HasResidual(type)) {
      std::unique_ptr<Residual>& slot = residuals_[id];
      if (slot == nullptr) {
        slot = std::make_unique<Residual>();
        slot->values.assign(static_cast<size_t>(size), 0.0f);
      }
      r = slot.get();
    }
  }
  if (r == nullptr) {
    kv::Encode(type, threshold, grad + offset, nullptr, count, out);
    return;
  }
  std::lock_guard<std::mutex> l(r->mu);
  float* residual = r->values.data() + offset;
  const float* g = grad + offset;
  const bool corrected = momentum > 0 && type == proto::GradientCompression::TWO_BIT;
  float* u = nullptr;
  if (corrected) {
    // Momentum correction: the velocity is what error feedback keeps.
    if (r->velocity.empty()) r->velocity.assign(static_cast<size_t>(size), 0.0f);
    u = r->velocity.data() + offset;
    for (int64_t i = 0; i < count; ++i) u[i] = momentum * u[i] + g[i];
    g = u;
  }
  if (type == proto::GradientCompression::TWO_BIT && auto_threshold) {
    EncodeTwoBitAuto(g, residual, count, out);
  } else {
    kv::Encode(type, threshold, g, residual, count, out);
  }
  if (corrected) {
    // Momentum factor masking: a value sent (code other than 0) starts its
    // velocity again.
    for (int64_t w = 0; w < (count + 15) / 16; ++w) {
      uint32_t word;
      std::memcpy(&word, out + 4 + 4 * w, 4);
      if (word == 0) continue;
      const int64_t end = std::min<int64_t>(count, 16 * (w + 1));
      for (int64_t i = 16 * w; i < end; ++i) {
        if ((word >> (2 * (i - 16 * w))) & 3u) u[i] = 0.0f;
      }
    }
  }
  if (type == proto::GradientCompression::TWO_BIT && !auto_threshold) {
    WatchResidual(id, r, threshold, grad, offset, count);
  }
}

void Compressor::WatchResidual(uint64_t id, Residual* r, float threshold, const float* grad,
                               int64_t offset, int64_t count) {
  if (r->warned || count == 0) return;
  Watch& w = r->watch[offset];
  ++w.pushes;
  // Checks at kWatchFirst pushes, twice that, ... then every kWatchLast.
  const bool check = w.pushes % kWatchLast == 0 ||
                     (w.pushes < kWatchLast && w.pushes % kWatchFirst == 0 &&
                      ((w.pushes / kWatchFirst) & (w.pushes / kWatchFirst - 1)) == 0);
  if (!check) return;
  double gradient = 0, residual = 0;
  const float* res = r->values.data() + offset;
  for (int64_t i = 0; i < count; ++i) {
    gradient += std::fabs(grad[offset + i]);
    residual += std::fabs(res[i]);
  }
  residual /= static_cast<double>(count);
  w.gradient += gradient / static_cast<double>(count);
  ++w.checks;
  const double mean_gradient = w.gradient / static_cast<double>(w.checks);
  const bool growing = residual > threshold && residual > w.last;
  w.growing = growing ? w.growing + 1 : 0;
  w.last = residual;
  if (w.growing < kWatchChecks) return;
  r->warned = true;
  std::string name;
  {
    std::lock_guard<std::mutex> l(mu_);
    name = names_ != nullptr ? names_->Name(id) : std::to_string(id);
    warned_.push_back(name);
  }
  float update_momentum;
  {
    std::lock_guard<std::mutex> l(mu_);
    update_momentum = update_momentum_;
  }
  char text[768];
  std::snprintf(text, sizeof(text),
                "gradient compression 2bit: key %s: threshold %g is below its gradients (mean "
                "|gradient| %.3g, after %lld pushes): a push sends at most the threshold per "
                "value, the rest waits in the residual and arrives late (mean |residual| %.3g, "
                "growing at each of the last %d checks). A threshold near %.3g keeps up with "
                "this key, or threshold auto gives each array its own",
                name.c_str(), static_cast<double>(threshold), mean_gradient,
                static_cast<long long>(w.pushes), residual, kWatchChecks,
                kFitThresholdScale * mean_gradient);
  std::string message = text;
  if (update_momentum > kSafeMomentum) {
    std::snprintf(text, sizeof(text),
                  ". With the update's momentum %g, values that arrive late make training "
                  "oscillate and diverge: use SGD with 2bit on every array (min_bytes 0), "
                  "whose momentum then runs before error feedback, or a momentum of at most "
                  "%g",
                  static_cast<double>(update_momentum), static_cast<double>(kSafeMomentum));
    message += text;
    std::lock_guard<std::mutex> l(mu_);
    warned_of_momentum_ = true;
  }
  LOG(WARNING) << message;
}

proto::OptimizerSpec CorrectMomentum(const proto::OptimizerSpec& spec,
                                     Compressor* compressor) {
  const float m = spec.momentum();
  // Every array must carry its velocity: one that travels as float32
  // (below min_bytes) needs the update's own momentum.
  if (compressor->type() != proto::GradientCompression::TWO_BIT ||
      compressor->spec().min_bytes() > 0 || spec.type() != proto::OptimizerSpec::SGD ||
      !(m > 0.0f && m < 1.0f)) {
    compressor->SetMomentum(0, m);
    return spec;
  }
  compressor->SetMomentum(m, 0);
  proto::OptimizerSpec out = spec;
  out.set_momentum(0);
  out.set_weight_decay(spec.weight_decay() / (1.0f - m));
  return out;
}

void Compressor::SetMomentum(float momentum, float update_momentum) {
  std::lock_guard<std::mutex> l(mu_);
  momentum_ = momentum;
  update_momentum_ = update_momentum;
}

float Compressor::momentum() const {
  std::lock_guard<std::mutex> l(mu_);
  return momentum_;
}

void Compressor::SetKeyNames(const KeyTable* names) {
  std::lock_guard<std::mutex> l(mu_);
  names_ = names;
}

std::vector<std::string> Compressor::Warned() const {
  std::lock_guard<std::mutex> l(mu_);
  return warned_;
}

bool Compressor::WarnedOfMomentum() const {
  std::lock_guard<std::mutex> l(mu_);
  return warned_of_momentum_;
}

Status Compressor::Save(const std::string& path, int rank, int num_workers,
                        const KeyTable& keys) {
  proto::ResidualsFile file;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!HasResidual(spec_.type())) {
      return Status::FailedPrecondition("SaveResiduals: gradient compression '" +
                                        CompressionName(spec_.type()) +
                                        "' keeps no residuals");
    }
    *file.mutable_spec() = spec_;
    for (const auto& [id, r] : residuals_) {
      std::lock_guard<std::mutex> rl(r->mu);
      proto::ResidualsFile::Residual* out = file.add_residuals();
      out->set_key(keys.Name(id));
      out->set_int_key(id < (uint64_t{1} << 32));
      out->set_data(r->values.data(), r->values.size() * sizeof(float));
      out->set_velocity(r->velocity.data(), r->velocity.size() * sizeof(float));
    }
    file.set_momentum(momentum_);
  }
  file.set_rank(rank);
  file.set_num_workers(num_workers);
  file.set_num_residuals(static_cast<uint32_t>(file.residuals_size()));
  if (file.ByteSizeLong() > static_cast<size_t>(INT32_MAX)) {
    return Status::FailedPrecondition("saving residuals: more than 2 GB");
  }
  return WriteChecksummedFile(path, file.SerializeAsString())
      .Annotate("saving residuals");
}

Status Compressor::Load(const std::string& path, int rank, int num_workers, KeyTable* keys,
                        const std::function<StatusOr<int64_t>(uint64_t id)>& size_of) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  proto::ResidualsFile file;
  if (!file.ParseFromString(bytes) ||
      file.num_residuals() != static_cast<uint32_t>(file.residuals_size()) ||
      (file.residuals_size() == 0 && bytes.empty())) {
    return Status::DataLoss(path + ": not a residuals file (cut short, corrupt or written "
                                   "by something else)");
  }
  auto describe = [](const proto::GradientCompression& s) {
    std::ostringstream out;
    out << CompressionName(s.type());
    if (s.type() == proto::GradientCompression::TWO_BIT) {
      if (s.auto_threshold()) {
        out << " threshold auto";
      } else {
        out << " threshold " << s.threshold();
      }
    }
    if (s.min_bytes() > 0) out << " min_bytes " << s.min_bytes();
    if (!PullName(s.pull()).empty()) out << " pull " << PullName(s.pull());
    return out.str();
  };
  const proto::GradientCompression mine = spec();
  if (file.spec().type() != mine.type() || file.spec().threshold() != mine.threshold() ||
      file.spec().auto_threshold() != mine.auto_threshold() ||
      file.spec().min_bytes() != mine.min_bytes()) {
    return Status::InvalidArgument(path + " was saved with gradient compression " +
                                   describe(file.spec()) + " but this store uses " +
                                   describe(mine));
  }
  if (file.momentum() != momentum()) {
    return Status::InvalidArgument(
        path + " was saved with a momentum correction of " + std::to_string(file.momentum()) +
        " but this store's is " + std::to_string(momentum()) +
        " (the optimizer's momentum, with 2bit): resume with the same optimizer");
  }
  if (file.rank() != rank || file.num_workers() != num_workers) {
    return Status::InvalidArgument(
        path + " holds the residuals of worker " + std::to_string(file.rank()) + " of " +
        std::to_string(file.num_workers()) + " but this is worker " + std::to_string(rank) +
        " of " + std::to_string(num_workers));
  }
  std::map<uint64_t, std::unique_ptr<Residual>> loaded;
  for (const proto::ResidualsFile::Residual& r : file.residuals()) {
    KV_ASSIGN_OR_RETURN(uint64_t id, r.int_key() ? keys->Id(Key(std::atoi(r.key().c_str())))
                                                  : keys->Id(Key(r.key())));
    StatusOr<int64_t> size = size_of(id);
    if (!size.ok()) return size.status().Annotate(path);
    if (r.data().size() != static_cast<size_t>(*size) * sizeof(float)) {
      return KeyError(Status::Code::kInvalidArgument, r.key(),
                      path + " holds a residual of " + std::to_string(r.data().size() / 4) +
                          " values but the key has " + std::to_string(*size));
    }
    if (!r.velocity().empty() && r.velocity().size() != r.data().size()) {
      return KeyError(Status::Code::kInvalidArgument, r.key(),
                      path + " holds a velocity of " + std::to_string(r.velocity().size() / 4) +
                          " values but the key has " + std::to_string(*size));
    }
    auto slot = std::make_unique<Residual>();
    slot->values.resize(static_cast<size_t>(*size));
    std::memcpy(slot->values.data(), r.data().data(), r.data().size());
    if (!r.velocity().empty()) {
      slot->velocity.resize(static_cast<size_t>(*size));
      std::memcpy(slot->velocity.data(), r.velocity().data(), r.velocity().size());
    }
    loaded[id] = std::move(slot);
  }
  std::lock_guard<std::mutex> l(mu_);
  residuals_ = std::move(loaded);
  return Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
