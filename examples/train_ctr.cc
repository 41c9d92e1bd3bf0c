// train_ctr: a wide-and-deep click-through-rate model on a LibSVM click log
// (tools/make_click_log.py writes one), its embedding tables row-sparse keys
// of the store: each batch pulls only its unique ids' rows, and pushes only
// their gradients. One process (--kv-store local) or every process of a job
// started by tracker/launch.py (dist_sync, dist_async).
//
// The model, per example of F ids (one per field):
//   deep: the F ids' rows of table "emb" (width --embed-dim), concatenated,
//         through a ReLU MLP (--hidden) to 2 logits;
//   wide: the sum over the F ids of their rows of table "wide" (width 2);
//   p(click) = softmax(deep + wide)[1].
// The executor sees the batch's unique rows as a small dense argument
// (capacity batch x F rows): the Embedding op looks rows up by their place
// in it, and its gradient is exactly the rows to push; no array of the
// table's size exists on a worker. The next batch is read, and its rows'
// pulls issued, while a step's pushes travel.
//
// Checkpoints (--model-prefix P, after every epoch, written by rank 0):
// P-symbol.txt, P-NNNN-emb.table and P-NNNN-wide.table (every server's
// shard: rows, optimizer state, admission counters), P-NNNN.states (the
// dense keys' optimizer state) and last P-NNNN.params (the dense weights,
// recording the states file's digest): the params file completes a
// checkpoint. --load-epoch N resumes from one, bit-exact.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "engine/executor.h"
#include "engine/io/libsvm.h"
#include "engine/symbol.h"
#include "base/file.h"
#include "examples/example_flags.h"
#include "kvstore/kvstore.h"
#include "ops/initializer.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"
#include "trainer/progress.h"

DEFINE_string(kv_store, "local", "local, device, dist_sync, dist_device_sync or dist_async");
DEFINE_string(train, "", "training click log (LibSVM text or its binary form)");
DEFINE_string(test, "", "held-out click log for AUC and log-loss (rank 0 evaluates)");
DEFINE_int32(fields, 8, "ids per example (one per field)");
DEFINE_int32(embed_dim, 16, "width of the deep part's embedding rows");
DEFINE_string(hidden, "128,64", "the deep part's hidden layers");
DEFINE_int32(batch_size, 256, "examples per batch (per worker)");
DEFINE_int32(num_epochs, 2, "epochs to train");
DEFINE_double(init_scale, 0.01, "standard deviation of the embedding rows' initial values");
DEFINE_int64(admit_after, 0, "create a table row at its n-th push (0: at once)");
DEFINE_string(model_prefix, "",
              "after each epoch rank 0 saves a checkpoint: P-NNNN.params (dense weights), "
              "P-NNNN.states, P-NNNN-emb.table and P-NNNN-wide.table");
DEFINE_int32(load_epoch, 0, "resume from the checkpoint of this epoch (needs --model-prefix)");
DEFINE_uint64(seed, 0, "seed of the initializers");
DEFINE_string(metrics_file, "", "write metrics as JSON lines here (tools/plot_metrics plots them)");
DEFINE_int32(disp_batches, 100, "speedometer period in batches (0: off)");

namespace kvtrain {
namespace {

using Clock = std::chrono::steady_clock;

Status CheckFlags() {
  if (FLAGS_train.empty()) return Status::InvalidArgument("--train is required (a click log)");
  if (FLAGS_fields < 1 || FLAGS_embed_dim < 1 || FLAGS_batch_size < 1) {
    return Status::InvalidArgument("--fields, --embed-dim and --batch-size must be >= 1");
  }
  if (static_cast<int64_t>(FLAGS_batch_size) * FLAGS_fields > (1 << 24)) {
    return Status::InvalidArgument("--batch-size x --fields must be at most 2^24");
  }
  if (FLAGS_load_epoch < 0 || (FLAGS_load_epoch > 0 && FLAGS_model_prefix.empty())) {
    return Status::InvalidArgument("--load-epoch=" + std::to_string(FLAGS_load_epoch) +
                                   " needs --model-prefix and an epoch >= 1");
  }
  if (FLAGS_load_epoch > FLAGS_num_epochs) {
    return Status::InvalidArgument("--load-epoch=" + std::to_string(FLAGS_load_epoch) +
                                   " is past --num-epochs=" + std::to_string(FLAGS_num_epochs));
  }
  return OptimizerFromFlags(1).status();
}

Symbol Model(int64_t capacity, const std::vector<double>& hidden) {
  const Symbol ids = Symbol::Variable("ids");
  Symbol deep = Symbol::Op("Embedding", "emb", {ids, Symbol::Variable("emb_rows")},
                           {{"input_dim", std::to_string(capacity)},
                            {"output_dim", std::to_string(FLAGS_embed_dim)}});
  deep = sym::Flatten(deep, "emb_flat");
  for (size_t i = 0; i < hidden.size(); ++i) {
    const std::string k = std::to_string(i + 1);
    deep = sym::Activation(sym::FullyConnected(deep, "fc" + k, static_cast<int>(hidden[i])),
                           "relu" + k, "relu");
  }
  deep = sym::FullyConnected(deep, "deep_out", 2);
  Symbol wide = Symbol::Op("Embedding", "wide", {ids, Symbol::Variable("wide_rows")},
                           {{"input_dim", std::to_string(capacity)}, {"output_dim", "2"}});
  // The sum over fields: a fixed 0/1 matrix, never trained.
  wide = Symbol::Op("FullyConnected", "wide_sum", {sym::Flatten(wide, "wide_flat")},
                    {{"num_hidden", "2"}, {"no_bias", "true"}});
  return sym::SoftmaxOutput(Symbol::Op("elemwise_add", "logits", {deep, wide}), "softmax");
}

std::string TablePath(const std::string& table, int epoch) {
  char n[16];
  std::snprintf(n, sizeof(n), "-%04d-", epoch);
  return FLAGS_model_prefix + n + table + ".table";
}

// The names of the dense parameters the store trains.
bool IsDenseParam(const std::string& name) {
  return name != "ids" && name != "softmax_label" && name != "emb_rows" &&
         name != "wide_rows" && name != "wide_sum_weight";
}

struct Batch {
  int64_t rows = 0;
  std::vector<float> labels;
  std::vector<int64_t> unique;  // the batch's ids without repeats
  std::vector<float> local;     // rows x F: each id's place in `unique`
};

// The next batch, or rows == 0 at the end. Every example must carry F ids.
StatusOr<Batch> NextBatch(LibSvmReader* reader) {
  SparseBatch sb;
  Batch b;
  KV_ASSIGN_OR_RETURN(bool more, reader->Next(&sb));
  if (!more) return b;
  b.rows = sb.rows();
  b.labels = sb.labels;
  b.local.resize(static_cast<size_t>(b.rows) * FLAGS_fields);
  std::unordered_map<int64_t, int64_t> index;
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t n = sb.offsets[r + 1] - sb.offsets[r];
    if (n != FLAGS_fields) {
      return Status::InvalidArgument(reader->path() + ": an example has " + std::to_string(n) +
                                     " ids, not --fields=" + std::to_string(FLAGS_fields));
    }
    for (int64_t f = 0; f < n; ++f) {
      const int64_t id = sb.ids[sb.offsets[r] + f];
      auto it = index.find(id);
      if (it == index.end()) {
        it = index.emplace(id, static_cast<int64_t>(b.unique.size())).first;
        b.unique.push_back(id);
      }
      b.local[r * FLAGS_fields + f] = static_cast<float>(it->second);
    }
  }
  return b;
}

Tensor IdTensor(const std::vector<int64_t>& ids) {
  Tensor t = Tensor::Empty(Shape({static_cast<int64_t>(ids.size())}), DType::kInt64);
  std::memcpy(t.data<int64_t>(), ids.data(), ids.size() * sizeof(int64_t));
  return t;
}

class Trainer {
 public:
  Trainer(KVStore* kv, std::unique_ptr<Executor> exec) : kv_(kv), exec_(std::move(exec)) {}

  // `resume`: the dense weights of the checkpoint to go on from, or null.
  Status Init(const ModelArrays* resume) {
    const int64_t b = FLAGS_batch_size;
    KV_ASSIGN_OR_RETURN(ids_, exec_->Arg("ids"));
    KV_ASSIGN_OR_RETURN(label_, exec_->Arg("softmax_label"));
    KV_ASSIGN_OR_RETURN(emb_rows_, exec_->Arg("emb_rows"));
    KV_ASSIGN_OR_RETURN(wide_rows_, exec_->Arg("wide_rows"));
    KV_ASSIGN_OR_RETURN(emb_grad_, exec_->Grad("emb_rows"));
    KV_ASSIGN_OR_RETURN(wide_grad_, exec_->Grad("wide_rows"));
    KV_ASSIGN_OR_RETURN(Tensor select, exec_->Arg("wide_sum_weight"));
    // (2, 2F): logit c sums column f*2 + c.
    KV_RETURN_IF_ERROR(select.SetZero());
    for (int f = 0; f < FLAGS_fields; ++f) {
      for (int c = 0; c < 2; ++c) select.data<float>()[c * 2 * FLAGS_fields + f * 2 + c] = 1;
    }
    InitializerOptions io;
    io.type = InitializerOptions::Type::kXavier;
    io.seed = FLAGS_seed;
    KV_ASSIGN_OR_RETURN(Initializer init, Initializer::Create(io));
    for (size_t i = 0; i < exec_->arg_names().size(); ++i) {
      const std::string& name = exec_->arg_names()[i];
      if (!IsDenseParam(name)) continue;
      Tensor w = exec_->arg_arrays()[i];
      if (resume != nullptr) {
        auto it = resume->args.find(name);
        if (it == resume->args.end() || it->second.shape() != w.shape()) {
          return Status::InvalidArgument(
              resume->source + ": " +
              (it == resume->args.end() ? "has no " + name
                                        : name + " is " + it->second.shape().ToString() +
                                              ", this model's is " + w.shape().ToString()) +
              " (another model's checkpoint?)");
        }
        KV_RETURN_IF_ERROR(w.CopyFrom(it->second));
      } else {
        KV_RETURN_IF_ERROR(init.Init(name, &w));
      }
      keys_.push_back(name);
      weights_.push_back(w);
      grads_.push_back(exec_->grad_arrays()[i]);
    }
    KV_RETURN_IF_ERROR(kv_->Init(keys_, weights_));
    KV_RETURN_IF_ERROR(kv_->Pull(keys_, weights_));  // rank 0's values
    proto::SparseTableSpec emb;
    emb.set_width(FLAGS_embed_dim);
    emb.set_init(proto::SparseTableSpec::NORMAL);
    emb.set_scale(static_cast<float>(FLAGS_init_scale));
    emb.set_seed(FLAGS_seed);
    emb.set_admit_after(FLAGS_admit_after);
    KV_RETURN_IF_ERROR(kv_->InitRowSparse("emb", emb));
    proto::SparseTableSpec wide;
    wide.set_width(2);
    wide.set_admit_after(FLAGS_admit_after);
    KV_RETURN_IF_ERROR(kv_->InitRowSparse("wide", wide));
    KV_ASSIGN_OR_RETURN(proto::OptimizerSpec spec, OptimizerFromFlags(1));
    const int replicas = kv_->sums_workers() ? kv_->num_workers() : 1;
    spec.set_rescale_grad(1.0f / static_cast<float>(b * replicas));
    KV_RETURN_IF_ERROR(kv_->SetOptimizer(spec));
    if (resume == nullptr) return Status::OK();
    if (kv_->rank() == 0) {
      const std::string states = StatesPath(FLAGS_model_prefix, FLAGS_load_epoch);
      KV_RETURN_IF_ERROR(CheckStatesBelong(states, *resume));
      KV_RETURN_IF_ERROR(kv_->LoadOptimizerStates(states));
      KV_RETURN_IF_ERROR(kv_->LoadRowSparse("emb", TablePath("emb", FLAGS_load_epoch)));
      KV_RETURN_IF_ERROR(kv_->LoadRowSparse("wide", TablePath("wide", FLAGS_load_epoch)));
    }
    return kv_->Barrier();
  }

  // Rank 0, after `epoch` epochs with every push waited for: the tables and
  // the dense keys' states, then the params file that completes the set.
  Status Save(const Symbol& symbol, int epoch) {
    if (!std::ifstream(SymbolPath(FLAGS_model_prefix))) {
      KV_ASSIGN_OR_RETURN(std::string text, symbol.ToText());
      KV_RETURN_IF_ERROR(WriteFileAtomic(SymbolPath(FLAGS_model_prefix), text));
    }
    KV_RETURN_IF_ERROR(kv_->SaveRowSparse("emb", TablePath("emb", epoch)));
    KV_RETURN_IF_ERROR(kv_->SaveRowSparse("wide", TablePath("wide", epoch)));
    const std::string states = StatesPath(FLAGS_model_prefix, epoch);
    KV_RETURN_IF_ERROR(kv_->SaveOptimizerStates(states));
    KV_ASSIGN_OR_RETURN(std::string states_bytes, ReadWholeFile(states));
    ModelArrays arrays;
    for (size_t i = 0; i < keys_.size(); ++i) arrays.args[keys_[i].name()] = weights_[i];
    return SaveParams(ParamsPath(FLAGS_model_prefix, epoch), arrays, epoch,
                      StatesDigest(states_bytes));
  }

  // Loads the batch's inputs into the executor and starts the pulls of its
  // unique rows (their handles are added to `hs`).
  Status StartLoad(const Batch& b, std::vector<KVHandle>* hs) {
    KV_RETURN_IF_ERROR(ids_.SetZero());
    KV_RETURN_IF_ERROR(label_.SetZero());
    std::memcpy(ids_.data<float>(), b.local.data(), b.local.size() * sizeof(float));
    std::memcpy(label_.data<float>(), b.labels.data(), b.labels.size() * sizeof(float));
    const int64_t n = static_cast<int64_t>(b.unique.size());
    const Tensor uid = IdTensor(b.unique);
    KV_ASSIGN_OR_RETURN(Tensor emb, emb_rows_.Slice(0, n));
    KV_ASSIGN_OR_RETURN(Tensor wide, wide_rows_.Slice(0, n));
    KV_ASSIGN_OR_RETURN(KVHandle h, kv_->RowSparsePullAsync("emb", uid, emb));
    hs->push_back(h);
    KV_ASSIGN_OR_RETURN(h, kv_->RowSparsePullAsync("wide", uid, wide));
    hs->push_back(h);
    return Status::OK();
  }

  Status Load(const Batch& b) {
    std::vector<KVHandle> hs;
    KV_RETURN_IF_ERROR(StartLoad(b, &hs));
    for (KVHandle h : hs) KV_RETURN_IF_ERROR(kv_->Wait(h));
    return Status::OK();
  }

  // One step on `b`, whose rows are loaded; returns the batch's summed
  // log-loss. With `next`, its rows are pulled while this step's pushes
  // travel (a pull issued after the push: in dist_sync it is answered with
  // this step's update applied), so they are loaded on return.
  StatusOr<double> Step(const Batch& b, const Batch* next) {
    KV_RETURN_IF_ERROR(exec_->Forward(true));
    KV_RETURN_IF_ERROR(exec_->Backward());
    const int64_t n = static_cast<int64_t>(b.unique.size());
    const Tensor uid = IdTensor(b.unique);
    KV_ASSIGN_OR_RETURN(Tensor eg, emb_grad_.Slice(0, n));
    KV_ASSIGN_OR_RETURN(Tensor wg, wide_grad_.Slice(0, n));
    std::vector<KVHandle> hs;
    KV_ASSIGN_OR_RETURN(KVHandle h, kv_->PushRowSparseAsync("emb", uid, eg));
    hs.push_back(h);
    KV_ASSIGN_OR_RETURN(h, kv_->PushRowSparseAsync("wide", uid, wg));
    hs.push_back(h);
    KV_ASSIGN_OR_RETURN(h, kv_->PushPullAsync(keys_, grads_, weights_));
    hs.push_back(h);
    const double loss = LogLossSum(b);
    if (next != nullptr) KV_RETURN_IF_ERROR(StartLoad(*next, &hs));
    for (KVHandle x : hs) KV_RETURN_IF_ERROR(kv_->Wait(x));
    return loss;
  }

  // Click probabilities of `b` (forward only).
  StatusOr<std::vector<float>> Predict(const Batch& b) {
    KV_RETURN_IF_ERROR(Load(b));
    KV_RETURN_IF_ERROR(exec_->Forward(false));
    const float* p = exec_->outputs()[0].data<float>();
    std::vector<float> out(static_cast<size_t>(b.rows));
    for (int64_t r = 0; r < b.rows; ++r) out[static_cast<size_t>(r)] = p[2 * r + 1];
    return out;
  }

 private:
  double LogLossSum(const Batch& b) const {
    const float* p = exec_->outputs()[0].data<float>();
    std::vector<float> probs(static_cast<size_t>(b.rows));
    for (int64_t r = 0; r < b.rows; ++r) probs[static_cast<size_t>(r)] = p[2 * r + 1];
    return LogLoss(b.labels, probs) * static_cast<double>(b.rows);
  }

  KVStore* kv_;
  std::unique_ptr<Executor> exec_;
  Tensor ids_, label_, emb_rows_, wide_rows_, emb_grad_, wide_grad_;
  std::vector<Key> keys_;
  std::vector<Tensor> weights_, grads_;
};

// Test AUC and log-loss over --test (empty without one).
StatusOr<MetricValues> Evaluate(Trainer* t) {
  std::vector<float> labels, probs;
  if (FLAGS_test.empty()) return MetricValues{};
  LibSvmOptions o;
  o.batch_size = FLAGS_batch_size;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<LibSvmReader> reader, LibSvmReader::Open(FLAGS_test, o));
  while (true) {
    KV_ASSIGN_OR_RETURN(Batch b, NextBatch(reader.get()));
    if (b.rows == 0) break;
    KV_ASSIGN_OR_RETURN(std::vector<float> p, t->Predict(b));
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
    probs.insert(probs.end(), p.begin(), p.end());
  }
  return MetricValues{{"auc", BinaryAuc(labels, probs)}, {"log-loss", LogLoss(labels, probs)}};
}

Status Train(KVStore* kv) {
  KV_ASSIGN_OR_RETURN(std::vector<double> hidden, ParseNumbers(FLAGS_hidden, "hidden"));
  const int64_t b = FLAGS_batch_size, capacity = b * FLAGS_fields;
  ExecutorOptions eo;
  const Symbol model = Model(capacity, hidden);
  KV_ASSIGN_OR_RETURN(
      std::unique_ptr<Executor> exec,
      Executor::SimpleBind(model, eo,
                           {{"ids", Shape({b, FLAGS_fields})},
                            {"softmax_label", Shape({b})},
                            {"emb_rows", Shape({capacity, FLAGS_embed_dim})},
                            {"wide_rows", Shape({capacity, 2})},
                            {"wide_sum_weight", Shape({2, 2 * FLAGS_fields})}},
                           {{"emb_rows", GradReq::kWrite},
                            {"wide_rows", GradReq::kWrite}}));
  Trainer trainer(kv, std::move(exec));
  ModelArrays resume;
  if (FLAGS_load_epoch > 0) {
    KV_ASSIGN_OR_RETURN(resume, LoadCheckpointParams(FLAGS_model_prefix, FLAGS_load_epoch));
  }
  KV_RETURN_IF_ERROR(trainer.Init(FLAGS_load_epoch > 0 ? &resume : nullptr));
  LibSvmOptions o;
  o.batch_size = FLAGS_batch_size;
  // Every worker takes the same number of full batches (dist_sync counts
  // one push per worker and step): whole rounds of num_workers batches.
  o.drop_last = true;
  o.num_parts = kv->num_workers();
  o.part_index = kv->rank();
  KV_ASSIGN_OR_RETURN(int64_t total, CountLibSvmRows(FLAGS_train));
  const int64_t steps = total / b / kv->num_workers();
  if (steps == 0) {
    return Status::InvalidArgument(FLAGS_train + " has " + std::to_string(total) +
                                   " examples, fewer than one batch per worker");
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<LibSvmReader> reader, LibSvmReader::Open(FLAGS_train, o));
  KV_ASSIGN_OR_RETURN(
      Progress progress,
      Progress::Create(FLAGS_disp_batches, kv->rank() == 0 ? FLAGS_metrics_file : "",
                       kv->is_distributed() ? kv->rank() : -1));
  for (int epoch = FLAGS_load_epoch; epoch < FLAGS_num_epochs; ++epoch) {
    KV_RETURN_IF_ERROR(reader->Reset());
    progress.StartEpoch(epoch, steps);
    double loss = 0;
    int64_t rows = 0;
    auto read = [&]() -> StatusOr<Batch> {
      KV_ASSIGN_OR_RETURN(Batch batch, NextBatch(reader.get()));
      if (batch.rows == 0) return Status::Internal(FLAGS_train + " ended early");
      return batch;
    };
    KV_ASSIGN_OR_RETURN(Batch batch, read());
    KV_RETURN_IF_ERROR(trainer.Load(batch));
    for (int64_t step = 0; step < steps; ++step) {
      Batch next;
      if (step + 1 < steps) {
        KV_ASSIGN_OR_RETURN(next, read());
      }
      KV_ASSIGN_OR_RETURN(double l, trainer.Step(batch, step + 1 < steps ? &next : nullptr));
      loss += l;
      rows += batch.rows;
      progress.Batch(step + 1, batch.rows, {{"log-loss", loss / static_cast<double>(rows)}});
      batch = std::move(next);
    }
    progress.EndTraining();
    KV_RETURN_IF_ERROR(kv->Barrier());
    if (kv->rank() == 0) {
      KV_ASSIGN_OR_RETURN(MetricValues test, Evaluate(&trainer));
      progress.EndEpoch({{"log-loss", loss / static_cast<double>(std::max<int64_t>(rows, 1))}},
                        test);
      if (!FLAGS_model_prefix.empty()) {
        KV_RETURN_IF_ERROR(trainer.Save(model, epoch + 1)
                               .Annotate("checkpoint of epoch " + std::to_string(epoch + 1)));
      }
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
  }
  if (kv->rank() == 0) {
    KV_ASSIGN_OR_RETURN(std::vector<proto::SparseTableStats> stats, kv->RowSparseStats("emb"));
    int64_t held = 0, created = 0, dropped = 0;
    for (const auto& s : stats) {
      held += s.rows();
      created += s.created();
      dropped += s.dropped_grads();
    }
    std::printf("table emb: %lld rows held over %zu shard(s), %lld created, %lld gradient rows "
                "dropped before admission\n",
                static_cast<long long>(held), stats.size(), static_cast<long long>(created),
                static_cast<long long>(dropped));
  }
  return Status::OK();
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  kvtrain::ParseExampleFlags(&argc, &argv,
                             "train_ctr --train=LOG [--test=LOG] [--kv-store=dist_sync] ...");
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  kvtrain::Status s = kvtrain::CheckFlags();
  if (!s.ok()) {
    std::fprintf(stderr, "train_ctr: %s\n", s.message().c_str());
    return 2;
  }
  kvtrain::StatusOr<std::unique_ptr<kvtrain::KVStore>> kv = kvtrain::KVStore::Create(FLAGS_kv_store);
  if (!kv.ok()) {
    std::fprintf(stderr, "train_ctr: %s\n", kv.status().ToString().c_str());
    return 2;
  }
  if (!(*kv)->is_worker()) {
    s = (*kv)->RunServer();
  } else {
    s = kvtrain::Train(kv->get());
    if (s.ok()) {
      s = (*kv)->Finalize();
    } else {
      (*kv)->Abort(s.ToString());
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "train_ctr: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
