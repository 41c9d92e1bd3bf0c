// dist_allreduce: the store's calls (init, push, pull, waits, barriers) and
// the scheduler process's rendezvous-only store. The background thread that
// all-reduces sealed buckets is in allreduce_kvstore_reduce.cc.
#include "kvstore/allreduce_kvstore.h"
#include "kvstore/device_sum.h"
#include "kvstore/in_process.h"
#include "kvstore/keys.h"
#include "kvstore/settings.h"

#include <algorithm>
#include <cstring>

namespace kvtrain {
namespace kv {

namespace {

// The scheduler process of a launch.py job with -s 0: RunServer serves the
// rendezvous; nothing else is valid.
class RendezvousStore : public KVStore {
 public:
  explicit RendezvousStore(EnvLookup env)
      : KVStore("dist_allreduce"), env_(std::move(env)) {}
  Role role() const override { return Role::kScheduler; }
  Status RunServer() override {
    return collective::Communicator::ServeRendezvous(env_);
  }
  Status Init(const std::vector<Key>&, const std::vector<Tensor>&) override {
    return NotWorker();
  }
  StatusOr<KVHandle> PushAsync(const std::vector<Key>&,
                               const std::vector<Tensor>&, int) override {
    return NotWorker();
  }
  StatusOr<KVHandle> PullAsync(const std::vector<Key>&,
                               const std::vector<Tensor>&, int) override {
    return NotWorker();
  }
  StatusOr<KVHandle> PushPullAsync(const std::vector<Key>&,
                                   const std::vector<Tensor>&,
                                   const std::vector<Tensor>&, int) override {
    return NotWorker();
  }
  Status Wait(KVHandle) override { return NotWorker(); }
  Status SetOptimizer(const proto::OptimizerSpec&) override { return NotWorker(); }
  Status SetUpdater(Updater) override { return NotWorker(); }
  Status SaveOptimizerStates(const std::string&) override { return NotWorker(); }
  Status LoadOptimizerStates(const std::string&) override { return NotWorker(); }
  Status SetGradientCompression(const proto::GradientCompression&) override {
    return NotWorker();
  }

 private:
  static Status NotWorker() {
    return Status::FailedPrecondition(
        "dist_allreduce: the scheduler process only serves the rendezvous "
        "(call RunServer)");
  }
  EnvLookup env_;
};

}  // namespace

StatusOr<size_t> AllreduceBucketBytes(const EnvLookup& env) {
  KV_ASSIGN_OR_RETURN(int64_t bytes, GetIntVar(env, env::kAllreduceBucketBytes, 4 << 20,
                                               4, int64_t{1} << 40));
  return static_cast<size_t>(bytes);
}

std::unique_ptr<KVStore> AllreduceKVStore::RendezvousOnly(
    const KVStoreOptions& options) {
  return std::make_unique<RendezvousStore>(options.env);
}

AllreduceKVStore::AllreduceKVStore(
    std::shared_ptr<collective::Communicator> comm, size_t bucket_bytes,
    std::chrono::milliseconds timeout, bool owns_comm)
    : InProcessKVStore("dist_allreduce"),
      comm_(std::move(comm)),
      bucket_floats_(std::max<size_t>(1, bucket_bytes / sizeof(float))),
      timeout_(timeout),
      owns_comm_(owns_comm) {
  compressor_.SetKeyNames(&keys_);
  worker_ = std::thread([this] { WorkLoop(); });
}

AllreduceKVStore::~AllreduceKVStore() {
  // Closing first wakes a background collective waiting on peers.
  if (owns_comm_) comm_->Close();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void AllreduceKVStore::Abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = Status::Aborted("dist_allreduce rank " + std::to_string(rank()) + ": " + reason);
  }
  cv_.notify_all();
  // Peers' waits on this rank fail as "has left"; a collective of ours
  // waiting on them wakes.
  comm_->Close();
}

Status AllreduceKVStore::SetGradientCompression(const proto::GradientCompression& spec) {
  bool initialised;
  {
    std::lock_guard<std::mutex> l(mu_);
    initialised = !store_.empty();
  }
  if (spec.pull() != proto::GradientCompression::PULL_DEFAULT) {
    KV_RETURN_IF_ERROR(CheckCompression(spec));
    return Status::InvalidArgument(
        "gradient compression: pull " + PullName(spec.pull()) +
        " does not apply to dist_allreduce (no weights are pulled: every worker sums the "
        "gathered gradients itself); leave pull unset");
  }
  return compressor_.Set(spec, initialised);
}

Status AllreduceKVStore::SetOptimizer(const proto::OptimizerSpec& spec) {
  KV_RETURN_IF_ERROR(Optimizer::Create(spec).status());
  return InProcessKVStore::SetOptimizer(CorrectMomentum(spec));
}

proto::OptimizerSpec AllreduceKVStore::CorrectMomentum(const proto::OptimizerSpec& spec) {
  return kv::CorrectMomentum(spec, &compressor_);
}

proto::GradientCompression AllreduceKVStore::gradient_compression() const {
  return compressor_.spec();
}

Status AllreduceKVStore::SaveResiduals(const std::string& path) {
  return compressor_.Save(path, rank(), num_workers(), keys_);
}

Status AllreduceKVStore::LoadResiduals(const std::string& path) {
  return compressor_.Load(path, rank(), num_workers(), &keys_,
                          [this](uint64_t id) -> StatusOr<int64_t> {
                            std::lock_guard<std::mutex> l(mu_);
                            auto it = store_.find(id);
                            if (it == store_.end()) {
                              return KeyError(Status::Code::kNotFound, keys_.Name(id),
                                              "is not a key of this store (Init it first)");
                            }
                            return it->second.value.size();
                          });
}

Status AllreduceKVStore::Init(const std::vector<Key>& keys,
                              const std::vector<Tensor>& values) {
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, values, "init", &keys_));
  std::unique_lock<std::mutex> l(mu_);
  for (const KeyGroup& g : groups) {
    if (g.tensors.size() > 1) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "init got " + std::to_string(g.tensors.size()) +
                          " values; give one per key");
    }
    if (store_.count(g.id)) {
      return KeyError(Status::Code::kAlreadyExists, g.name, "already initialised");
    }
  }
  std::vector<Tensor> copies;
  for (const KeyGroup& g : groups) {
    KV_ASSIGN_OR_RETURN(Tensor copy, g.tensors[0].CopyTo(Device::CPU()));
    copies.push_back(copy);
  }
  // Buckets in reverse Init order: backward pushes the last keys first.
  // Each Init call starts a new bucket.
  bool fresh = true;
  for (size_t k = groups.size(); k-- > 0;) {
    const size_t n = static_cast<size_t>(copies[k].size());
    if (fresh || buckets_.back().count >= bucket_floats_) buckets_.emplace_back();
    fresh = false;
    Bucket& b = buckets_.back();
    Entry e{keys[k], copies[k]};
    e.bucket = static_cast<int>(buckets_.size()) - 1;
    e.offset = b.count;
    b.ids.push_back(groups[k].id);
    b.count += n;
    b.buffer.resize(b.count);
    store_.emplace(groups[k].id, std::move(e));
  }
  const uint64_t seq = Enqueue([this, copies] {
    for (const Tensor& t : copies) {
      KV_RETURN_IF_ERROR(comm_->Broadcast(0, t.raw_data(), t.nbytes())
                             .Annotate("init: broadcasting rank 0's values"));
    }
    return Status::OK();
  });
  return WaitSeq(&l, seq);
}

Status AllreduceKVStore::PushLocked(const std::vector<KeyGroup>& groups) {
  for (const KeyGroup& g : groups) {
    auto it = store_.find(g.id);
    if (it == store_.end()) {
      return KeyError(Status::Code::kNotFound, g.name,
                      "was never initialised (call Init first)");
    }
    if (it->second.value.shape() != g.tensors[0].shape()) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "pushed shape " + g.tensors[0].shape().ToString() +
                          " but it was initialised with " +
                          it->second.value.shape().ToString());
    }
  }
  for (const KeyGroup& g : groups) {
    Entry& e = store_[g.id];
    // A second push before the first was reduced: that round is sealed.
    if (e.pending) SealThrough(e.bucket);
    Bucket& b = buckets_[e.bucket];
    float* dst = b.buffer.data() + e.offset;
    const size_t bytes = static_cast<size_t>(e.value.size()) * sizeof(float);
    if (g.tensors.size() == 1 && g.tensors[0].device().is_cpu()) {
      std::memcpy(dst, g.tensors[0].raw_data(), bytes);
    } else {
      KV_ASSIGN_OR_RETURN(Tensor sum, SumOn(g.tensors, Device::CPU()));
      std::memcpy(dst, sum.raw_data(), bytes);
    }
    e.pending = true;
    ++b.pushed;
  }
  SealReady();
  return Status::OK();
}

StatusOr<std::unique_ptr<KVStore>> AllreduceKVStore::Create(
    const KVStoreOptions& options) {
  if (options.communicator) {
    return CreateAllreduceKVStore(options.communicator, options);
  }
  KV_ASSIGN_OR_RETURN(StoreSettings settings, StoreSettings::FromEnv(options.env));
  const EnvLookup& env = options.env;
  const auto role = env(env::kRole);
  const bool mpi = env(env::kOmpiSize) || env(env::kPmiSize);
  if (role == "scheduler") return RendezvousOnly(options);
  if (role == "server") {
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
  KV_ASSIGN_OR_RETURN(size_t bucket_bytes, AllreduceBucketBytes(options.env));
  return std::unique_ptr<KVStore>(new AllreduceKVStore(
      std::move(comm), bucket_bytes, settings.timeout, /*owns_comm=*/true));
}

KVHandle AllreduceKVStore::AddPending(Pending p) {
  return handles_.Add(std::move(p));
}

StatusOr<KVHandle> AllreduceKVStore::PushAsync(const std::vector<Key>& keys,
                                               const std::vector<Tensor>& values,
                                               int priority) {
  return PushPullAsync(keys, values, {}, priority);
}

StatusOr<KVHandle> AllreduceKVStore::PullAsync(const std::vector<Key>& keys,
                                               const std::vector<Tensor>& outs,
                                               int /*priority*/) {
  Pending p;
  auto groups = GroupByKey(keys, outs, "pull", &keys_);
  if (groups.ok()) {
    p.pulls = std::move(groups).value();
  } else {
    p.status = groups.status();
  }
  return AddPending(std::move(p));
}

StatusOr<KVHandle> AllreduceKVStore::PushPullAsync(
    const std::vector<Key>& keys, const std::vector<Tensor>& values,
    const std::vector<Tensor>& outs, int /*priority*/) {
  Pending p;
  auto pushes = GroupByKey(keys, values, "push", &keys_);
  if (!pushes.ok()) {
    p.status = pushes.status();
    return AddPending(std::move(p));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    p.status = PushLocked(*pushes);
  }
  if (p.status.ok()) {
    if (outs.empty()) {
      // Waiting on a push waits for its reduce (errors surface there).
      for (KeyGroup& g : *pushes) {
        g.tensors.clear();
        p.pulls.push_back(std::move(g));
      }
    } else {
      auto pulls = GroupByKey(keys, outs, "pull", &keys_);
      if (pulls.ok()) {
        p.pulls = std::move(pulls).value();
      } else {
        p.status = pulls.status();
      }
    }
  }
  return AddPending(std::move(p));
}

Status AllreduceKVStore::Wait(KVHandle handle) {
  Pending p;
  KV_RETURN_IF_ERROR(handles_.Take(handle, &p));
  KV_RETURN_IF_ERROR(p.status);
  std::unique_lock<std::mutex> l(mu_);
  uint64_t need = 0;
  for (const KeyGroup& g : p.pulls) {
    auto e = store_.find(g.id);
    if (e == store_.end()) {
      return KeyError(Status::Code::kNotFound, g.name,
                      "was never initialised (call Init first)");
    }
    if (e->second.pending) SealThrough(e->second.bucket);
    need = std::max(need, e->second.last_seq);
  }
  KV_RETURN_IF_ERROR(WaitSeq(&l, need));
  for (const KeyGroup& g : p.pulls) {
    if (g.tensors.empty()) continue;
    const Tensor& v = store_[g.id].value;
    if (v.shape() != g.tensors[0].shape()) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "pull into shape " + g.tensors[0].shape().ToString() +
                          " but the value has shape " + v.shape().ToString());
    }
    KV_RETURN_IF_ERROR(Broadcast(v, g.tensors));
  }
  return Status::OK();
}

Status AllreduceKVStore::LoadOptimizerStates(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  KV_ASSIGN_OR_RETURN(loaded_states_, LoadStatesLocked(path));
  return Status::OK();
}

Status AllreduceKVStore::Barrier() {
  std::unique_lock<std::mutex> l(mu_);
  std::string states = std::move(loaded_states_);
  loaded_states_.clear();
  const uint64_t seq = Enqueue([this, states]() {
    // Rank 0 says how many bytes of states it loaded since the last
    // Barrier (0: none), then sends them.
    uint64_t size = rank() == 0 ? states.size() : 0;
    KV_RETURN_IF_ERROR(comm_->Broadcast(0, &size, sizeof(size)));
    if (size > 0) {
      std::string bytes = rank() == 0 ? states : std::string(size, '\0');
      KV_RETURN_IF_ERROR(comm_->Broadcast(0, &bytes[0], size));
      if (rank() != 0) {
        std::shared_ptr<Optimizer> opt;
        {
          std::lock_guard<std::mutex> lock(mu_);
          opt = update_.optimizer();
        }
        if (!opt) {
          return Status::FailedPrecondition(
              "rank 0 loaded optimizer states but this rank has no optimizer "
              "(SetOptimizer on every rank first)");
        }
        KV_RETURN_IF_ERROR(opt->LoadStates(bytes));
      }
    }
    return comm_->Barrier();
  });
  return WaitSeq(&l, seq);
}

Status AllreduceKVStore::Finalize() {
  {
    std::unique_lock<std::mutex> l(mu_);
    if (finalized_) return Status::OK();
    finalized_ = true;
    // Pushes nobody pulled are still reduced, as on every other rank.
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (buckets_[b].pushed > 0) SealThrough(static_cast<int>(b));
    }
  }
  Status s = Barrier();
  if (owns_comm_) comm_->Close();
  return s;
}

}  // namespace kv
}  // namespace kvtrain
