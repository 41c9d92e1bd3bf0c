// The example trainers' shared flags and parsing (example_flags.h).
#include "examples/example_flags.h"

#include <cstdlib>
#include <map>
#include <sstream>

#include <gflags/gflags.h>

DEFINE_string(optimizer, "sgd",
              "sgd, nag, adam, adagrad, ftrl, rmsprop, signum, adamax or adadelta");
DEFINE_double(lr, 0.05, "learning rate");
DEFINE_double(momentum, 0.9, "momentum (sgd, nag, signum)");
DEFINE_double(wd, 0.0001, "weight decay");
DEFINE_double(lr_factor, 0.2, "multiply the learning rate by this ...");
DEFINE_string(lr_step_epochs, "6,8", "... after these epochs (empty: never)");
DEFINE_int64(staleness, -1,
             "dist_async/dist_ssp: no worker runs more than this many steps ahead of the "
             "slowest (-1: the store's default: 2 for dist_ssp, unbounded for dist_async)");
DEFINE_string(async_lr, "constant",
              "dist_async/dist_ssp: constant, or staleness (each push's step, lr / (1 - "
              "momentum), divided by 1 + the updates its weights missed)");

DECLARE_bool(help);
DECLARE_string(helpmatch);

namespace kvtrain {

void ParseExampleFlags(int* argc, char*** argv, const std::string& usage) {
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineNonHelpFlags(argc, argv, true);
  if (FLAGS_help) {
    // The flags defined in files under examples/ (gflags matches the
    // defining file's path).
    FLAGS_help = false;
    FLAGS_helpmatch = "examples/";
  }
  gflags::HandleCommandLineHelpFlags();
}

StatusOr<std::vector<double>> ParseNumbers(const std::string& text, const char* flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0') {
      return Status::InvalidArgument(std::string("--") + flag + "=" + text +
                                     ": expected comma-separated numbers");
    }
    out.push_back(v);
  }
  return out;
}

StatusOr<bool> AsyncFlagsGiven(const std::string& kv_store) {
  if (FLAGS_async_lr != "constant" && FLAGS_async_lr != "staleness") {
    return Status::InvalidArgument("--async-lr=" + FLAGS_async_lr +
                                   ": expected constant or staleness");
  }
  if (FLAGS_staleness < -1) {
    return Status::InvalidArgument("--staleness=" + std::to_string(FLAGS_staleness) +
                                   ": expected a number of steps >= 0 (-1: the store's default)");
  }
  const bool given = FLAGS_staleness >= 0 || FLAGS_async_lr != "constant";
  if (given && kv_store != "dist_async" && kv_store != "dist_ssp") {
    return Status::InvalidArgument(
        "--staleness and --async-lr are for the asynchronous stores (dist_async, dist_ssp), "
        "not --kv-store=" + kv_store);
  }
  return given;
}

Status ApplyAsyncFlags(KVStore* kv) {
  KV_ASSIGN_OR_RETURN(const bool given, AsyncFlagsGiven(kv->type()));
  if (!given) return Status::OK();
  AsyncOptions o = kv->async_options();
  if (FLAGS_staleness >= 0) o.staleness = FLAGS_staleness;
  o.staleness_lr = FLAGS_async_lr == "staleness";
  return kv->SetAsyncOptions(o).Annotate("--staleness/--async-lr");
}

StatusOr<proto::OptimizerSpec> OptimizerFromFlags(int64_t batches_per_epoch) {
  proto::OptimizerSpec spec;
  const std::map<std::string, proto::OptimizerSpec::Type> types = {
      {"sgd", proto::OptimizerSpec::SGD}, {"nag", proto::OptimizerSpec::NAG},
      {"adam", proto::OptimizerSpec::ADAM}, {"adagrad", proto::OptimizerSpec::ADAGRAD},
      {"ftrl", proto::OptimizerSpec::FTRL}, {"rmsprop", proto::OptimizerSpec::RMSPROP},
      {"signum", proto::OptimizerSpec::SIGNUM}, {"adamax", proto::OptimizerSpec::ADAMAX},
      {"adadelta", proto::OptimizerSpec::ADADELTA}};
  auto it = types.find(FLAGS_optimizer);
  if (it == types.end()) {
    return Status::InvalidArgument("--optimizer=" + FLAGS_optimizer +
                                   ": expected sgd, nag, adam, adagrad, ftrl, rmsprop, signum, "
                                   "adamax or adadelta");
  }
  spec.set_type(it->second);
  spec.set_learning_rate(static_cast<float>(FLAGS_lr));
  if (it->second == proto::OptimizerSpec::SGD || it->second == proto::OptimizerSpec::NAG ||
      it->second == proto::OptimizerSpec::SIGNUM) {
    spec.set_momentum(static_cast<float>(FLAGS_momentum));
  }
  spec.set_weight_decay(static_cast<float>(FLAGS_wd));
  if (!FLAGS_lr_step_epochs.empty() && FLAGS_lr_factor != 1.0) {
    KV_ASSIGN_OR_RETURN(std::vector<double> epochs,
                        ParseNumbers(FLAGS_lr_step_epochs, "lr-step-epochs"));
    proto::LrSchedule* s = spec.mutable_lr_schedule();
    s->set_type(proto::LrSchedule::MULTI_FACTOR);
    s->set_factor(static_cast<float>(FLAGS_lr_factor));
    for (double e : epochs) s->add_steps(static_cast<int64_t>(e) * batches_per_epoch);
  }
  return spec;
}

}  // namespace kvtrain
