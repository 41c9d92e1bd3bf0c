// Module::Fit: the training loop and its per-parameter KVStore traffic.
#include <glog/logging.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/trace.h"
#include "tensor/cpu_threads.h"
#include "trainer/module.h"

namespace kvtrain {

Status Module::SyncParams(KVStore* kv) {
  std::vector<Key> keys;
  std::vector<Tensor> first;
  for (size_t p = 0; p < param_names_.size(); ++p) {
    keys.push_back(param_names_[p]);
    first.push_back(execs_[0]->arg_arrays()[param_args_[p]]);
  }
  // Dist stores keep rank 0's values; everyone then pulls them.
  KV_RETURN_IF_ERROR(kv->Init(keys, first));
  return PullParams(kv);
}

Status Module::PullParams(KVStore* kv) {
  std::vector<Key> keys;
  std::vector<Tensor> values;
  for (size_t p = 0; p < param_names_.size(); ++p) {
    for (const auto& e : execs_) {
      keys.push_back(param_names_[p]);
      values.push_back(e->arg_arrays()[param_args_[p]]);
    }
  }
  return kv->Pull(keys, values);
}

Status Module::SetUpOptimizer(KVStore* kv, const FitOptions& o, bool update_on_kvstore) {
  local_optimizer_.reset();
  proto::OptimizerSpec spec = o.optimizer;
  if (!spec.has_rescale_grad()) {
    // The mean over the examples one update sums (MXNet's rule).
    const int workers = kv->sums_workers() ? kv->num_workers() : 1;
    spec.set_rescale_grad(1.0f / static_cast<float>(batch_size_ * workers));
  }
  if (!update_on_kvstore && kv->is_async()) {
    // Its servers apply every push as it arrives; without an optimizer they
    // accumulate, and there is no step's sum for a worker to apply.
    return Status::InvalidArgument(
        "update_on_kvstore=false needs a store that sums each step's gradients; '" +
        kv->type() + "' applies every push as it arrives: leave update_on_kvstore on");
  }
  if (update_on_kvstore) {
    KV_RETURN_IF_ERROR(kv->SetOptimizer(spec));
    if (!o.resume_states.empty()) {
      if (kv->rank() == 0) {
        if (o.resume_params != nullptr) {
          KV_RETURN_IF_ERROR(CheckStatesBelong(o.resume_states, *o.resume_params));
        }
        KV_RETURN_IF_ERROR(kv->LoadOptimizerStates(o.resume_states));
      }
      KV_RETURN_IF_ERROR(kv->Barrier());
    }
    return Status::OK();
  }
  KV_RETURN_IF_ERROR(Optimizer::Create(spec).status());
  // Each parameter's state on device d under StateKey(id, d), its id by the
  // rule every store names keys by (kvstore/keys.h).
  kv::KeyTable ids;
  state_ids_.clear();
  for (const std::string& name : param_names_) {
    KV_ASSIGN_OR_RETURN(uint64_t id, ids.Id(name));
    state_ids_.push_back(id);
  }
  // 2bit keeps the momentum on the store's side (KVStore::CorrectMomentum).
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> local,
                      Optimizer::Create(kv->CorrectMomentum(spec)));
  if (!o.resume_states.empty()) {
    if (o.resume_params != nullptr) {
      KV_RETURN_IF_ERROR(CheckStatesBelong(o.resume_states, *o.resume_params));
    }
    KV_ASSIGN_OR_RETURN(std::string states, ReadLocalStates(o.resume_states));
    KV_RETURN_IF_ERROR(local->LoadStates(states));
  }
  local_optimizer_ = std::move(local);
  return Status::OK();
}

std::vector<Engine::Var*> Module::PushStoreOps(
    KVStore* kv, const std::shared_ptr<std::vector<KVHandle>>& handles) {
  Optimizer* const local_optimizer = local_optimizer_.get();
  // One engine op per parameter: it runs once every device has that
  // gradient, while earlier layers' backward still computes, and hands the
  // gradients to the store (PushPullAsync never waits on the network). A
  // last op waits for every result (FinishStep): so a store may carry a
  // step's keys together (buckets), and one path serves every store type.
  // The ops run in the thread that made them ready (the device's compute
  // worker, done with the gradient), saving a hand-off per parameter; the
  // waiting op then holds that worker, which has nothing to run until the
  // weights are back, and goes on into the next forward without a wake-up.
  // The op that issues the step's last call sends the store's open bucket
  // (KVStore::Flush) the moment backward is done.
  auto unissued = std::make_shared<std::atomic<size_t>>(param_names_.size());
  std::vector<Engine::Var*> step_vars;
  for (size_t p = 0; p < param_names_.size(); ++p) {
    const int arg = param_args_[p];
    std::vector<Engine::Var*> reads, writes;
    std::vector<Tensor> grads, outs;
    for (const auto& e : execs_) {
      reads.push_back(e->grad_var(arg));
      writes.push_back(e->arg_var(arg));
      grads.push_back(e->grad_arrays()[arg]);
      // The store writes weights, or summed gradients the local optimizer
      // applies.
      outs.push_back(local_optimizer == nullptr ? e->arg_arrays()[arg]
                                                : e->grad_arrays()[arg]);
      if (local_optimizer != nullptr) writes.push_back(e->grad_var(arg));
      // The waiting op holds both until the store is done with them: the
      // gradients may be sent without a copy, the weights are written late.
      step_vars.push_back(e->arg_var(arg));
      step_vars.push_back(e->grad_var(arg));
    }
    const std::vector<Key> keys(execs_.size(), Key(param_names_[p]));
    const int priority = -static_cast<int>(p);
    Engine::Fn fn = [kv, keys, grads, outs, priority, handles, unissued, p]() -> Status {
      StatusOr<KVHandle> h = kv->PushPullAsync(keys, grads, outs, priority);
      if (unissued->fetch_sub(1) == 1) kv->Flush();
      KV_ASSIGN_OR_RETURN((*handles)[p], std::move(h));
      return Status::OK();
    };
    engine_->Push(std::move(fn), reads, writes, Device::CPU(), Engine::Queue::kInline,
                  "kvstore " + param_names_[p]);
  }
  return step_vars;
}

StatusOr<std::vector<Completion>> Module::StartStep(const Batch& batch,
                                                    const RowWriter& rows,
                                                    KVStore* kv,
                                                    std::string label) {
  trace::Scope span("trainer", "step");
  {
    // Not waited for: the writer and the label array hold what they read.
    trace::Scope feed("trainer", "feed");
    KV_RETURN_IF_ERROR(PushFeed(batch, &rows).status());
  }
  std::vector<Completion> forwards;
  for (auto& e : execs_) {
    KV_ASSIGN_OR_RETURN(Completion c, e->StartForward(true));
    forwards.push_back(c);
  }
  for (auto& e : execs_) KV_RETURN_IF_ERROR(e->StartBackward().status());
  auto handles =
      std::make_shared<std::vector<KVHandle>>(param_names_.size(), 0);
  const std::vector<Engine::Var*> step_vars = PushStoreOps(kv, handles);
  // Reads and writes: an error of a store op above skips it and passes on.
  Engine::Fn results = [this, kv, handles] {
    // Waiting on servers: the CPU pool's polling threads would take the
    // cores the servers and the transport need (on one host).
    if (kv->is_distributed()) RestCpuThreads();
    return FinishStep(kv, *handles);
  };
  // On CPU devices it is queued on the compute worker (the thread that ran
  // the store ops above, so still no hand-off) rather than run inline: the
  // next step's feed, pushed early and ready once this backward has read
  // the inputs, then goes first and copies the batch in while the servers
  // work, instead of after the answers.
  bool all_cpu = true;
  for (const Device& d : options_.devices) all_cpu = all_cpu && d.is_cpu();
  Completion finish = engine_->Push(std::move(results), step_vars, step_vars, Device::CPU(),
                                    all_cpu ? Engine::Queue::kCompute : Engine::Queue::kInline,
                                    "kvstore results");
  in_flight_.push_back({std::move(label), finish});
  return forwards;
}

Status Module::FinishOldestStep() {
  if (in_flight_.empty()) return Status::OK();
  InFlight oldest = std::move(in_flight_.front());
  in_flight_.pop_front();
  return oldest.finish.Wait(kStepTimeout).Annotate(oldest.label);
}

Status Module::Drain() {
  Status first;
  while (!in_flight_.empty()) {
    const Status s = FinishOldestStep();
    if (!s.ok() && first.ok()) first = s;
  }
  for (auto& e : execs_) {
    const Status s = e->Wait();
    if (!s.ok() && first.ok()) first = s;
  }
  if (!first.ok()) {
    for (auto& e : execs_) e->ClearErrors();
  }
  return first;
}

// Every parameter's PushPullAsync was issued: wait for the results (the
// store writes weights, or summed gradients the local optimizer applies).
Status Module::FinishStep(KVStore* kv, const std::vector<KVHandle>& handles) {
  Optimizer* const local_optimizer = local_optimizer_.get();
  const int ndev = static_cast<int>(execs_.size());
  for (size_t p = 0; p < param_names_.size(); ++p) {
    KV_RETURN_IF_ERROR(kv->Wait(handles[p]));
    if (local_optimizer == nullptr) continue;
    const int arg = param_args_[p];
    for (int d = 0; d < ndev; ++d) {
      // Queued on the device's stream, which orders the next forward after
      // it; whatever reads the weight elsewhere synchronises first.
      KV_RETURN_IF_ERROR(local_optimizer->Update(
          kv::StateKey(state_ids_[p], d), execs_[d]->arg_arrays()[arg],
          execs_[d]->grad_arrays()[arg], Optimizer::Wait::kQueued, 1.0f,
          local_optimizer->MultsFor(param_names_[p])));
    }
  }
  return Status::OK();
}

Status Module::RoundAsAnswered(const KVStore& kv) {
  for (size_t p = 0; p < param_names_.size(); ++p) {
    for (const auto& e : execs_) {
      Tensor w = e->arg_arrays()[param_args_[p]];
      if (!kv.AnswersRounded(w.size())) continue;
      KV_ASSIGN_OR_RETURN(Tensor host, w.CopyTo(Device::CPU()));
      kv.RoundAsAnswered(host.data<float>(), host.size());
      KV_RETURN_IF_ERROR(w.CopyFrom(host));
    }
  }
  return Status::OK();
}

// What one Fit call carries from epoch to epoch.
struct Module::FitRun {
  DataIter* train;
  DataIter* eval;
  KVStore* kv;
  const FitOptions& o;
  bool report;     // this rank has the output (model parallelism: one does)
  bool residuals;  // the store keeps error feedback: checkpoints save it
  MetricSet metrics;
  MetricSet batch_loss;
  Progress progress;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> loss_file{nullptr,
                                                            &std::fclose};
  // The batches of the first epoch already trained (a worker started again
  // goes on where the job is).
  int64_t skip = 0;
};

Status Module::CheckFit(KVStore* kv, const FitOptions& o) const {
  if (kv == nullptr) return Status::InvalidArgument("Fit needs a KVStore");
  if (!kv->is_worker()) {
    return Status::FailedPrecondition("Fit called in a " + std::string(RoleName(kv->role())) +
                                      " process; servers and the scheduler RunServer()");
  }
  if (o.begin_epoch < 0 || o.begin_epoch > o.num_epochs) {
    return Status::InvalidArgument("begin epoch " + std::to_string(o.begin_epoch) +
                                   " is not in [0, " + std::to_string(o.num_epochs) + "]");
  }
  if (o.checkpoint_period < 1) {
    return Status::InvalidArgument("checkpoint period " + std::to_string(o.checkpoint_period) +
                                   " is not >= 1");
  }
  if (execs_.empty()) {
    return Status::FailedPrecondition("Fit before Bind and InitParams");
  }
  return Status::OK();
}

StatusOr<bool> Module::PrepareFit(KVStore* kv, const FitOptions& o) {
  KV_RETURN_IF_ERROR(SyncParams(kv));
  // Unset: the workers update where the servers answer summed codes as
  // levels, so both directions travel compressed and nothing is rounded.
  // With one worker there is no sum to share: on a fast link the servers'
  // update costs less than encoding levels and updating on the worker.
  const bool levels = kv->SumsComeBackAsLevels() && kv->num_workers() > 1;
  const bool update_on_kvstore = o.update_on_kvstore.value_or(!levels);
  if (!o.update_on_kvstore.has_value() && levels && kv->rank() == 0) {
    std::printf("%s gradient compression: the workers run the optimizer, the servers answer "
                "each step's summed codes as levels (set update_on_kvstore to update on the "
                "servers)\n",
                kv->CompressionName().c_str());
    std::fflush(stdout);
  }
  KV_RETURN_IF_ERROR(SetUpOptimizer(kv, o, update_on_kvstore));
  const bool residuals = kv->KeepsResiduals();
  if (residuals && o.begin_epoch > 0 && !o.resume_states.empty()) {
    if (o.resume_residuals.empty()) {
      return Status::InvalidArgument(
          "resuming a job with gradient compression needs this worker's residuals file "
          "(FitOptions::resume_residuals, saved with the checkpoint)");
    }
    KV_RETURN_IF_ERROR(kv->LoadResiduals(o.resume_residuals));
  }
  if (o.begin_epoch > 0 && update_on_kvstore) {
    // Resuming where answers come rounded: the checkpoint holds the servers'
    // exact weights, and an uninterrupted job's workers would hold them as
    // the last answer brought them.
    KV_RETURN_IF_ERROR(RoundAsAnswered(*kv));
  }
  return residuals;
}

Status Module::Fit(DataIter* train, DataIter* eval, KVStore* kv,
                   const FitOptions& o) {
  KV_RETURN_IF_ERROR(CheckFit(kv, o));
  KV_ASSIGN_OR_RETURN(MetricSet metrics, MetricSet::Create(o.metrics));
  KV_ASSIGN_OR_RETURN(const bool residuals, PrepareFit(kv, o));
  // With model parallelism only the rank with the output reports.
  const bool report = has_output();
  KV_ASSIGN_OR_RETURN(Progress progress,
                      Progress::Create(report ? o.disp_batches : 0,
                                       report ? o.metrics_file : "",
                                       kv->is_distributed() ? kv->rank() : -1));
  KV_ASSIGN_OR_RETURN(MetricSet batch_loss, MetricSet::Create({"cross-entropy"}));
  FitRun run{train,
             eval,
             kv,
             o,
             report,
             residuals,
             std::move(metrics),
             std::move(batch_loss),
             std::move(progress)};
  if (report && !o.loss_file.empty()) {
    run.loss_file.reset(std::fopen(o.loss_file.c_str(), "w"));
    if (run.loss_file == nullptr) {
      return Status::NotFound("cannot write the loss file " + o.loss_file + ": " +
                              std::strerror(errno));
    }
  }
  // Whatever ends the loop, no step is left running: the engine's ops hold
  // this module's arrays, and errors they leave are cleared for the next Fit.
  struct DrainOnExit {
    Module* m;
    ~DrainOnExit() { (void)m->Drain(); }
  } drain_on_exit{this};
  int first = o.begin_epoch;
  if (const int64_t done = kv->ResumeStep(); done > 0) {
    // Started again in place of a dead worker: the job completed `done`
    // steps; this worker goes on with the next batch of its part, as the
    // dead one would have.
    const int64_t batches = EpochBatches(run);
    if (batches < 0) {
      return Status::FailedPrecondition(
          "this worker was started again in place of one that died, but its training data "
          "(a Python iterator) does not say how many batches an epoch has, so it cannot find "
          "where the job is: give the epoch's size (epoch_size, mx.io.ResizeIter)");
    }
    first += static_cast<int>(done / batches);
    run.skip = done % batches;
    LOG(INFO) << "worker " << kv->rank() << " goes on at epoch " << first << " batch "
              << run.skip;
    // At an epoch's end the dead one may have died before its checkpoint.
    if (run.skip == 0) KV_RETURN_IF_ERROR(Checkpoint(first - 1, &run));
  }
  for (int epoch = first; epoch < o.num_epochs; ++epoch) {
    KV_RETURN_IF_ERROR(TrainEpoch(epoch, &run));
    KV_RETURN_IF_ERROR(EndEpoch(epoch, &run));
  }
  if (kv->is_async() && o.begin_epoch < o.num_epochs) {
    // The others may have pushed after this worker's last pull: every
    // worker ends holding the servers' final weights.
    KV_RETURN_IF_ERROR(kv->Barrier());
    KV_RETURN_IF_ERROR(PullParams(kv));
  }
  return Status::OK();
}

Status Module::NextTrainBatch(DataIter* train, int epoch, Batch* batch,
                              RowWriter* rows) {
  bool more;
  {
    trace::Scope span("trainer", "next batch");
    KV_ASSIGN_OR_RETURN(more, train->NextRows(batch, rows));
  }
  if (more) return Status::OK();
  // This worker's part is shorter than the epoch: start it over, so every
  // worker runs the same number of steps.
  KV_RETURN_IF_ERROR(train->StartEpoch(epoch));
  KV_ASSIGN_OR_RETURN(more, train->NextRows(batch, rows));
  if (!more)
    return Status::InvalidArgument("the training data yields no batch");
  return Status::OK();
}

Status Module::TrainEpoch(int epoch, FitRun* run) {
  const FitOptions& o = run->o;
  KVStore* const kv = run->kv;
  run->metrics.Reset();
  KV_RETURN_IF_ERROR(run->train->StartEpoch(epoch));
  const int64_t batches = EpochBatches(*run);
  if (run->report) run->progress.StartEpoch(epoch, batches);
  Batch batch;
  RowWriter rows;
  const int64_t skip = std::exchange(run->skip, 0);
  for (int64_t n = 0; n < skip; ++n) {
    KV_RETURN_IF_ERROR(NextTrainBatch(run->train, epoch, &batch, &rows));
  }
  // batches < 0: an iterator that knows its length only at the end (a
  // Python one) runs the epoch to its end.
  for (int64_t n = skip; batches < 0 || n < batches; ++n) {
    if (o.stop && o.stop()) {
      return Status::Aborted("training stopped at epoch " +
                             std::to_string(epoch) + " batch " +
                             std::to_string(n));
    }
    if (batches < 0) {
      KV_ASSIGN_OR_RETURN(const bool more, run->train->NextRows(&batch, &rows));
      if (!more && n == 0) return Status::InvalidArgument("the training data yields no batch");
      if (!more) break;
    } else {
      KV_RETURN_IF_ERROR(NextTrainBatch(run->train, epoch, &batch, &rows));
    }
    // Two steps in flight: this thread copies in, and pushes the ops of,
    // the next batch while this one's backward and store round trip run,
    // so the engine goes from the store's answer straight into the next
    // forward without waiting for this thread. (Its own errors name it.)
    while (in_flight_.size() >= 2) KV_RETURN_IF_ERROR(FinishOldestStep());
    const std::string label =
        "epoch " + std::to_string(epoch) + " batch " + std::to_string(n);
    StatusOr<std::vector<Completion>> forwards =
        StartStep(batch, rows, kv, label);
    if (!forwards.ok()) return forwards.status().Annotate(label);
    for (const Completion& c : *forwards) {
      const Status s = c.Wait(kStepTimeout);
      if (s.ok()) continue;
      // An error an earlier step left on the weights is that step's:
      // report it with its batch.
      while (!in_flight_.empty()) KV_RETURN_IF_ERROR(FinishOldestStep());
      return s.Annotate(label);
    }
    {
      trace::Scope span("trainer", "metrics");
      KV_RETURN_IF_ERROR(UpdateMetrics(&run->metrics, batch));
    }
    if (run->loss_file != nullptr) {
      run->batch_loss.Reset();
      KV_RETURN_IF_ERROR(UpdateMetrics(&run->batch_loss, batch));
      std::fprintf(run->loss_file.get(), "%.9g\n",
                   run->batch_loss.Get()[0].second);
    }
    if (run->report)
      run->progress.Batch(n, batch_size_ - batch.pad, run->metrics.Get());
    if (o.batch_end)
      KV_RETURN_IF_ERROR(o.batch_end(epoch, n, run->metrics.Get()));
  }
  return Status::OK();
}

Status Module::EndEpoch(int epoch, FitRun* run) {
  const FitOptions& o = run->o;
  KVStore* const kv = run->kv;
  KV_RETURN_IF_ERROR(Drain());
  if (run->report) run->progress.EndTraining();
  MetricValues validation;
  if (run->eval != nullptr) {
    std::function<Status(int64_t, const MetricValues&)> each;
    if (o.eval_batch_end) {
      each = [&](int64_t n, const MetricValues& v) { return o.eval_batch_end(epoch, n, v); };
    }
    KV_ASSIGN_OR_RETURN(validation, Score(run->eval, o.metrics, each));
    if (o.eval_end) KV_RETURN_IF_ERROR(o.eval_end(epoch, validation));
  }
  MetricValues store;
  if (kv->is_async()) {
    // This worker's pushes since the last epoch's report.
    KV_ASSIGN_OR_RETURN(const StalenessReport r, kv->TakeStalenessReport());
    store = {{"staleness-mean", r.mean}, {"staleness-max", static_cast<double>(r.max)}};
    if (kv->async_options().staleness >= 0) store.emplace_back("held-seconds", r.held_seconds);
  }
  // Server replicas: the servers lost this epoch and what their deaths cost.
  const auto [lost, pause] = kv->TakeServerLosses();
  if (lost > 0) {
    store.emplace_back("servers-lost", static_cast<double>(lost));
    store.emplace_back("failover-pause-seconds", pause);
  }
  if (run->report) run->progress.EndEpoch(run->metrics.Get(), validation, store);
  KV_RETURN_IF_ERROR(Checkpoint(epoch, run));
  if (o.epoch_end) KV_RETURN_IF_ERROR(o.epoch_end(epoch));
  return Status::OK();
}

int64_t Module::EpochBatches(const FitRun& run) const {
  // Workers of a synchronous store must run the same number of steps: as
  // many as the largest part has. -1: unknown until the epoch ends (then
  // the workers' iterators must give equal numbers of batches).
  if (run.o.epoch_size > 0) return run.o.epoch_size;
  if (run.train->num_batches() < 0) return -1;
  return run.kv->lockstep() ? run.train->max_part_batches() : run.train->num_batches();
}

Status Module::Checkpoint(int epoch, FitRun* run) {
  const FitOptions& o = run->o;
  KVStore* const kv = run->kv;
  const bool checkpoint =
      !o.model_prefix.empty() && (epoch + 1) % o.checkpoint_period == 0;
  const std::string what = "checkpoint of epoch " + std::to_string(epoch + 1);
  if (checkpoint && run->residuals) {
    // Every worker's residuals are on disk before rank 0 writes the params
    // file, which completes a checkpoint.
    KV_RETURN_IF_ERROR(
        kv->SaveResiduals(ResidualsPath(o.model_prefix, epoch + 1, kv->rank()))
            .Annotate(what));
    KV_RETURN_IF_ERROR(kv->Barrier());
  }
  if (checkpoint && kv->rank() == 0) {
    KV_RETURN_IF_ERROR(
        SaveCheckpoint(o.model_prefix, epoch + 1, kv).Annotate(what));
  }
  return Status::OK();
}

}  // namespace kvtrain
