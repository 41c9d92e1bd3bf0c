// dist_sync / dist_device_sync / dist_async: the worker side (Init, push,
// pull, waits and barriers).
#include "kvstore/dist_kvstore.h"
#include "kvstore/device_sum.h"
#include "kvstore/keys.h"
#include "kvstore/settings.h"

#include <glog/logging.h>

#include <algorithm>

#include "base/malloc_tuning.h"
#include "base/trace.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace kv {
namespace {

// A piece's server key: its server's first key, plus the piece's StateKey
// (keys.h: the key's id, plus 2^40 per piece before it on that server).
// Ids are below 2^33 (int keys, and names from 2^32), pieces at most
// Placement::kMaxPieces: a server's range holds them unless a job has more
// than 2^14 servers.
constexpr uint64_t kPieceStride = uint64_t{1} << kStatePartShift;

}  // namespace

StatusOr<uint64_t> ServerKey(const ps::KeyRange& range, uint64_t id, int piece,
                             const std::string& name) {
  const uint64_t width = range.end - range.begin;
  const uint64_t offset = static_cast<uint64_t>(StateKey(id, piece));
  if (id >= kPieceStride || offset >= width) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    "piece " + std::to_string(piece) + " has no server key: too many servers (" +
                        std::to_string(width) + " keys each) for this key");
  }
  return range.begin + offset;
}

std::string DistKVStore::RequestBody(proto::KVSyncMode mode, int64_t step,
                                     const std::string& name,
                                     const std::string& payload) {
  proto::RequestInfo info;
  info.set_mode(mode);
  info.set_step(step);
  info.set_key_name(name);
  info.set_payload(payload);
  return info.SerializeAsString();
}

StatusOr<std::unique_ptr<KVStore>> DistKVStore::Create(
    const std::string& type, const KVStoreOptions& options) {
  KV_ASSIGN_OR_RETURN(StoreSettings settings, StoreSettings::FromEnv(options.env));
  if (settings.keep_freed_memory && !KeepFreedMemory()) {
    LOG(WARNING) << "glibc refused a malloc setting (KVTRAIN_KEEP_FREED_MEMORY)";
  }
  std::unique_ptr<ps::Postoffice> owned;
  ps::Postoffice* po = options.postoffice;
  if (po == nullptr) {
    if (!NodeConfig::InDistributedJob(options.env)) {
      return Status::FailedPrecondition(
          "KVStore '" + type + "' needs a distributed job: DMLC_ROLE is not set "
          "(start the program with tracker/launch.py)");
    }
    KV_ASSIGN_OR_RETURN(NodeConfig config, NodeConfig::FromEnv(options.env));
    ps::PostofficeOptions po_options;
    KV_ASSIGN_OR_RETURN(po_options.job_key, net::JobKey::FromEnv(options.env));
    KV_ASSIGN_OR_RETURN(po_options.same_host,
                        GetBoolVar(options.env, env::kSameHostIpc, true));
    KV_ASSIGN_OR_RETURN(owned, ps::Postoffice::Create(config, po_options));
    KV_RETURN_IF_ERROR(owned->Start());
    po = owned.get();
  }
  if (po->num_servers() == 0) {
    return Status::FailedPrecondition("KVStore '" + type +
                                      "' needs servers but the job has none "
                                      "(DMLC_NUM_SERVER=0)");
  }
  if (po->OneHost()) {
    if (!settings.bucket_bytes_given)
      settings.bucket_bytes = StoreSettings::kBucketBytesOneHost;
    if (!settings.piece_bytes_given && !settings.bucket_bytes_given) {
      settings.piece_bytes = StoreSettings::kPieceBytesOneHost;
    }
    settings.pieces_per_slice = StoreSettings::kPiecesPerSliceOneHost;
    settings.pieces_by_wire_bytes = false;
  }
  if (!settings.server_threads_given) {
    // A server given one CPU thread (KVTRAIN_NUM_THREADS=1: the launcher's
    // share where processes share a host's cores) handles requests on its
    // receive thread too: handler threads would only add a wake-up per
    // request on cores that are not there.
    StatusOr<int> cpus = CpuThreadsFromEnv(options.env);
    if (po->OneHost() || (cpus.ok() && *cpus <= 1)) {
      settings.server_threads = StoreSettings::kServerThreadsOneHost;
    }
  }
  std::unique_ptr<DistKVStore> store(
      new DistKVStore(type, po, std::move(owned), settings));
  if (po->role() == Role::kWorker) {
    KV_ASSIGN_OR_RETURN(store->worker_, ps::KVWorker::Create(po));
  }
  return std::unique_ptr<KVStore>(std::move(store));
}

DistKVStore::DistKVStore(const std::string& type, ps::Postoffice* po,
                         std::unique_ptr<ps::Postoffice> owned,
                         const StoreSettings& settings)
    : KVStore(type),
      po_(po),
      owned_po_(std::move(owned)),
      settings_(settings),
      sync_(type != "dist_async" && type != "dist_ssp"),
      device_reduce_(type == "dist_device_sync"),
      rejoining_(po->role() == Role::kWorker && po->incarnation() > 0),
      placement_(po->num_servers(), settings.bigarray_bound,
                 settings.piece_bytes / 4, settings.pieces_per_slice) {
  if (type == "dist_ssp") staleness_ = kDefaultSspStaleness;
  compressor_.SetKeyNames(&keys_);
  if (device_reduce_ && NumGpus() == 0 && po->role() == Role::kWorker) {
    LOG(INFO) << "KVStore '" << type << "': no GPU (" << NoGpuReason()
              << "); reducing on the CPU";
  }
}

DistKVStore::~DistKVStore() {
  if (owned_po_ && po_->role() == Role::kWorker && !finalized_) {
    po_->Abort(po_->name() + " left the job without KVStore::Finalize()");
  }
}

void DistKVStore::Abort(const std::string& reason) { po_->Abort(reason); }

Role DistKVStore::role() const { return po_->role(); }
int DistKVStore::rank() const { return po_->role() == Role::kWorker ? po_->rank() : 0; }
int DistKVStore::num_workers() const { return po_->num_workers(); }

std::string DistKVStore::Mode() const { return sync_ ? "sync" : "async"; }

void DistKVStore::SetMode(proto::RequestInfo* info) const {
  info->set_mode(sync_ ? proto::KV_SYNC : proto::KV_ASYNC);
  if (sync_) return;
  const int64_t staleness = staleness_.load();
  if (staleness >= 0) {
    info->set_bounded(true);
    info->set_staleness(staleness);
  }
  info->set_staleness_lr(staleness_lr_.load());
}

Status DistKVStore::SetAsyncOptions(const AsyncOptions& options) {
  if (sync_) return KVStore::SetAsyncOptions(options);
  if (type() == "dist_ssp" && options.staleness < 0) {
    return Status::InvalidArgument(
        "dist_ssp bounds staleness: give a staleness >= 0 steps (dist_async is unbounded)");
  }
  staleness_ = options.staleness;
  staleness_lr_ = options.staleness_lr;
  return Status::OK();
}

AsyncOptions DistKVStore::async_options() const {
  AsyncOptions o;
  if (sync_) return o;
  o.staleness = staleness_.load();
  o.staleness_lr = staleness_lr_.load();
  return o;
}

std::pair<int64_t, double> DistKVStore::TakeServerLosses() {
  if (worker_ == nullptr) return {0, 0.0};
  const ps::KVWorker::Losses l = worker_->TakeLosses();
  return {l.servers, l.pause_seconds};
}

StatusOr<StalenessReport> DistKVStore::TakeStalenessReport() {
  if (sync_) return KVStore::TakeStalenessReport();
  KV_RETURN_IF_ERROR(CheckWorker("TakeStalenessReport"));
  KV_ASSIGN_OR_RETURN(std::vector<std::string> answers,
                      AskEveryServer(proto::KV_ASYNC_STATS,
                                     "gathering the servers' staleness counters"));
  StalenessReport r;
  int64_t sum = 0, held_us = 0;
  for (const std::string& answer : answers) {
    proto::AsyncStats s;
    if (!s.ParseFromString(answer)) {
      return Status::DataLoss("a server answered its staleness counters malformed");
    }
    r.pushes += s.pushes();
    sum += s.staleness_sum();
    r.max = std::max(r.max, s.staleness_max());
    held_us += s.held_us();
    r.held += s.held();
  }
  r.mean = r.pushes > 0 ? static_cast<double>(sum) / static_cast<double>(r.pushes) : 0;
  r.held_seconds = static_cast<double>(held_us) * 1e-6;
  return r;
}

Status DistKVStore::CheckWorker(const char* call) const {
  if (po_->role() == Role::kWorker) return Status::OK();
  return Status::FailedPrecondition(
      std::string("KVStore::") + call + " called in a process whose role is " +
      RoleName(po_->role()) + "; such processes only serve: call RunServer()");
}

Status DistKVStore::Barrier() {
  KV_RETURN_IF_ERROR(CheckWorker("Barrier"));
  KV_RETURN_IF_ERROR(FlushBucket());
  return po_->Barrier(ps::kWorkerGroup, settings_.timeout);
}

Status DistKVStore::Init(const std::vector<Key>& keys,
                         const std::vector<Tensor>& values) {
  KV_RETURN_IF_ERROR(CheckWorker("Init"));
  KV_RETURN_IF_ERROR(FlushBucket());
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, values, "init", &keys_));
  std::vector<int64_t> sizes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const KeyGroup& g : groups) {
      if (g.tensors.size() > 1) {
        return KeyError(Status::Code::kInvalidArgument, g.name,
                        "init got several values; give one per key");
      }
      if (info_.count(g.id) || tables_.count(g.id)) {
        return KeyError(Status::Code::kAlreadyExists, g.name, "already initialised");
      }
      sizes.push_back(g.tensors[0].size());
    }
    std::vector<int64_t> piece_elements;
    for (int64_t n : sizes) piece_elements.push_back(PieceElements(n));
    const std::vector<std::vector<Part>> parts =
        placement_.Place(sizes, piece_elements);
    const std::vector<ps::KeyRange> ranges = po_->ServerKeyRanges();
    std::vector<KeyInfo> infos(groups.size());
    for (size_t i = 0; i < groups.size(); ++i) {
      KeyInfo& ki = infos[i];
      ki.name = groups[i].name;
      ki.shape = groups[i].tensors[0].shape();
      ki.parts = parts[i];
      for (const Part& p : ki.parts) {
        KV_ASSIGN_OR_RETURN(uint64_t server_key,
                            ServerKey(ranges[p.server], groups[i].id, p.piece, ki.name));
        ki.server_keys.push_back(server_key);
        ki.part_bytes.push_back(p.count * 4);
      }
    }
    for (size_t i = 0; i < groups.size(); ++i) info_.emplace(groups[i].id, std::move(infos[i]));
  }
  if (rejoining_) {
    // The servers hold the job's values: where is the job?
    KV_RETURN_IF_ERROR(AskSteps());
    return Barrier();
  }
  if (rank() == 0) {
    // One request per piece: a server takes one key per request.
    Pending pending;
    for (const KeyGroup& g : groups) {
      KV_ASSIGN_OR_RETURN(KeyInfo * ki, Lookup(g, "init"));
      KV_ASSIGN_OR_RETURN(Tensor host, g.tensors[0].CopyTo(Device::CPU()));
      for (const std::vector<size_t>& request : InitRequests(*ki)) {
        ps::RequestOptions opts;
        opts.head = proto::KV_INIT;
        opts.every_copy = true;
        opts.body =
            RequestBody(sync_ ? proto::KV_SYNC : proto::KV_ASYNC, 0, g.name);
        KV_ASSIGN_OR_RETURN(int64_t ts, worker_->Push(InitPairs(*ki, request, host), opts));
        pending.timestamps.push_back(ts);
        pending.names.push_back(g.name);
      }
    }
    KV_RETURN_IF_ERROR(Wait(Track(std::move(pending))));
  }
  // Everyone returns once rank 0's values are on the servers.
  return Barrier();
}

Status DistKVStore::AskSteps() {
  if (compressor_.type() != proto::GradientCompression::NONE) {
    return Status::FailedPrecondition(
        po_->name() + " was started again, but the job compresses gradients: each worker's "
        "error feedback died with it, so it cannot go on where the job is (restarts need "
        "gradient compression off)");
  }
  std::vector<uint64_t> keys;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, ki] : info_) {
      keys.insert(keys.end(), ki.server_keys.begin(), ki.server_keys.end());
    }
  }
  std::sort(keys.begin(), keys.end());
  ps::RequestOptions opts;
  opts.head = proto::KV_STEPS;
  opts.body = RequestBody(sync_ ? proto::KV_SYNC : proto::KV_ASYNC, 0, "");
  KV_ASSIGN_OR_RETURN(int64_t ts, worker_->Pull(ps::Blob::FromVector(std::move(keys)), opts));
  ps::PullResult result;
  KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout, &result)
                         .Annotate("asking the servers where the job is"));
  std::map<uint64_t, int64_t> step_of;
  for (const ps::KVPairs& part : result.parts) {
    const size_t n = std::min(part.num_keys(), part.vals.size() / sizeof(int64_t));
    for (size_t i = 0; i < n; ++i) step_of[part.key(i)] = part.vals.as<int64_t>()[i];
  }
  // The job is at the least step of the keys the workers push; a key no
  // worker pushed yet (-1) starts at 0.
  int64_t least = -1;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, ki] : info_) {
    for (uint64_t k : ki.server_keys) {
      const int64_t step = step_of.count(k) ? step_of[k] : -1;
      if (step >= 0 && (least < 0 || step < least)) least = step;
    }
  }
  if (least < 0) least = 0;
  for (auto& [id, ki] : info_) {
    bool touched = false;
    for (uint64_t k : ki.server_keys) touched = touched || (step_of.count(k) && step_of[k] >= 0);
    ki.pushes = touched ? least : 0;
  }
  exact_pulls_.store(true);
  if (resume_step_.exchange(least) != least) {
    LOG(WARNING) << po_->name() << ": started again; the job is at step " << least
                 << ", this worker goes on from step " << least + 1;
  }
  return Status::OK();
}

StatusOr<DistKVStore::KeyInfo*> DistKVStore::Lookup(const KeyGroup& g,
                                                     const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = info_.find(g.id);
  if (it == info_.end()) {
    if (tables_.count(g.id)) {
      return KeyError(Status::Code::kInvalidArgument, g.name,
                      "is a row-sparse key: push it with PushRowSparse and pull "
                      "it with RowSparsePull");
    }
    return KeyError(Status::Code::kNotFound, g.name,
                    "was never initialised (call Init first)");
  }
  if (it->second.shape != g.tensors[0].shape()) {
    return KeyError(Status::Code::kInvalidArgument, g.name,
                    what + " with shape " + g.tensors[0].shape().ToString() +
                        " but it was initialised with " +
                        it->second.shape.ToString());
  }
  return &it->second;
}

StatusOr<Tensor> DistKVStore::Reduce(const std::vector<Tensor>& values) {
  Device where = Device::CPU();
  if (device_reduce_) {
    for (const Tensor& v : values) {
      if (v.device().is_gpu()) {
        where = v.device();
        break;
      }
    }
  }
  // One host value goes out as it is (zero-copy; see PushAsync's contract).
  if (values.size() == 1 && values[0].device().is_cpu()) return values[0];
  KV_ASSIGN_OR_RETURN(Tensor sum, SumOn(values, where));
  if (!where.is_cpu()) return sum.CopyTo(Device::CPU());
  return sum;
}

std::vector<std::vector<size_t>> DistKVStore::InitRequests(const KeyInfo& ki) {
  std::vector<std::vector<size_t>> out;
  const bool pieces = std::any_of(ki.parts.begin(), ki.parts.end(),
                                  [](const Part& p) { return p.piece > 0; });
  for (size_t j = 0; j < ki.parts.size(); ++j) {
    if (out.empty() || pieces) out.emplace_back();
    out.back().push_back(j);
  }
  return out;
}

ps::KVPairs DistKVStore::InitPairs(const KeyInfo& ki, const std::vector<size_t>& request,
                                   const Tensor& value) {
  std::vector<uint64_t> keys;
  std::vector<int64_t> lens;
  int64_t bytes = 0;
  for (size_t j : request) {
    keys.push_back(ki.server_keys[j]);
    lens.push_back(ki.part_bytes[j]);
    bytes += ki.part_bytes[j];
  }
  const size_t offset = static_cast<size_t>(ki.parts[request.front()].offset) * 4;
  return ps::KVPairs::From(
      std::move(keys),
      ps::Blob(value.storage(), static_cast<char*>(value.raw_data()) + offset,
               static_cast<size_t>(bytes)),
      std::move(lens));
}

void DistKVStore::UndoPush(KeyInfo* ki, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ki->pushes == step) --ki->pushes;
}

StatusOr<KVHandle> DistKVStore::PushAsync(const std::vector<Key>& keys,
                                          const std::vector<Tensor>& values,
                                          int priority) {
  KV_RETURN_IF_ERROR(CheckWorker("Push"));
  KV_RETURN_IF_ERROR(FlushBucket());
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, values, "push", &keys_));
  Pending pending;
  for (const KeyGroup& g : groups) {
    KV_RETURN_IF_ERROR(AddToBucket(&g, nullptr, priority, &pending));
  }
  // Sent now: a push is not held back until someone waits.
  KV_RETURN_IF_ERROR(FlushBucket());
  return Track(std::move(pending));
}

StatusOr<KVHandle> DistKVStore::PullAsync(const std::vector<Key>& keys,
                                          const std::vector<Tensor>& outs,
                                          int priority) {
  KV_RETURN_IF_ERROR(CheckWorker("Pull"));
  KV_RETURN_IF_ERROR(FlushBucket());
  KV_ASSIGN_OR_RETURN(std::vector<KeyGroup> groups,
                      GroupByKey(keys, outs, "pull", &keys_));
  Pending pending;
  for (const KeyGroup& g : groups) {
    KV_RETURN_IF_ERROR(AddToBucket(nullptr, &g, priority, &pending));
  }
  KV_RETURN_IF_ERROR(FlushBucket());
  return Track(std::move(pending));
}

StatusOr<KVHandle> DistKVStore::PushPullAsync(const std::vector<Key>& keys,
                                              const std::vector<Tensor>& values,
                                              const std::vector<Tensor>& outs,
                                              int priority) {
  KV_RETURN_IF_ERROR(CheckWorker("PushPull"));
  KV_ASSIGN_OR_RETURN(PushPullGroups g, GroupPushPull(keys, values, outs, &keys_));
  Pending pending;
  for (size_t i = 0; i < g.pushes.size(); ++i) {
    KV_RETURN_IF_ERROR(AddToBucket(&g.pushes[i], &g.pulls[i], priority, &pending));
  }
  return Track(std::move(pending));
}

KVHandle DistKVStore::Track(Pending pending) {
  return pending_.Add(std::move(pending));
}

void DistKVStore::Flush() {
  // A failed send is the bucket's status, which its waiter gets.
  (void)FlushBucket();
}

Status DistKVStore::Wait(KVHandle handle) {
  Pending p;
  KV_RETURN_IF_ERROR(pending_.Take(handle, &p));
  // The open bucket goes now, whether this handle needs it or not: the
  // caller is about to block, and what waits in it would otherwise leave
  // only when its own handle is waited for, a round trip after this one (a
  // trainer's last small key after its first layer's pieces). A failed send
  // is the bucket's status, which its waiter gets from WaitBucket.
  (void)FlushBucket();
  // One deadline for the whole operation, however many requests it made:
  // each waits for what is left (a timed-out request is cancelled).
  const auto deadline = std::chrono::steady_clock::now() + settings_.timeout;
  auto left = [deadline] {
    return std::max(std::chrono::steady_clock::duration::zero(),
                    deadline - std::chrono::steady_clock::now());
  };
  Status first;
  for (size_t i = 0; i < p.timestamps.size(); ++i) {
    trace::Scope span("kvstore", "wait ", p.names[i], p.timestamps[i]);
    Status s = worker_->Wait(p.timestamps[i],
                             std::chrono::duration_cast<ps::Duration>(left()));
    if (!s.ok() && first.ok()) {
      // Server errors name the key already; transport errors do not.
      const std::string tag = "key " + p.names[i] + ":";
      first = s.message().find(tag) == std::string::npos
                  ? s.Annotate("key " + p.names[i]) : s;
    }
  }
  for (const auto& b : p.buckets) {
    Status s = WaitBucket(b.get(), std::chrono::duration_cast<ps::Duration>(left()));
    if (!s.ok() && first.ok()) first = s;
  }
  if (!first.ok()) return first;
  return p.finish ? p.finish() : Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
