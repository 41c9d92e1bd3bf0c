// Module: trains a symbol with data parallelism over the devices of this
// process and, through a KVStore, over the workers of a job (MXNet's
// Module/FeedForward); with a PeerLink, with model parallelism across
// processes too (each process trains its ranks' part of the graph). Per batch: forward, backward, and for each parameter
// a push of its gradients and a pull of its weights, started as soon as
// backward has produced that gradient, with priority -index so the first
// layers' traffic goes out first.
#ifndef KVTRAIN_TRAINER_MODULE_H_
#define KVTRAIN_TRAINER_MODULE_H_

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/peer_link.h"
#include "base/status.h"
#include "engine/executor.h"
#include "engine/io/data_iter.h"
#include "engine/symbol.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"
#include "trainer/progress.h"
#include "kvstore/keys.h"
#include "kvstore/kvstore.h"
#include "ops/initializer.h"
#include "ops/optimizer.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {

struct ModuleOptions {
  // The inputs fed from the data iterator.
  std::string data_name = "data";
  std::string label_name = "softmax_label";
  // Data parallelism inside the process: the batch is split across these.
  std::vector<Device> devices = {Device::CPU()};
  // Relative share of the batch per device (empty: equal shares).
  std::vector<double> work_load_list;
  // Where KVTRAIN_ENGINE and friends are read.
  EnvLookup env = ProcessEnv();
  // Model parallelism across processes (ExecutorOptions::peer_link): the
  // link to the other ranks of this model replica (must outlive the module;
  // needs exactly one device) and the rank of each ctx_group. This process
  // then binds, initialises, updates and saves only its part's parameters;
  // the KVStore syncs them with the same part of other replicas. Inputs
  // are fed where the part reads them; metrics come from the rank holding
  // the graph's first output (elsewhere they stay empty).
  PeerLink* peer_link = nullptr;
  std::map<std::string, int> group2rank;
};

struct FitOptions {
  // Epochs [begin_epoch, num_epochs) run; begin_epoch > 0 resumes.
  int begin_epoch = 0;
  int num_epochs = 10;
  // Batches per epoch (0: until the iterator ends). Workers of a dist_sync
  // job must run the same number of batches: an iterator that runs out
  // starts over within the epoch, so no worker leaves the others waiting.
  int64_t epoch_size = 0;
  // The optimizer; rescale_grad defaults to 1 / (batch * workers).
  proto::OptimizerSpec optimizer;
  // true: the KVStore applies the optimizer (on the servers for dist
  // types); false: it sums gradients and each device updates locally.
  // Unset: the workers where the servers answer each step's summed 2bit or
  // 1bit codes exactly as levels (KVStore::SumsComeBackAsLevels) and the job
  // has 2 or more workers, so that both directions travel compressed; the
  // store everywhere else. Rank 0 prints a line when the workers are chosen.
  std::optional<bool> update_on_kvstore;
  std::vector<std::string> metrics = {"accuracy"};
  // Speedometer period in batches; 0: none.
  int disp_batches = 100;
  // JSON lines of metrics ("" = none).
  std::string metrics_file;
  // The cross-entropy of every training batch, one number per line ("" =
  // none; written only where the graph's output is computed).
  std::string loss_file;
  // Checkpoints after every checkpoint_period-th epoch ("" = none):
  // P-symbol.txt, P-NNNN.params, P-NNNN.states. Written by rank 0. With 2bit or 1bit gradient
  // compression every worker also writes its residuals,
  // P-NNNN.rankR.residuals, before rank 0 writes the rest.
  std::string model_prefix;
  int checkpoint_period = 1;
  // Resume: optimizer states to restore before begin_epoch ("" = none).
  std::string resume_states;
  // Resume with 2bit or 1bit compression: this worker's residuals file
  // (ResidualsPath); required then.
  std::string resume_residuals;
  // The params file resumed from (its source and states_digest): when set,
  // resume_states must be the states file saved with it.
  const ModelArrays* resume_params = nullptr;
  // Called after every batch with the epoch, the batch's index in it and
  // the epoch's running train metrics; an error stops Fit with it.
  std::function<Status(int epoch, int64_t batch, const MetricValues& train)> batch_end;
  // With `eval`: called after each validation batch with the epoch, the
  // batch's index and the running validation metrics, and after the
  // epoch's validation with its metrics; an error stops Fit with it.
  std::function<Status(int epoch, int64_t batch, const MetricValues& validation)>
      eval_batch_end;
  std::function<Status(int epoch, const MetricValues& validation)> eval_end;
  // Called after every epoch (after its validation and checkpoint) with its
  // index; an error stops Fit with it.
  std::function<Status(int epoch)> epoch_end;
  // Checked before every batch: when it returns true Fit stops at once
  // with Aborted (e.g. Ctrl-C in the Python front-end).
  std::function<bool()> stop;
};

// Not thread-safe: one thread drives it.
class Module {
 public:
  static StatusOr<std::unique_ptr<Module>> Create(const Symbol& symbol,
                                                  const ModuleOptions& options);
  ~Module();

  // Binds one executor per device for global batches of `data_shape`
  // (first dimension: the batch) and labels of `label_shape`.
  Status Bind(const Shape& data_shape, const Shape& label_shape);
  // Fills the parameters: from `from` when given (every parameter and
  // auxiliary state must be there with the model's shape: otherwise an
  // error names the file and the array), else by the initializer. Every
  // device gets the same values.
  Status InitParams(const InitializerOptions& init, const ModelArrays* from = nullptr);

  // Trains; `eval` (may be null) is scored after every epoch.
  Status Fit(DataIter* train, DataIter* eval, KVStore* kv, const FitOptions& options);
  // Metrics of the model on `data` (forward only); `each` (optional) is
  // called after every batch with its index and the running metrics.
  StatusOr<MetricValues> Score(
      DataIter* data, const std::vector<std::string>& metrics,
      const std::function<Status(int64_t batch, const MetricValues& running)>& each = nullptr);
  // The graph's first output for every example of `data` (forward only, the
  // padding of the last batch dropped), on the host: (examples, ...).
  StatusOr<Tensor> Predict(DataIter* data);

  // MXNet's step-by-step API (mod.forward, backward, update). PrepareSteps
  // sets the store and the optimizer up as Fit does (the parameters'
  // values made the store's, the optimizer on the store or, with
  // `o.update_on_kvstore` false, on the workers; only `o.optimizer` and
  // `o.update_on_kvstore` are read). Then each step is Forward (a batch of
  // the bound size; is_train for a step that goes on to Backward),
  // Backward and Update (every gradient pushed, the new weights pulled: the
  // same store traffic as one step of Fit). Each call waits for its work;
  // out of order (Backward without a training Forward, Update without a
  // Backward or before PrepareSteps) they fail, naming what is missing.
  Status PrepareSteps(KVStore* kv, const FitOptions& o);
  Status Forward(const Batch& batch, bool is_train);
  Status Backward();
  Status Update();
  // The last Forward's first output, every device's rows in order, on the
  // host: (batch, ...).
  StatusOr<Tensor> Outputs() const;

  // The parameters and auxiliary states (from the first device, on the host).
  StatusOr<ModelArrays> Arrays() const;
  const std::vector<std::string>& param_names() const { return param_names_; }
  // Whether this process computes the graph's first output (always, without
  // model parallelism): where metrics and losses are.
  bool has_output() const { return output_index_ >= 0; }
  const Symbol& symbol() const { return symbol_; }
  // Checkpoint files for `epoch` under `prefix`: the optimizer states come
  // from the workers' optimizer if the last Fit updated on the workers,
  // else from `kv`. (The residuals of 2bit/1bit compression are each
  // worker's: Fit's checkpoints save them, this does not.)
  Status SaveCheckpoint(const std::string& prefix, int epoch, KVStore* kv);

 private:
  struct Slice {
    int64_t begin = 0;
    int64_t size = 0;
  };

  Module(const Symbol& symbol, const ModuleOptions& options)
      : symbol_(symbol), options_(options) {}
  // How long the trainer waits for one engine op of a step (a hang is
  // reported, not waited out).
  static constexpr std::chrono::minutes kStepTimeout{30};

  // A step whose ops are on the engine: Fit waits for it two steps later.
  struct InFlight {
    std::string label;                 // "epoch E batch N", for its errors
    Completion finish;                 // the store's results are in
  };

  // Copies rows of the batch into each device's data and label arrays, as
  // engine ops (after the ops that still read them); with `rows`, the data
  // rows are written by it (DataIter::NextRows) instead of copied from
  // batch.data.
  StatusOr<std::vector<Completion>> PushFeed(const Batch& batch,
                                             const RowWriter* rows = nullptr);
  // PushFeed and wait.
  Status Feed(const Batch& batch);
  // Every batch of `data` from its start, fed and forward (inference), then
  // `fn` on it: Score's and Predict's loop.
  Status ForEachForward(DataIter* data, const std::function<Status(const Batch&)>& fn);
  Status UpdateMetrics(MetricSet* metrics, const Batch& batch);
  // One training step on the engine: the batch written in (`rows`),
  // forward, backward, the parameters' KVStore ops and a last op that waits
  // for the store's results (FinishStep). Returns once the ops are pushed,
  // with the forward pass's handle (the outputs are readable once it is
  // done); the rest runs on while the caller reads metrics and prepares the
  // next batch.
  StatusOr<std::vector<Completion>> StartStep(const Batch& batch,
                                              const RowWriter& rows,
                                              KVStore* kv, std::string label);
  // StartStep's store ops, one per parameter, each writing its handle into
  // `handles`; returns the variables the step's last op holds.
  std::vector<Engine::Var*> PushStoreOps(
      KVStore* kv, const std::shared_ptr<std::vector<KVHandle>>& handles);
  // Waits for the oldest step in flight; its error names its batch.
  Status FinishOldestStep();
  // Waits for every step in flight and every executor pass.
  Status Drain();
  // Waits for the step's store results; a local optimizer then updates.
  Status FinishStep(KVStore* kv, const std::vector<KVHandle>& handles);
  // Initial values on the store, the same on every device and worker.
  Status SyncParams(KVStore* kv);
  // The store's values of every parameter, on every device.
  Status PullParams(KVStore* kv);
  // Rounds the parameters whose push-pull answers `kv` rounds
  // (KVStore::AnswersRounded) as it rounds them, on every device.
  Status RoundAsAnswered(const KVStore& kv);
  // The store's optimizer, or with update_on_kvstore off the workers' own
  // (local_optimizer_), from o.optimizer and the resumed states.
  Status SetUpOptimizer(KVStore* kv, const FitOptions& o, bool update_on_kvstore);
  // Fit's parts: its arguments checked; the store and optimizer set up
  // (returns whether the store keeps residuals); one epoch's steps; the
  // epoch's end (validation, report, checkpoint).
  struct FitRun;
  Status CheckFit(KVStore* kv, const FitOptions& o) const;
  StatusOr<bool> PrepareFit(KVStore* kv, const FitOptions& o);
  Status TrainEpoch(int epoch, FitRun* run);
  Status EndEpoch(int epoch, FitRun* run);
  // The checkpoint of `epoch` (0-based, the one just trained), if one is due.
  Status Checkpoint(int epoch, FitRun* run);
  // The number of batches of a training epoch (every worker's alike under
  // a synchronous store).
  int64_t EpochBatches(const FitRun& run) const;
  // The epoch's next batch, starting this worker's part over when it is
  // shorter than the epoch (an error if the data has no batch at all).
  Status NextTrainBatch(DataIter* train, int epoch, Batch* batch,
                        RowWriter* rows);
  int ParamIndex(const std::string& name) const;

  Symbol symbol_;
  ModuleOptions options_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Executor>> execs_;
  std::vector<Slice> slices_;
  std::vector<std::string> param_names_;
  std::vector<int> param_args_;  // argument index of each parameter
  int data_arg_ = -1, label_arg_ = -1;  // -1: on another rank
  int output_index_ = 0;                // -1: on another rank
  int64_t batch_size_ = 0;
  // The last Fit's optimizer when the workers update (null: the store's).
  std::unique_ptr<Optimizer> local_optimizer_;
  // Each parameter's id, under which local_optimizer_ keeps its state
  // (kvstore/keys.h StateKey, the device as its part).
  std::vector<uint64_t> state_ids_;
  std::deque<InFlight> in_flight_;
  // The step-by-step API: its store (PrepareSteps), and how far the
  // current step is.
  KVStore* steps_kv_ = nullptr;
  enum class StepState { kNone, kForward, kTrainForward, kBackward };
  StepState step_state_ = StepState::kNone;
};

}  // namespace kvtrain

#endif  // KVTRAIN_TRAINER_MODULE_H_
