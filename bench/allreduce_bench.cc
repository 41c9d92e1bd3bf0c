// allreduce_bench: the communicator's ring all-reduce bandwidth for 1 KB ..
// 64 MB between 2 and 4 processes on 127.0.0.1, and data-parallel MLP
// training samples/s with 2 workers (train_mnist --kv-store dist_allreduce),
// each against PyTorch's gloo backend measured in the same run
// (bench/allreduce_torch.py: dist.all_reduce and DistributedDataParallel).
// GB/s is algorithm bandwidth: tensor bytes / seconds per all-reduce. The
// main columns are without security, like gloo; "default" runs the same
// ranks as a user gets them (a job key; ranks on one host then talk over
// the same-host socket, without CURVE).
//
//   bazel run -c opt //bench:allreduce_bench
//   bazel run //bench:allreduce_bench -- --ranks=2 --max_bytes=65536 --mlp=false
#include <fcntl.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "transport/collective/communicator.h"
#include "net/curve.h"

DEFINE_string(ranks, "2,4", "process counts to measure");
DEFINE_int64(min_bytes, 1024, "smallest all-reduce");
DEFINE_int64(max_bytes, 64 << 20, "largest all-reduce (sizes step by 4x)");
DEFINE_double(seconds, 0.3, "time per size and side");
DEFINE_bool(torch, true, "also measure PyTorch gloo (bench/allreduce_torch.py)");
DEFINE_string(python, "/usr/bin/python3", "the Python that has torch");
DEFINE_string(torch_script, "", "path of allreduce_torch.py (default: runfiles)");
DEFINE_bool(mlp, true, "also measure MLP data-parallel training");
DEFINE_string(train_mnist, "", "path of train_mnist (default: runfiles)");
DEFINE_int64(mlp_examples, 30000, "kvtrain MLP: examples per epoch (all workers)");
DEFINE_double(mlp_seconds, 3, "PyTorch MLP: seconds measured");
DEFINE_string(worker_sizes, "", "internal: run as one rank over these sizes");

namespace kvtrain {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One rank: prints `<bytes> <seconds>` per size (rank 0).
int WorkerMain() {
  auto comm = collective::Communicator::CreateFromEnv();
  if (!comm.ok()) {
    std::fprintf(stderr, "allreduce_bench: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  collective::Communicator& c = **comm;
  std::stringstream in(FLAGS_worker_sizes);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t bytes = std::stoull(item);
    std::vector<float> buf(std::max<size_t>(1, bytes / 4), 1.0f);
    auto once = [&] {
      Status s = c.AllReduceSum(buf.data(), buf.size());
      if (!s.ok()) {
        std::fprintf(stderr, "allreduce_bench: %s\n", s.ToString().c_str());
        std::exit(1);
      }
    };
    once();
    once();
    auto t = Clock::now();
    once();
    int64_t count = std::max<int64_t>(3, static_cast<int64_t>(FLAGS_seconds / Since(t)));
    if (!c.Broadcast(0, &count, sizeof(count)).ok() || !c.Barrier().ok()) return 1;
    t = Clock::now();
    for (int64_t i = 0; i < count; ++i) once();
    const double sec = Since(t) / count;
    if (c.rank() == 0) std::printf("%zu %.9f\n", bytes, sec);
  }
  std::fflush(stdout);
  return c.Barrier().ok() ? 0 : 1;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Starts `argv` as `n` ranks (PMI_RANK/PMI_SIZE and a rendezvous, as
// mpiexec would) with `env`; returns each rank's stdout, or {} on failure.
std::vector<std::string> RunRanks(int n, const std::vector<std::string>& argv,
                                  const std::map<std::string, std::string>& env) {
  const std::string rendezvous = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int r = 0; r < n; ++r) {
    int p[2];
    if (pipe(p) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(p[1], 1);
      close(p[0]);
      setenv("PMI_RANK", std::to_string(r).c_str(), 1);
      setenv("PMI_SIZE", std::to_string(n).c_str(), 1);
      setenv("KVTRAIN_RENDEZVOUS", rendezvous.c_str(), 1);
      // gloo does not encrypt: compare without CURVE unless asked
      // (KVTRAIN_INSECURE=0 with a KVTRAIN_JOB_KEY measures with it).
      setenv("KVTRAIN_INSECURE", "1", 0);
      for (const auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      unsetenv("DMLC_ROLE");
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  std::vector<std::string> out(n);
  for (int r = 0; r < n; ++r) {
    char buf[4096];
    ssize_t got;
    while ((got = read(fds[r], buf, sizeof(buf))) > 0) out[r].append(buf, got);
    close(fds[r]);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok ? out : std::vector<std::string>();
}

std::map<int64_t, double> ParseTimes(const std::string& text) {
  std::map<int64_t, double> t;
  std::istringstream in(text);
  int64_t bytes;
  double sec;
  while (in >> bytes >> sec) t[bytes] = sec;
  return t;
}

std::string Capture(const std::string& cmd, int* code) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *code = -1;
    return out;
  }
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, got);
  const int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string Find(const std::string& flag, const char* argv0, const std::string& rel) {
  if (!flag.empty()) return flag;
  for (const std::string& p : {std::string(argv0) + ".runfiles/kvtrain/" + rel, rel}) {
    if (std::ifstream(p).good()) return p;
  }
  return rel;
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string Human(int64_t bytes) {
  if (bytes >= (1 << 20)) return std::to_string(bytes >> 20) + " MB";
  if (bytes >= 1024) return std::to_string(bytes >> 10) + " KB";
  return std::to_string(bytes) + " B";
}

// kvtrain MLP samples/s: 1 process (local) or n (dist_allreduce), 1 thread
// each, batch 100 per process; from train_mnist's second epoch (the first
// warms up, as the PyTorch side's first steps do).
// The environment of a job with security on, as launch.py gives it.
std::map<std::string, std::string> Secure(std::map<std::string, std::string> env) {
  env["KVTRAIN_INSECURE"] = "0";
  env["KVTRAIN_JOB_KEY"] = net::JobKey::Generate().secret_z85();
  return env;
}

double KvtrainMlp(const std::string& train, int n, bool secure = false) {
  const std::vector<std::string> argv = {
      train, "--network=mlp", "--num-epochs=2", "--disp-batches=0", "--batch-size=100",
      "--num-examples=" + std::to_string(FLAGS_mlp_examples),
      n == 1 ? "--kv-store=local" : "--kv-store=dist_allreduce"};
  std::map<std::string, std::string> env = {{"KVTRAIN_NUM_THREADS", "1"},
                                             {"OMP_NUM_THREADS", "1"}};
  auto out = RunRanks(n, argv, secure ? Secure(env) : env);
  double worst = 0;
  for (const std::string& o : out) {
    const size_t at = o.rfind("Time cost=");
    if (at == std::string::npos) return 0;
    worst = std::max(worst, std::atof(o.c_str() + at + 10));
  }
  return out.empty() || worst <= 0 ? 0 : FLAGS_mlp_examples / worst;
}

double TorchMlp(const std::string& script, int n) {
  int code = 0;
  const std::string out = Capture(
      "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 " + FLAGS_python + " " + script +
          " mlp --ranks " + std::to_string(n) + " --batch 100 --seconds " +
          std::to_string(FLAGS_mlp_seconds) + " 2>/dev/null",
      &code);
  const size_t at = out.find("samples_per_s ");
  return code == 0 && at != std::string::npos ? std::atof(out.c_str() + at + 14) : 0;
}

int DriverMain(const char* argv0) {
  std::vector<int64_t> sizes;
  for (int64_t b = FLAGS_min_bytes; b <= FLAGS_max_bytes; b *= 4) sizes.push_back(b);
  std::vector<int> ranks;
  {
    std::stringstream in(FLAGS_ranks);
    std::string item;
    while (std::getline(in, item, ',')) ranks.push_back(std::atoi(item.c_str()));
  }
  const std::string script = Find(FLAGS_torch_script, argv0, "bench/allreduce_torch.py");
  bool torch = FLAGS_torch;
  std::printf("allreduce_bench: ring all-reduce (kvtrain communicator) vs PyTorch gloo "
              "(%s), float32 sum on 127.0.0.1, 1 thread per process; GB/s = bytes / "
              "seconds per all-reduce\n", torch ? script.c_str() : "skipped");
  double min_ratio_1mb = 1e9;
  for (int n : ranks) {
    const auto kv_out = RunRanks(n, {"/proc/self/exe", "--worker_sizes=" + Join(sizes),
                                     "--seconds=" + std::to_string(FLAGS_seconds)},
                                 {{"KVTRAIN_KVSTORE_TIMEOUT", "120"}});
    if (kv_out.empty()) {
      std::fprintf(stderr, "allreduce_bench: the %d kvtrain ranks failed\n", n);
      return 1;
    }
    const auto kv = ParseTimes(kv_out[0]);
    const auto sec_out = RunRanks(n, {"/proc/self/exe", "--worker_sizes=" + Join(sizes),
                                      "--seconds=" + std::to_string(FLAGS_seconds)},
                                  Secure({{"KVTRAIN_KVSTORE_TIMEOUT", "120"}}));
    if (sec_out.empty()) {
      std::fprintf(stderr, "allreduce_bench: the %d kvtrain ranks with a job key failed\n", n);
      return 1;
    }
    const auto sec = ParseTimes(sec_out[0]);
    std::map<int64_t, double> gloo;
    if (torch) {
      int code = 0;
      const std::string out = Capture(
          "OMP_NUM_THREADS=1 " + FLAGS_python + " " + script + " allreduce --ranks " +
              std::to_string(n) + " --sizes " + Join(sizes) + " --seconds " +
              std::to_string(FLAGS_seconds) + " 2>&1",
          &code);
      if (code == 3) {
        std::printf("PyTorch: not installed (python3-torch, which tools/setup.sh installs); "
                    "kvtrain only\n");
        torch = false;
      } else if (code != 0) {
        std::printf("PyTorch gloo failed:\n%s\n", out.c_str());
        torch = false;
      } else {
        gloo = ParseTimes(out);
      }
    }
    std::printf("\n%d processes\n%10s %12s %12s %12s %16s %12s %12s %8s\n", n, "size",
                "kvtrain us", "kvtrain GB/s", "default us", "default/insecure", "gloo us",
                "gloo GB/s", "ratio");
    for (int64_t b : sizes) {
      const double k = kv.count(b) ? kv.at(b) : 0;
      const double d = sec.count(b) ? sec.at(b) : 0;
      const double g = gloo.count(b) ? gloo.at(b) : 0;
      std::printf("%10s %12.1f %12.3f %12.1f %15.2fx", Human(b).c_str(), k * 1e6, b / k / 1e9,
                  d * 1e6, k > 0 ? d / k : 0);
      if (g > 0 && k > 0) {
        std::printf(" %12.1f %12.3f %7.2fx\n", g * 1e6, b / g / 1e9, g / k);
        if (b >= (1 << 20)) min_ratio_1mb = std::min(min_ratio_1mb, g / k);
      } else {
        std::printf(" %12s %12s %8s\n", "-", "-", "-");
      }
    }
  }
  double mlp_ratio = 0;
  if (FLAGS_mlp) {
    const std::string train = Find(FLAGS_train_mnist, argv0, "examples/train_mnist");
    const double k1 = KvtrainMlp(train, 1), k2 = KvtrainMlp(train, 2);
    const double k2s = KvtrainMlp(train, 2, /*secure=*/true);
    const double t1 = torch ? TorchMlp(script, 1) : 0, t2 = torch ? TorchMlp(script, 2) : 0;
    std::printf("\nMLP 784-128-64-10 training, batch 100 per process, 1 thread each "
                "(samples/s, all processes)\n%-34s %12s %12s %8s\n", "", "kvtrain",
                "PyTorch", "ratio");
    std::printf("%-34s %12.0f %12.0f %7.2fx\n", "1 process (local / plain)", k1, t1,
                t1 > 0 ? k1 / t1 : 0);
    std::printf("%-34s %12.0f %12.0f %7.2fx\n", "2 processes (dist_allreduce / DDP)", k2, t2,
                t2 > 0 ? k2 / t2 : 0);
    std::printf("%-34s %12.0f %12.0f %7.2fx   (default/insecure %.2fx)\n",
                "2 processes, default security", k2s, t2, t2 > 0 ? k2s / t2 : 0,
                k2 > 0 ? k2s / k2 : 0);
    mlp_ratio = t2 > 0 ? k2 / t2 : 0;
  }
  if (torch && min_ratio_1mb < 1e9) {
    std::printf("allreduce_bench: vs gloo, worst ratio for 1 MB and up %.2fx; MLP 2 "
                "processes %.2fx\n", min_ratio_1mb, mlp_ratio);
  } else {
    std::printf("allreduce_bench: done (no gloo baseline)\n");
  }
  return 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (!FLAGS_worker_sizes.empty()) return kvtrain::WorkerMain();
  return kvtrain::DriverMain(argv[0]);
}
