// train_mnist: trains an MLP or LeNet on MNIST-format data (by default the
// bundled Fashion-MNIST) with any KVStore type, as one process or as every
// process of a job started by tracker/launch.py.
#include <cmath>
#include <cstdio>
#include <sstream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "base/env.h"
#include "engine/io/data_iter.h"
#include "engine/models.h"
#include "examples/example_flags.h"
#include "engine/symbol.h"
#include "trainer/module.h"
#include "compression/compression.h"
#include "kvstore/kvstore.h"

DEFINE_string(network, "mlp", "mlp (784-128-64-10, ReLU) or lenet");
DEFINE_string(kv_store, "local",
              "local, device, dist_sync, dist_device_sync, dist_async or dist_ssp");
DEFINE_string(gpus, "", "GPUs to train on, e.g. 0,1 (empty: the CPU)");
DEFINE_int32(cpus, 1, "CPU contexts to split each batch across (data parallelism)");
DEFINE_string(work_load_list, "", "relative batch share per device, e.g. 1,3");
DEFINE_int32(batch_size, 100, "examples per batch (per worker)");
DEFINE_int32(num_epochs, 10, "epochs to train");
DEFINE_int64(epoch_size, 0,
             "batches per epoch per worker (0: the largest part of the data; dist_async "
             "without --staleness: this worker's own part)");
DEFINE_string(model_prefix, "", "checkpoint prefix (P-symbol.txt, P-NNNN.params)");
DEFINE_int32(load_epoch, 0, "resume from the checkpoint of this epoch");
DEFINE_string(data_dir, kvtrain::kDefaultMnistDir, "MNIST-format data directory");
DEFINE_int64(num_examples, 0, "use only the first N training examples (0: all)");
DEFINE_string(metrics_file, "", "write metrics as JSON lines here");
DEFINE_string(loss_file, "", "write every training batch's cross-entropy here, one per line");
DEFINE_int32(disp_batches, 100, "speedometer period in batches (0: off)");
DEFINE_uint64(seed, 0, "seed of the initializer and the shuffle");
DEFINE_bool(update_on_kvstore, true,
            "the store applies the optimizer (else the workers); not given: the workers where "
            "the servers answer 2bit/1bit summed codes exactly as levels (dist_sync, 2 or more "
            "workers)");
DEFINE_string(gc_type, "none",
              "gradient compression of dist stores: none, 2bit, 1bit or fp16 "
              "(docs/kvstore.md)");
DEFINE_string(gc_threshold, "0.5",
              "the 2bit compression threshold (> 0), or auto (each array its own, from its "
              "values)");
DEFINE_int64(gc_min_bytes, 0, "arrays of fewer bytes travel uncompressed (0: none)");
DEFINE_string(gc_pull, "",
              "what push-pulls of compressed arrays bring back: float32 or fp16 (default: "
              "fp16 for --gc-type fp16, float32 otherwise)");

namespace kvtrain {
namespace {

StatusOr<std::vector<Device>> Devices() {
  if (FLAGS_gpus.empty()) {
    if (FLAGS_cpus < 1) return Status::InvalidArgument("--cpus must be at least 1");
    std::vector<Device> out;
    for (int i = 0; i < FLAGS_cpus; ++i) out.push_back(Device::CPU(i));
    return out;
  }
  KV_ASSIGN_OR_RETURN(std::vector<double> ids, ParseNumbers(FLAGS_gpus, "gpus"));
  std::vector<Device> out;
  for (double id : ids) {
    const Device d = Device::GPU(static_cast<int>(id));
    KV_RETURN_IF_ERROR(CheckDevice(d));
    out.push_back(d);
  }
  return out;
}

// Everything that can be checked before joining a job.
// Started as one of several MPI ranks (mpiexec -n 4 train_mnist) with a
// single-process store, each rank would train a model of its own.
Status CheckNotOneOfManyRanks() {
  if (FLAGS_kv_store != "local" && FLAGS_kv_store != "device") return Status::OK();
  const EnvLookup env = ProcessEnv();
  for (const char* var : {env::kOmpiSize, env::kPmiSize}) {
    StatusOr<int64_t> ranks = GetIntVar(env, var, 1, 1, 1 << 20);
    if (ranks.ok() && *ranks > 1) {
      return Status::FailedPrecondition(
          std::string("this process is one of ") + std::to_string(*ranks) + " MPI ranks (" +
          var + "=" + std::to_string(*ranks) + ") but --kv-store=" + FLAGS_kv_store +
          " trains a separate model in each; use --kv-store dist_allreduce to train one "
          "model on all ranks");
    }
  }
  return Status::OK();
}

Status CheckFlags() {
  if (FLAGS_network != "mlp" && FLAGS_network != "lenet") {
    return Status::InvalidArgument("--network=" + FLAGS_network + ": expected mlp or lenet");
  }
  if (FLAGS_batch_size < 1) {
    return Status::InvalidArgument("--batch-size=" + std::to_string(FLAGS_batch_size) +
                                   ": expected a positive number of examples");
  }
  if (FLAGS_load_epoch > 0 && FLAGS_model_prefix.empty()) {
    return Status::InvalidArgument("--load-epoch needs --model-prefix");
  }
  if (FLAGS_num_epochs < FLAGS_load_epoch) {
    return Status::InvalidArgument("--num-epochs is below --load-epoch");
  }
  if (FLAGS_epoch_size < 0) {
    return Status::InvalidArgument("--epoch-size=" + std::to_string(FLAGS_epoch_size) +
                                   ": expected a number of batches (0: the data's)");
  }
  KV_RETURN_IF_ERROR(CheckNotOneOfManyRanks());
  KV_RETURN_IF_ERROR(AsyncFlagsGiven(FLAGS_kv_store).status());
  KV_RETURN_IF_ERROR(kv::ParseCompression(FLAGS_gc_type, FLAGS_gc_threshold,
                                           FLAGS_gc_min_bytes, FLAGS_gc_pull)
                         .status()
                         .Annotate("--gc-type/--gc-threshold/--gc-min-bytes/--gc-pull"));
  return OptimizerFromFlags(1).status();
}

Status Train(KVStore* kv) {
  IterOptions io;
  io.batch_size = FLAGS_batch_size;
  io.shuffle = true;
  io.seed = FLAGS_seed;
  io.num_parts = kv->num_workers();
  io.part_index = kv->rank();
  io.flat = FLAGS_network == "mlp";
  io.num_examples = FLAGS_num_examples;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<DataIter> train, NewMnistIter(FLAGS_data_dir, true, io));
  IterOptions eo = io;
  eo.shuffle = false;
  eo.num_parts = 1;
  eo.part_index = 0;
  eo.num_examples = 0;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<DataIter> test, NewMnistIter(FLAGS_data_dir, false, eo));

  // Every worker of a sync job runs the same number of batches: the most
  // any part has (parts hold batch-sized chunks round-robin).
  const int64_t n = FLAGS_num_examples > 0 ? std::min<int64_t>(FLAGS_num_examples, 60000) : 60000;
  const int64_t chunks = (n + FLAGS_batch_size - 1) / FLAGS_batch_size;
  const int64_t epoch_size = (chunks + kv->num_workers() - 1) / kv->num_workers();

  const Symbol net = FLAGS_network == "mlp" ? models::Mlp({128, 64}) : models::LeNet();
  ModuleOptions mo;
  KV_ASSIGN_OR_RETURN(mo.devices, Devices());
  if (!FLAGS_work_load_list.empty()) {
    KV_ASSIGN_OR_RETURN(mo.work_load_list, ParseNumbers(FLAGS_work_load_list, "work-load-list"));
  }
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Module> module, Module::Create(net, mo));
  KV_RETURN_IF_ERROR(module->Bind(train->data_shape(), {FLAGS_batch_size}));
  FitOptions fo;
  ModelArrays loaded;
  if (FLAGS_load_epoch > 0) {
    KV_ASSIGN_OR_RETURN(loaded, LoadCheckpointParams(FLAGS_model_prefix, FLAGS_load_epoch));
    fo.begin_epoch = FLAGS_load_epoch;
    fo.resume_states = StatesPath(FLAGS_model_prefix, FLAGS_load_epoch);
    fo.resume_residuals = ResidualsPath(FLAGS_model_prefix, FLAGS_load_epoch, kv->rank());
    fo.resume_params = &loaded;
  }
  InitializerOptions init;
  init.type = InitializerOptions::Type::kXavier;
  init.seed = FLAGS_seed;
  KV_RETURN_IF_ERROR(module->InitParams(init, FLAGS_load_epoch > 0 ? &loaded : nullptr));
  fo.num_epochs = FLAGS_num_epochs;
  if (FLAGS_epoch_size > 0) {
    fo.epoch_size = FLAGS_epoch_size;
  } else {
    // Sync stores: every worker runs the same number of steps.
    fo.epoch_size = kv->lockstep() ? epoch_size : 0;
  }
  // The schedule counts updates: asynchronous stores make one per worker's
  // batch.
  const int64_t updates_per_epoch =
      (FLAGS_epoch_size > 0 ? FLAGS_epoch_size : epoch_size) *
      (kv->is_async() ? kv->num_workers() : 1);
  KV_ASSIGN_OR_RETURN(fo.optimizer, OptimizerFromFlags(updates_per_epoch));
  // Not given: FitOptions' default (the workers where the servers answer
  // summed 2bit/1bit codes as levels, the store elsewhere).
  if (!gflags::GetCommandLineFlagInfoOrDie("update_on_kvstore").is_default) {
    fo.update_on_kvstore = FLAGS_update_on_kvstore;
  }
  fo.metrics = {"accuracy", "cross-entropy"};
  fo.disp_batches = FLAGS_disp_batches;
  fo.metrics_file = FLAGS_metrics_file;
  fo.loss_file = FLAGS_loss_file;
  fo.model_prefix = FLAGS_model_prefix;
  KV_RETURN_IF_ERROR(module->Fit(train.get(), test.get(), kv, fo));
  KV_ASSIGN_OR_RETURN(MetricValues score, module->Score(test.get(), {"accuracy"}));
  std::printf("Test accuracy=%.4f\n", score[0].second);
  return Status::OK();
}

int Main() {
  Status s = CheckFlags();
  if (!s.ok()) {
    std::fprintf(stderr, "train_mnist: error: %s\n", s.message().c_str());
    return 2;
  }
  StatusOr<std::unique_ptr<KVStore>> kv = KVStore::Create(FLAGS_kv_store);
  if (!kv.ok()) {
    std::fprintf(stderr, "train_mnist: error: %s\n", kv.status().message().c_str());
    return 2;
  }
  if (!(*kv)->is_worker()) {
    s = (*kv)->RunServer();
    if (!s.ok()) std::fprintf(stderr, "train_mnist: error: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  const proto::GradientCompression gc =
      kv::ParseCompression(FLAGS_gc_type, FLAGS_gc_threshold,
                                           FLAGS_gc_min_bytes, FLAGS_gc_pull).value();
  if (gc.type() != proto::GradientCompression::NONE) {
    s = (*kv)->SetGradientCompression(gc);
    if (!s.ok()) {
      std::fprintf(stderr, "train_mnist: error: --gc-type %s: %s\n", FLAGS_gc_type.c_str(),
                   s.message().c_str());
      return 2;
    }
  }
  s = ApplyAsyncFlags(kv->get());
  if (!s.ok()) {
    std::fprintf(stderr, "train_mnist: error: %s\n", s.message().c_str());
    return 2;
  }
  s = Train(kv->get());
  if (!s.ok()) {
    std::fprintf(stderr, "train_mnist: error: %s\n", s.message().c_str());
    // Bad data paths are the user's: exit 2 like other usage errors.
    return s.code() == Status::Code::kNotFound ? 2 : 1;
  }
  s = (*kv)->Finalize();
  if (!s.ok()) std::fprintf(stderr, "train_mnist: error: %s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  kvtrain::ParseExampleFlags(
      &argc, &argv, "trains an MLP or LeNet on MNIST-format data; see README.md for examples");
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach launchers at once
  return kvtrain::Main();
}
