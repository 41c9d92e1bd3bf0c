// train_bench: training throughput (samples/s) of the MLP 784-128-64-10 and
// LeNet, one step = forward + softmax loss + backward + SGD (momentum 0.9)
// update, data already in memory. Measures kvtrain and, side by side in the
// same run, the same networks in PyTorch (bench/torch_bench.py, skipped when
// torch is absent), and prints the ratio. GPU rows when a GPU is present.
#include <sched.h>
#include <stdio.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gflags/gflags.h>

#include "engine/executor.h"
#include "engine/models.h"
#include "ops/initializer.h"
#include "ops/optimizer.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

DEFINE_string(nets, "mlp,lenet", "networks to train: mlp, lenet");
DEFINE_string(threads, "1,2", "CPU thread counts to measure");
DEFINE_int32(batch, 100, "CPU batch size");
DEFINE_string(gpu_batches, "100,1024", "GPU batch sizes (when a GPU exists)");
DEFINE_double(seconds, 2.0, "measuring time of one repetition");
DEFINE_int32(repeats, 3, "repetitions per row; the best is reported (the "
             "machine is shared, so the best is the least disturbed)");
DEFINE_bool(gpu_cudnn, true,
            "on GPUs, also measure kvtrain with cuDNN for Convolution, and "
            "for every op that has a cuDNN path (cudnn_off=false)");
DEFINE_bool(torch, true, "also measure PyTorch (bench/torch_bench.py)");
DEFINE_string(python, "/usr/bin/python3", "the Python that has torch");
DEFINE_string(torch_script, "",
              "path of torch_bench.py (default: found in the runfiles)");

namespace kvtrain {
namespace {

std::vector<int> ParseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (!part.empty()) out.push_back(std::stoi(part));
  }
  return out;
}

std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

// Which GPU ops use cuDNN (the ops that have a cuDNN path).
enum class Dnn { kNone, kConvOnly, kAll };

// The benchmark network, with cudnn_off=false on the ops `dnn` names.
StatusOr<Symbol> Network(const std::string& net, Dnn dnn) {
  const Symbol sym = net == "mlp" ? models::Mlp({128, 64}) : models::LeNet();
  if (dnn == Dnn::kNone) return sym;
  KV_ASSIGN_OR_RETURN(std::string text, sym.ToText());
  for (const char* op : {"Convolution", "Pooling", "Activation",
                         "SoftmaxOutput", "BatchNorm"}) {
    if (dnn == Dnn::kConvOnly && std::string(op) != "Convolution") continue;
    const std::string tag = std::string("op: \"") + op + "\"";
    for (size_t at = text.find(tag); at != std::string::npos;
         at = text.find(tag, at + 1)) {
      text.insert(at + tag.size(),
                  "\n  attrs { key: \"cudnn_off\" value: \"false\" }");
    }
  }
  return Symbol::FromText(text);
}

// One network bound for training on one device, with its optimizer and ten
// batches of data in memory.
class KvtrainRun {
 public:
  Status Setup(const std::string& net, const Device& device, int batch,
               Dnn dnn) {
    device_ = device;
    batch_ = batch;
    const bool mlp = net == "mlp";
    const Shape data_shape = mlp ? Shape{batch, 784} : Shape{batch, 1, 28, 28};
    ExecutorOptions options;
    options.device = device;
    KV_ASSIGN_OR_RETURN(Symbol sym, Network(net, dnn));
    KV_ASSIGN_OR_RETURN(
        ex_, Executor::SimpleBind(sym, options, {{"data", data_shape},
                                                 {"softmax_label", {batch}}}));
    InitializerOptions io;
    io.type = InitializerOptions::Type::kXavier;
    KV_ASSIGN_OR_RETURN(Initializer init, Initializer::Create(io));
    for (size_t i = 0; i < ex_->arg_names().size(); ++i) {
      const std::string& name = ex_->arg_names()[i];
      if (name == "data") data_index_ = static_cast<int>(i);
      if (name == "softmax_label") label_index_ = static_cast<int>(i);
      if (!ex_->grad_arrays()[i].defined()) continue;
      Tensor w = ex_->arg_arrays()[i];
      KV_RETURN_IF_ERROR(init.Init(name, &w));
    }
    proto::OptimizerSpec spec;
    spec.set_type(proto::OptimizerSpec::SGD);
    spec.set_learning_rate(0.01f);
    spec.set_momentum(0.9f);
    spec.set_rescale_grad(1.0f / batch);  // the loss is the batch mean
    KV_ASSIGN_OR_RETURN(opt_, Optimizer::Create(spec));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(0, 1);
    for (int b = 0; b < 10; ++b) {
      std::vector<float> x(data_shape.NumElements()), y(batch);
      for (float& v : x) v = u(rng);
      for (float& v : y) v = static_cast<float>(rng() % 10);
      KV_ASSIGN_OR_RETURN(Tensor xd, Tensor::FromVector(x, data_shape).CopyTo(device));
      KV_ASSIGN_OR_RETURN(Tensor yd, Tensor::FromVector(y, {batch}).CopyTo(device));
      data_.push_back(xd);
      labels_.push_back(yd);
    }
    return Status::OK();
  }

  // One step as the trainer would run it: everything pushed on the engine
  // (copy-in, forward, backward, one update per gradient as soon as that
  // gradient is ready), at most two steps in flight.
  Status Step(int i) {
    Engine* engine = ex_->engine();
    const auto kCompute = Engine::Queue::kCompute;
    for (const auto& [src, index] : {std::make_pair(data_[i % 10], data_index_),
                                     std::make_pair(labels_[i % 10], label_index_)}) {
      Tensor dst = ex_->arg_arrays()[index];
      engine->Push([src = src, dst]() mutable { return dst.CopyFrom(src); }, {},
                   {ex_->arg_var(index)}, device_, kCompute, "copy batch in");
    }
    KV_RETURN_IF_ERROR(ex_->StartForward(true).status());
    KV_RETURN_IF_ERROR(ex_->StartBackward().status());
    Completion last;
    for (size_t k = 0; k < ex_->grad_arrays().size(); ++k) {
      if (!ex_->grad_arrays()[k].defined()) continue;
      const Tensor w = ex_->arg_arrays()[k], g = ex_->grad_arrays()[k];
      Optimizer* o = opt_.get();
      const int key = static_cast<int>(k);
      last = engine->Push([o, key, w, g] {
                            return o->Update(key, w, g, Optimizer::Wait::kQueued);
                          },
                          {ex_->grad_var(key)}, {ex_->arg_var(key)}, device_,
                          kCompute, "sgd update");
    }
    inflight_.push_back(last);
    while (inflight_.size() > 2) {
      KV_RETURN_IF_ERROR(inflight_.front().Wait(kTimeout));
      inflight_.pop_front();
    }
    return Status::OK();
  }

  Status Drain() {
    KV_RETURN_IF_ERROR(ex_->engine()->WaitForAll(kTimeout));
    inflight_.clear();
    return ex_->Wait();
  }

  // Samples per second over about `seconds`, the best of `repeats`.
  StatusOr<double> Measure(double seconds, int repeats) {
    for (int i = 0; i < 10; ++i) KV_RETURN_IF_ERROR(Step(i));
    KV_RETURN_IF_ERROR(Drain());
    double best = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      auto elapsed = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             start).count();
      };
      int steps = 0;
      do {
        KV_RETURN_IF_ERROR(Step(steps++));
      } while (elapsed() < seconds);
      KV_RETURN_IF_ERROR(Drain());
      best = std::max(best, steps * static_cast<double>(batch_) / elapsed());
    }
    return best;
  }

 private:
  static constexpr std::chrono::minutes kTimeout{5};
  Device device_;
  int batch_ = 0;
  std::unique_ptr<Executor> ex_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<Tensor> data_, labels_;
  int data_index_ = 0, label_index_ = 0;
  std::deque<Completion> inflight_;
};

// Samples per second of kvtrain training `net` on `device`.
StatusOr<double> MeasureKvtrain(const std::string& net, const Device& device,
                                int batch, Dnn dnn = Dnn::kNone) {
  KvtrainRun run;
  KV_RETURN_IF_ERROR(run.Setup(net, device, batch, dnn));
  return run.Measure(FLAGS_seconds, FLAGS_repeats);
}

std::string TorchScript(const char* argv0) {
  if (!FLAGS_torch_script.empty()) return FLAGS_torch_script;
  for (const std::string& p :
       {std::string(argv0) + ".runfiles/kvtrain/bench/torch_bench.py",
        std::string("bench/torch_bench.py")}) {
    if (std::ifstream(p).good()) return p;
  }
  return "bench/torch_bench.py";
}

// PyTorch's samples/s per network on `device` ("cpu" or "cuda") at
// `threads` (OpenMP threads = threads, OpenBLAS's own pool at 1), or an
// empty map with *why set.
std::map<std::string, double> MeasureTorch(const std::string& script,
                                           const std::string& device,
                                           int threads, int batch,
                                           std::string* why) {
  std::map<std::string, double> rates;
  // glibc's adaptive mmap threshold makes PyTorch's large per-step tensors
  // alternate between heap and fresh mmaps (page faults), which swings its
  // LeNet rate by 3x from run to run; fixed thresholds keep it at its best.
  const std::string cmd =
      "OMP_NUM_THREADS=" + std::to_string(threads) +
      " OPENBLAS_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=4294967296"
      " MALLOC_TRIM_THRESHOLD_=4294967296 " + FLAGS_python + " " + script +
      " --device " + device + " --threads " + std::to_string(threads) +
      " --batch " + std::to_string(batch) + " --seconds " +
      std::to_string(FLAGS_seconds) + " --repeats " +
      std::to_string(FLAGS_repeats) + " --nets " + FLAGS_nets + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *why = "cannot start " + FLAGS_python;
    return rates;
  }
  char buf[512];
  std::string output;
  while (fgets(buf, sizeof(buf), pipe) != nullptr) {
    output += buf;
    std::istringstream line(buf);
    std::string name;
    double rate = 0;
    if (line >> name >> rate) rates[name] = rate;
  }
  const int rc = pclose(pipe);
  if (rates.empty() || rc != 0) {
    *why = output.empty() ? "no output" : output.substr(0, output.find('\n'));
    rates.clear();
  }
  return rates;
}

void PrintRow(const std::string& net, const std::string& device,
              const std::string& threads, int batch, double rate,
              const std::map<std::string, double>& torch) {
  auto it = torch.find(net);
  if (it == torch.end()) {
    std::printf("%-6s %-7s %7s %6d %14.0f %14s %8s\n", net.c_str(),
                device.c_str(), threads.c_str(), batch, rate, "-", "-");
  } else {
    std::printf("%-6s %-7s %7s %6d %14.0f %14.0f %8.2f\n", net.c_str(),
                device.c_str(), threads.c_str(), batch, rate, it->second,
                rate / it->second);
  }
  std::fflush(stdout);
}

void PrintHeader() {
  cpu_set_t set;
  const int cores =
      sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  std::printf("train_bench: samples/s of forward + softmax loss + backward + "
              "SGD (momentum 0.9) step, data in memory\n");
  std::printf("machine: %s, %d cores available\n", CpuModel().c_str(), cores);
  std::printf("BLAS: %s, single-threaded inside kvtrain's pool\n",
              blas::CpuBlasDescription().c_str());
  std::printf("PyTorch peer: %s bench/torch_bench.py, OMP_NUM_THREADS = "
              "threads, OPENBLAS_NUM_THREADS=1, fixed malloc thresholds; best "
              "of %d x %.1f s each\n",
              FLAGS_python.c_str(), FLAGS_repeats, FLAGS_seconds);
  std::printf("\n%-6s %-7s %7s %6s %14s %14s %8s\n", "net", "device",
              "threads", "batch", "kvtrain", "PyTorch", "ratio");
}

int Main(const char* argv0) {
  PrintHeader();
  std::vector<std::string> nets;
  std::stringstream ss(FLAGS_nets);
  for (std::string s; std::getline(ss, s, ',');) nets.push_back(s);
  const std::string script = TorchScript(argv0);
  bool failed = false;
  std::set<std::string> torch_notes;
  for (int threads : ParseList(FLAGS_threads)) {
    SetCpuThreads(threads);
    std::string why;
    std::map<std::string, double> torch;
    if (FLAGS_torch) torch = MeasureTorch(script, "cpu", threads, FLAGS_batch, &why);
    if (FLAGS_torch && torch.empty()) torch_notes.insert("PyTorch skipped: " + why);
    for (const std::string& net : nets) {
      StatusOr<double> rate = MeasureKvtrain(net, Device::CPU(), FLAGS_batch);
      if (!rate.ok()) {
        std::printf("%s: %s\n", net.c_str(), rate.status().ToString().c_str());
        failed = true;
        continue;
      }
      PrintRow(net, "cpu", std::to_string(threads), FLAGS_batch, *rate, torch);
    }
  }
  if (NumGpus() == 0) {
    std::printf("\nGPU rows: none (%s)\n", NoGpuReason().c_str());
  }
  for (int batch : NumGpus() > 0 ? ParseList(FLAGS_gpu_batches) : std::vector<int>{}) {
    std::string why;
    std::map<std::string, double> torch;
    if (FLAGS_torch) torch = MeasureTorch(script, "cuda", 1, batch, &why);
    if (FLAGS_torch && torch.empty()) torch_notes.insert("PyTorch skipped: " + why);
    for (const std::string& net : nets) {
      StatusOr<double> rate = MeasureKvtrain(net, Device::GPU(0), batch);
      if (!rate.ok()) {
        std::printf("%s: %s\n", net.c_str(), rate.status().ToString().c_str());
        failed = true;
        continue;
      }
      PrintRow(net, "gpu(0)", "-", batch, *rate, torch);
      if (!FLAGS_gpu_cudnn) continue;
      for (auto [dnn, label] : {std::make_pair(Dnn::kConvOnly, "gpu(0)c"),
                                std::make_pair(Dnn::kAll, "gpu(0)+")}) {
        if (dnn == Dnn::kConvOnly && net != "lenet") continue;
        rate = MeasureKvtrain(net, Device::GPU(0), batch, dnn);
        if (!rate.ok()) {
          std::printf("%s: %s\n", net.c_str(), rate.status().ToString().c_str());
          failed = true;
          continue;
        }
        PrintRow(net, label, "-", batch, *rate, torch);
      }
    }
  }
  if (NumGpus() > 0 && FLAGS_gpu_cudnn) {
    std::printf("\ngpu(0): kvtrain's own kernels (the default); gpu(0)c: "
                "cuDNN for Convolution; gpu(0)+: cuDNN for every op that has "
                "it (cudnn_off=false)\n");
  }
  for (const std::string& note : torch_notes) std::printf("\n%s\n", note.c_str());
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return kvtrain::Main(argv[0]);
}
