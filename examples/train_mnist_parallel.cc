// train_mnist_model_parallel and train_mnist_dual_parallel (this file built
// twice): the MLP of train_mnist split across processes as ChainerMN's
// model-parallel MNIST example does.
//
// Model parallelism (exactly 2 processes): rank 0 holds the data, fc1+relu1
// and the output layer (softmax, where the loss is computed); rank 1 holds
// the other layers. Rank 0 sends fc1's activation to rank 1 and receives
// the last layer's output back; backward sends the gradients the other way.
//
// Dual parallelism (N = 2 x R processes): R data replicas of the 2-shard
// model. Rank r is shard r % 2 of replica r / 2, so ranks (0, 1), (2, 3), ...
// each form one model; the R replicas of a shard read different parts of
// the data and sum their gradients with a dist_allreduce KVStore over their
// own sub-group (a dist_sync server expects every worker to push every key,
// which replicas of different shards do not).
//
// Runs under tracker/launch.py -s 0 (the scheduler process serves the
// rendezvous) or mpirun/mpiexec.
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "engine/io/data_iter.h"
#include "engine/models.h"
#include "examples/example_flags.h"
#include "engine/symbol.h"
#include "trainer/module.h"
#include "transport/collective/communicator.h"
#include "kvstore/kvstore.h"

#ifndef KV_DUAL_PARALLEL
#define KV_DUAL_PARALLEL 0
#endif

DEFINE_int32(batch_size, 100, "examples per batch (per data replica)");
DEFINE_int32(num_epochs, 10, "epochs to train");
DEFINE_string(model_prefix, "",
              "checkpoint prefix; each model shard s writes P-shard<s>-NNNN.params");
DEFINE_int32(load_epoch, 0, "resume from the checkpoints of this epoch");
DEFINE_string(data_dir, kvtrain::kDefaultMnistDir, "MNIST-format data directory");
DEFINE_int64(num_examples, 0, "use only the first N training examples (0: all)");
DEFINE_string(metrics_file, "", "write metrics as JSON lines here (rank 0)");
DEFINE_string(loss_file, "",
              "write every training batch's cross-entropy here, one per line "
              "(dual: one file per replica, <file>.replica<k>)");
DEFINE_int32(disp_batches, 100, "speedometer period in batches (0: off)");
DEFINE_uint64(seed, 0, "seed of the initializer and the shuffle");
DEFINE_bool(update_on_kvstore, true, "the store applies the optimizer (else the workers)");
DEFINE_int32(peer_timeout_s, 120, "longest wait for an activation or gradient from a peer");

namespace kvtrain {
namespace {

constexpr bool kDual = KV_DUAL_PARALLEL;
constexpr const char* kProgram =
    kDual ? "train_mnist_dual_parallel" : "train_mnist_model_parallel";
constexpr int kShards = 2;

int Fail(const Status& s, int code) {
  std::fprintf(stderr, "%s: error: %s\n", kProgram, s.message().c_str());
  return code;
}

Status CheckFlags() {
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
  if (FLAGS_peer_timeout_s < 1) {
    return Status::InvalidArgument("--peer-timeout-s must be at least 1");
  }
  return OptimizerFromFlags(1).status();
}

// The process count this program accepts.
Status CheckSize(int size) {
  if (!kDual && size != 2) {
    return Status::InvalidArgument("this example needs exactly 2 processes, got " +
                                   std::to_string(size));
  }
  if (kDual && (size < 2 || size % 2 != 0)) {
    return Status::InvalidArgument(
        "this example needs an even number of processes (2 model shards x N/2 data "
        "replicas), got " + std::to_string(size));
  }
  return Status::OK();
}

// Where this process sits: its model shard and data replica, the link to
// the other shard of its replica, and the store that syncs its shard.
struct Placement {
  int shard = 0, replica = 0, replicas = 1;
  std::shared_ptr<collective::Communicator> model;
  std::unique_ptr<KVStore> kv;
};

StatusOr<Placement> Place(const std::shared_ptr<collective::Communicator>& world) {
  Placement p;
  p.shard = world->rank() % kShards;
  p.replica = world->rank() / kShards;
  p.replicas = world->size() / kShards;
#if !KV_DUAL_PARALLEL
  p.model = world;
  KV_ASSIGN_OR_RETURN(p.kv, KVStore::Create("local"));
#else
  // Both splits run on every rank, in the same order.
  KV_ASSIGN_OR_RETURN(p.model, world->Split(p.replica, p.shard));
  KV_ASSIGN_OR_RETURN(std::shared_ptr<collective::Communicator> data,
                      world->Split(p.shard, p.replica));
  KV_ASSIGN_OR_RETURN(p.kv, CreateAllreduceKVStore(data));
#endif
  return p;
}

std::string ShardPrefix(int shard) {
  return FLAGS_model_prefix + "-shard" + std::to_string(shard);
}

Status Train(Placement* p) {
  const bool has_data = p->shard == 0;  // models::MlpTwoStages puts data on stage0
  IterOptions io;
  io.batch_size = FLAGS_batch_size;
  io.shuffle = true;
  io.seed = FLAGS_seed;
  io.num_parts = p->replicas;
  io.part_index = p->replica;
  io.flat = true;
  io.num_examples = FLAGS_num_examples;
  const int64_t n = FLAGS_num_examples > 0 ? std::min<int64_t>(FLAGS_num_examples, 60000) : 60000;
  const int64_t chunks = (n + FLAGS_batch_size - 1) / FLAGS_batch_size;
  const int64_t epoch_size = (chunks + p->replicas - 1) / p->replicas;
  std::unique_ptr<DataIter> train, test;
  // The shard without the data runs the same steps on stand-in batches.
  int64_t test_batches = 0;
  if (has_data) {
    KV_ASSIGN_OR_RETURN(train, NewMnistIter(FLAGS_data_dir, true, io));
    IterOptions eo = io;
    eo.shuffle = false;
    eo.num_parts = 1;
    eo.part_index = 0;
    eo.num_examples = 0;
    KV_ASSIGN_OR_RETURN(test, NewMnistIter(FLAGS_data_dir, false, eo));
    test_batches = test->num_batches();
  }
  KV_RETURN_IF_ERROR(p->model->Broadcast(0, &test_batches, sizeof(test_batches)));
  const Shape data_shape({FLAGS_batch_size, 784});
  if (!has_data) {
    KV_ASSIGN_OR_RETURN(train, NewSyntheticIter(data_shape, 10, epoch_size, 0));
    KV_ASSIGN_OR_RETURN(test, NewSyntheticIter(data_shape, 10, test_batches, 0));
  }

  ModuleOptions mo;
  mo.peer_link = p->model.get();
  mo.group2rank = {{"stage0", 0}, {"stage1", 1}};
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Module> module,
                      Module::Create(models::MlpTwoStages({128, 64}), mo));
  KV_RETURN_IF_ERROR(module->Bind(data_shape, {FLAGS_batch_size}));
  FitOptions fo;
  ModelArrays loaded;
  if (FLAGS_load_epoch > 0) {
    KV_ASSIGN_OR_RETURN(loaded, LoadCheckpointParams(ShardPrefix(p->shard), FLAGS_load_epoch));
    fo.begin_epoch = FLAGS_load_epoch;
    fo.resume_states = StatesPath(ShardPrefix(p->shard), FLAGS_load_epoch);
    fo.resume_params = &loaded;
  }
  InitializerOptions init;
  init.type = InitializerOptions::Type::kXavier;
  init.seed = FLAGS_seed;
  KV_RETURN_IF_ERROR(module->InitParams(init, FLAGS_load_epoch > 0 ? &loaded : nullptr));
  fo.num_epochs = FLAGS_num_epochs;
  fo.epoch_size = epoch_size;
  KV_ASSIGN_OR_RETURN(fo.optimizer, OptimizerFromFlags(epoch_size));
  fo.update_on_kvstore = FLAGS_update_on_kvstore;
  fo.metrics = {"accuracy", "cross-entropy"};
  // One report per job: from replica 0's output rank.
  const bool reports = p->replica == 0;
  fo.disp_batches = reports ? FLAGS_disp_batches : 0;
  fo.metrics_file = reports ? FLAGS_metrics_file : "";
  fo.loss_file = FLAGS_loss_file;
  if (kDual && !FLAGS_loss_file.empty()) {
    fo.loss_file += ".replica" + std::to_string(p->replica);
  }
  if (!FLAGS_model_prefix.empty()) fo.model_prefix = ShardPrefix(p->shard);
  KV_RETURN_IF_ERROR(module->Fit(train.get(), test.get(), p->kv.get(), fo));
  KV_ASSIGN_OR_RETURN(MetricValues score, module->Score(test.get(), {"accuracy"}));
  if (module->has_output() && reports) std::printf("Test accuracy=%.4f\n", score[0].second);
  return Status::OK();
}

int Main() {
  Status s = CheckFlags();
  if (!s.ok()) return Fail(s, 2);
  const char* role = std::getenv("DMLC_ROLE");
  if (role != nullptr && std::string(role) == "scheduler") {
    s = collective::Communicator::ServeRendezvous();
    return s.ok() ? 0 : Fail(s, 1);
  }
  if (role != nullptr && std::string(role) == "server") {
    return Fail(Status::InvalidArgument("this example has no parameter servers: launch it "
                                        "with -s 0"), 2);
  }
  StatusOr<std::shared_ptr<collective::Communicator>> world =
      collective::Communicator::CreateFromEnv();
  if (!world.ok()) return Fail(world.status(), 1);
  // Every rank sees the same size, so every rank stops here alike.
  s = CheckSize((*world)->size());
  if (!s.ok()) return Fail(s, 2);
  StatusOr<Placement> p = Place(*world);
  if (!p.ok()) return Fail(p.status(), 1);
  s = Train(&*p);
  if (!s.ok()) return Fail(s, s.code() == Status::Code::kNotFound ? 2 : 1);
  // Nobody leaves while a peer may still read from it; then the store
  // (which closes the connections) finishes.
  s = (*world)->Barrier();
  if (s.ok()) s = p->kv->Finalize();
  if (!s.ok()) return Fail(s, 1);
  return 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  kvtrain::ParseExampleFlags(
      &argc, &argv,
      std::string("trains the MLP split across processes (") + kvtrain::kProgram +
          "); see README.md");
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return kvtrain::Main();
}
