// pushpull_bench: the time of one synchronous KVStore::PushPull of one key,
// per size: the C++ side of bench/python_bench.py's comparison with the
// Python front-end's kv.pushpull (bench/pushpull_bench.py). Run alone for a
// single-process store, or as every process of a job started by
// tracker/launch.py for a dist one:
//   bazel-bin/bench/pushpull_bench --kv_store local
//   tracker/launch.py -n 1 -s 1 --launcher local bazel-bin/bench/pushpull_bench --kv_store dist_sync
// Prints `pushpull bytes=N us=T` per size (the median of --rounds rounds of
// --iters calls each).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <vector>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "kvstore/kvstore.h"

DEFINE_string(kv_store, "local", "the store type");
DEFINE_string(sizes, "1024,1048576", "bytes per key, comma-separated");
DEFINE_int32(iters, 200, "calls per round");
DEFINE_int32(rounds, 5, "rounds; the median is printed");

namespace kvtrain {
namespace {

int Run() {
  StatusOr<std::unique_ptr<KVStore>> kv = KVStore::Create(FLAGS_kv_store);
  if (!kv.ok()) {
    std::fprintf(stderr, "pushpull_bench: %s\n", kv.status().ToString().c_str());
    return 2;
  }
  if (!(*kv)->is_worker()) return (*kv)->RunServer().ok() ? 0 : 1;
  std::stringstream ss(FLAGS_sizes);
  std::string item;
  int key = 0;
  while (std::getline(ss, item, ',')) {
    const int64_t bytes = std::stoll(item);
    Tensor value = Tensor::Zeros({bytes / 4});
    Tensor out = Tensor::Zeros({bytes / 4});
    Status s = (*kv)->Init({key}, {value});
    for (int i = 0; s.ok() && i < 10; ++i) s = (*kv)->PushPull({key}, {value}, {out});
    std::vector<double> us;
    for (int r = 0; s.ok() && r < FLAGS_rounds; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; s.ok() && i < FLAGS_iters; ++i) s = (*kv)->PushPull({key}, {value}, {out});
      const std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - t0;
      us.push_back(d.count() / FLAGS_iters);
    }
    if (!s.ok()) {
      std::fprintf(stderr, "pushpull_bench: %s\n", s.ToString().c_str());
      return 1;
    }
    std::sort(us.begin(), us.end());
    std::printf("pushpull bytes=%lld us=%.2f\n", static_cast<long long>(bytes), us[us.size() / 2]);
    ++key;
  }
  return (*kv)->Finalize().ok() ? 0 : 1;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return kvtrain::Run();
}
