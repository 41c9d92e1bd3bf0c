// dist_sync / dist_device_sync / dist_async: what the workers ask of the
// servers besides push and pull (the optimizer and its states), RunServer
// in server and scheduler processes, and Finalize.
#include <glog/logging.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "kvstore/dist_kvstore.h"
#include "kvstore/server.h"
#include "kvstore/in_process.h"
#include "ops/optimizer.h"

namespace kvtrain {
namespace kv {
namespace {

// Long enough for any training job; dead peers end it sooner (heartbeats).
constexpr auto kJobLifetime = std::chrono::hours(24 * 365);
// PS_VERBOSE: how often a server logs its row-sparse tables' counters.
constexpr auto kTableReport = std::chrono::seconds(10);

}  // namespace

Status DistKVStore::SetOptimizer(const proto::OptimizerSpec& spec) {
  KV_RETURN_IF_ERROR(CheckWorker("SetOptimizer"));
  KV_RETURN_IF_ERROR(FlushBucket());
  // Every worker checks the spec, so a bad one fails everywhere alike.
  KV_RETURN_IF_ERROR(Optimizer::Create(spec).status());
  server_optimizer_ = true;
  // Every worker keeps its own velocities (2bit momentum correction).
  const proto::OptimizerSpec applied = CorrectMomentum(spec);
  // A worker started again: the servers hold the optimizer and its state.
  if (rank() == 0 && !rejoining_) {
    ps::RequestOptions opts;
    opts.head = proto::KV_SET_OPTIMIZER;
    opts.body = RequestBody(proto::KV_SYNC_UNSPECIFIED, 0, "",
                            applied.SerializeAsString());
    KV_ASSIGN_OR_RETURN(int64_t ts, worker_->Push(ps::KVPairs{}, opts));
    KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout)
                           .Annotate("sending the optimizer to the servers"));
  }
  return Barrier();
}

Status DistKVStore::SetUpdater(Updater /*updater*/) {
  return Status::FailedPrecondition(
      "SetUpdater works with the local and device stores only; '" + type() +
      "' updates on the servers: use SetOptimizer");
}

Status DistKVStore::SaveOptimizerStates(const std::string& path) {
  KV_RETURN_IF_ERROR(CheckWorker("SaveOptimizerStates"));
  KV_RETURN_IF_ERROR(FlushBucket());
  // One key per server's range (its first), answered by the range's
  // primary: with server replicas, each range's states once.
  std::vector<uint64_t> keys;
  for (const ps::KeyRange& range : po_->ServerKeyRanges()) keys.push_back(range.begin);
  ps::RequestOptions opts;
  opts.head = proto::KV_SAVE_STATES;
  opts.body = RequestBody(proto::KV_SYNC_UNSPECIFIED, 0, "");
  KV_ASSIGN_OR_RETURN(int64_t ts, worker_->Pull(ps::Blob::FromVector(std::move(keys)), opts));
  ps::PullResult result;
  KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout, &result)
                         .Annotate("gathering the servers' optimizer states"));
  std::vector<std::string> states;
  for (const ps::KVPairs& part : result.parts) states.push_back(part.vals.ToString());
  return WriteStatesFile(path, type(), states);
}

StatusOr<std::vector<std::string>> DistKVStore::AskEveryServer(proto::KVCommand command,
                                                               const std::string& what) {
  KV_RETURN_IF_ERROR(FlushBucket());
  ps::RequestOptions opts;
  opts.head = command;
  opts.body = RequestBody(proto::KV_SYNC_UNSPECIFIED, 0, "");
  // No keys: every server answers, in rank order.
  KV_ASSIGN_OR_RETURN(int64_t ts, worker_->Pull(ps::Blob(), opts));
  ps::PullResult result;
  KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout, &result).Annotate(what));
  std::vector<std::string> answers;
  for (const ps::KVPairs& part : result.parts) answers.push_back(part.vals.ToString());
  return answers;
}

Status DistKVStore::LoadOptimizerStates(const std::string& path) {
  KV_RETURN_IF_ERROR(CheckWorker("LoadOptimizerStates"));
  KV_RETURN_IF_ERROR(FlushBucket());
  if (rejoining_) {
    // The servers' states are the job's now, later than any file's.
    LOG(INFO) << po_->name() << ": started again: the servers keep their optimizer states ("
              << path << " not loaded)";
    return Status::OK();
  }
  KV_ASSIGN_OR_RETURN(std::vector<std::string> states, ReadStatesFile(path));
  if (static_cast<int>(states.size()) != po_->num_servers()) {
    return Status::InvalidArgument(path + " holds the optimizer states of " +
                                   std::to_string(states.size()) +
                                   " servers but this job has " +
                                   std::to_string(po_->num_servers()));
  }
  // One key per server (the first of its range) routes each its own states.
  std::vector<uint64_t> keys;
  std::vector<int64_t> lens;
  std::string all;
  const std::vector<ps::KeyRange> ranges = po_->ServerKeyRanges();
  for (size_t s = 0; s < states.size(); ++s) {
    keys.push_back(ranges[s].begin);
    lens.push_back(static_cast<int64_t>(states[s].size()));
    all += states[s];
  }
  ps::RequestOptions opts;
  opts.head = proto::KV_LOAD_STATES;
  opts.every_copy = true;  // each copy of a range holds its optimizer state
  opts.body = RequestBody(proto::KV_SYNC_UNSPECIFIED, 0, "");
  KV_ASSIGN_OR_RETURN(
      int64_t ts,
      worker_->Push(
          ps::KVPairs::From(keys, ps::Blob::FromString(std::move(all)), lens),
          opts));
  return worker_->Wait(ts, settings_.timeout)
      .Annotate("restoring the servers' optimizer states from " + path);
}

Status DistKVStore::RunServer() {
  if (po_->role() == Role::kWorker) {
    return Status::FailedPrecondition(
        "RunServer called in a worker process; workers train, servers serve");
  }
  // The handler outlives the server: ~KVServer drains the handler threads,
  // and a step's last handler may still be running when the job ends.
  std::unique_ptr<ServerRanges> handler;
  std::unique_ptr<ps::KVServer> server;
  if (po_->role() == Role::kServer) {
    handler = std::make_unique<ServerRanges>(po_);
    ServerRanges* h = handler.get();
    ps::KVServerOptions opts;
    opts.handler_threads = settings_.server_threads;
    opts.on_worker_back = [h](int rank) { h->ForgetWorker(rank); };
    KV_ASSIGN_OR_RETURN(
        server, ps::KVServer::Create(
                    po_, 0,
                    [h](const ps::RequestMeta& meta, const ps::KVPairs& data,
                        ps::KVServer* s) { h->Handle(meta, data, s); },
                    opts));
  }
  finalized_ = true;
  if (handler != nullptr && po_->incarnation() > 0) {
    // A server started again: a copy of its key ranges once filled.
    const Status filled = handler->Fill(server.get());
    if (!filled.ok()) {
      po_->Abort(po_->name() + " was started again but cannot copy its key ranges: " +
                 filled.ToString());
      return filled;
    }
  }
  // PS_VERBOSE: the row-sparse tables' counters every kTableReport while
  // serving; always once at the end.
  std::mutex report_mu;
  std::condition_variable report_cv;
  bool serving = true;
  std::thread reporter;
  if (handler != nullptr && po_->verbose() > 0) {
    reporter = std::thread([&] {
      std::unique_lock<std::mutex> lock(report_mu);
      while (!report_cv.wait_for(lock, kTableReport, [&] { return !serving; })) {
        const std::string report = handler->SparseReport();
        if (!report.empty()) LOG(INFO) << po_->name() << ": " << report;
      }
    });
  }
  const Status done = po_->Finalize(kJobLifetime);
  if (reporter.joinable()) {
    {
      std::lock_guard<std::mutex> lock(report_mu);
      serving = false;
    }
    report_cv.notify_all();
    reporter.join();
  }
  if (handler != nullptr) {
    const std::string report = handler->SparseReport();
    if (!report.empty()) LOG(INFO) << po_->name() << " at the end: " << report;
  }
  return done;
}

Status DistKVStore::Finalize() {
  if (finalized_) return Status::OK();
  if (worker_ != nullptr) {
    (void)FlushBucket();
    // The servers answer whoever waits for a step this worker will never
    // push (a worker with fewer batches) with an error naming it, at once.
    const StatusOr<std::vector<std::string>> told =
        AskEveryServer(proto::KV_WORKER_DONE, "telling the servers this worker is done");
    if (!told.ok()) LOG(WARNING) << po_->name() << ": " << told.status().message();
  }
  finalized_ = true;
  // Waits for the slowest worker (dist_async workers may finish far apart):
  // no deadline, but a dead node still ends the wait (liveness).
  return po_->Finalize(kJobLifetime);
}

}  // namespace kv
}  // namespace kvtrain
