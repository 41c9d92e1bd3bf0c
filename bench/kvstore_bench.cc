// kvstore_bench: time per push+pull step of a model-shaped workload (50 keys
// of 1 KB .. 16 MB, about 90 MB) on dist_sync and dist_async with 2 workers
// and 2 servers, next to the transport's time for the same bytes measured in
// the same processes: raw KVWorker PushPulls of the same keys, placed on the
// same servers, answered by an echo handler. Prints kvstore/transport.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "net/node_config.h"
#include "kvstore/settings.h"
#include "kvstore/kvstore.h"
#include "kvstore/placement.h"
#include "transport/ps/ps.h"
#include "bench/bench_node.h"
#include "tests/util/local_job.h"

DEFINE_int32(keys, 50, "number of keys");
DEFINE_int64(min_bytes, 1024, "smallest key");
DEFINE_int64(max_bytes, 16 << 20, "largest key (sizes are log-spaced)");
DEFINE_int32(steps, 8, "steps measured per round (3 rounds, alternating)");
DEFINE_string(types, "dist_sync,dist_async", "store types to measure");
DEFINE_string(optimizer, "sgd", "server update: sgd or none (sum)");
DEFINE_string(results_dir, "", "internal: where worker 0 writes results");
DEFINE_string(type, "", "internal: the store type of this job");

namespace kvtrain {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(600);
constexpr int kBaselineApp = 1;

std::vector<int64_t> KeyElements() {
  std::vector<int64_t> out;
  const double lo = std::log(FLAGS_min_bytes), hi = std::log(FLAGS_max_bytes);
  for (int i = 0; i < FLAGS_keys; ++i) {
    const double b = std::exp(lo + (hi - lo) * i / std::max(1, FLAGS_keys - 1));
    out.push_back(std::max<int64_t>(1, static_cast<int64_t>(b) / 4));
  }
  return out;
}

// The baseline: each key's bytes placed on the servers as the KVStore
// places them, one PushPull per key.
struct Baseline {
  std::vector<ps::KVPairs> kvs;
  std::vector<std::vector<char>> landing;
};

Baseline MakeBaseline(ps::Postoffice* po, const std::vector<int64_t>& elems) {
  kv::Placement placement(po->num_servers(), kv::StoreSettings().bigarray_bound);
  const auto parts = placement.Place(elems);
  const auto ranges = po->ServerKeyRanges();
  Baseline b;
  for (size_t i = 0; i < elems.size(); ++i) {
    std::vector<uint64_t> keys;
    std::vector<int64_t> lens;
    for (const kv::Part& p : parts[i]) {
      keys.push_back(ranges[p.server].begin + i);
      lens.push_back(p.count * 4);
    }
    b.kvs.push_back(ps::KVPairs::From(
        keys, ps::Blob::FromVector(std::vector<float>(elems[i], 1.0f)), lens));
    b.landing.emplace_back(elems[i] * 4);
  }
  return b;
}

StatusOr<double> BaselineStep(ps::KVWorker* w, Baseline* b) {
  const auto t0 = Clock::now();
  std::vector<int64_t> ts;
  for (size_t i = 0; i < b->kvs.size(); ++i) {
    ps::RequestOptions o;
    o.priority = -static_cast<int>(i);
    ps::PullDest d;
    d.data = b->landing[i].data();
    d.size = b->landing[i].size();
    d.lens = b->kvs[i].lens;
    KV_ASSIGN_OR_RETURN(int64_t t, w->PushPull(b->kvs[i], o, d));
    ts.push_back(t);
  }
  for (int64_t t : ts) KV_RETURN_IF_ERROR(w->Wait(t, kWait));
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

StatusOr<double> StoreStep(KVStore* kv, const std::vector<Key>& keys,
                           const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& weights) {
  const auto t0 = Clock::now();
  std::vector<KVHandle> hs;
  for (size_t i = 0; i < keys.size(); ++i) {
    KV_ASSIGN_OR_RETURN(KVHandle h, kv->PushPullAsync({keys[i]}, {grads[i]},
                                                      {weights[i]}, -static_cast<int>(i)));
    hs.push_back(h);
  }
  for (KVHandle h : hs) KV_RETURN_IF_ERROR(kv->Wait(h));
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Status RunWorker(ps::Postoffice* po, KVStore* kv) {
  const std::vector<int64_t> elems = KeyElements();
  KV_ASSIGN_OR_RETURN(auto w, ps::KVWorker::Create(po, kBaselineApp));
  Baseline base = MakeBaseline(po, elems);
  std::vector<Key> keys;
  std::vector<Tensor> init, grads, weights;
  for (size_t i = 0; i < elems.size(); ++i) {
    keys.push_back("k" + std::to_string(i));
    init.push_back(Tensor::Zeros({elems[i]}));
    grads.push_back(Tensor::Zeros({elems[i]}));
    CHECK(grads.back().Fill(1e-3).ok());
    weights.push_back(Tensor::Zeros({elems[i]}));
  }
  KV_RETURN_IF_ERROR(kv->Init(keys, init));
  if (FLAGS_optimizer == "sgd") {
    proto::OptimizerSpec spec;
    spec.set_type(proto::OptimizerSpec::SGD);
    spec.set_learning_rate(0.1f);
    spec.set_momentum(0.9f);
    KV_RETURN_IF_ERROR(kv->SetOptimizer(spec));
  }
  for (int i = 0; i < 2; ++i) {  // warm-up both paths
    KV_RETURN_IF_ERROR(BaselineStep(w.get(), &base).status());
    KV_RETURN_IF_ERROR(StoreStep(kv, keys, grads, weights).status());
  }
  std::vector<double> raw, store;
  for (int round = 0; round < 3; ++round) {
    KV_RETURN_IF_ERROR(kv->Barrier());
    for (int s = 0; s < FLAGS_steps; ++s) {
      KV_ASSIGN_OR_RETURN(double t, BaselineStep(w.get(), &base));
      raw.push_back(t);
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    for (int s = 0; s < FLAGS_steps; ++s) {
      KV_ASSIGN_OR_RETURN(double t, StoreStep(kv, keys, grads, weights));
      store.push_back(t);
    }
  }
  if (kv->rank() == 0) {
    std::sort(raw.begin(), raw.end());
    std::sort(store.begin(), store.end());
    std::ofstream out(FLAGS_results_dir + "/result");
    out << raw[raw.size() / 2] << " " << store[store.size() / 2] << "\n";
  }
  return Status::OK();
}

// ---- The driver ----

StatusOr<std::pair<double, double>> MeasureJob(const std::string& type) {
  testutil::LocalJobOptions o;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  o.binary = std::string(self, n > 0 ? n : 0);
  const std::string dir = testutil::NewTempDir("kvstore_bench");
  o.args = {"--type=" + type, "--results_dir=" + dir,
            "--keys=" + std::to_string(FLAGS_keys),
            "--min_bytes=" + std::to_string(FLAGS_min_bytes),
            "--max_bytes=" + std::to_string(FLAGS_max_bytes),
            "--steps=" + std::to_string(FLAGS_steps), "--optimizer=" + FLAGS_optimizer};
  o.num_servers = 2;
  o.num_workers = 2;
  o.env = {{"PS_HEARTBEAT_TIMEOUT", "120"}, {"KVTRAIN_STARTUP_TIMEOUT", "120"}};
  KV_ASSIGN_OR_RETURN(auto job, testutil::LocalJob::Start(o));
  if (!job->WaitAll(std::chrono::seconds(1200)) || !job->AllSucceeded()) {
    return Status::Internal("the " + type + " job failed:\n" + job->Report());
  }
  std::ifstream in(dir + "/result");
  double raw = 0, store = 0;
  if (!(in >> raw >> store)) return Status::Internal("no result from worker 0");
  return std::make_pair(raw, store);
}

int RunDriver() {
  int64_t total = 0;
  for (int64_t e : KeyElements()) total += 4 * e;
  std::printf("kvstore_bench: %d keys of %lld B .. %lld B, %.1f MB per step, 2 workers x "
              "2 servers on 127.0.0.1, server update: %s, %ld cores\n",
              FLAGS_keys, static_cast<long long>(FLAGS_min_bytes),
              static_cast<long long>(FLAGS_max_bytes), total / 1e6, FLAGS_optimizer.c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-12s %16s %16s %10s %14s\n", "type", "transport/step", "kvstore/step",
              "ratio", "kvstore GB/s");
  std::string summary;
  std::stringstream types(FLAGS_types);
  std::string type;
  while (std::getline(types, type, ',')) {
    StatusOr<std::pair<double, double>> r = MeasureJob(type);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    const double ratio = r->second / r->first;
    // Both directions of the payload count, per worker.
    std::printf("%-12s %13.2f ms %13.2f ms %9.2fx %14.2f\n", type.c_str(),
                r->first * 1e3, r->second * 1e3, ratio, 2.0 * total / r->second / 1e9);
    char buf[128];
    std::snprintf(buf, sizeof(buf), "%s%s %.2f x", summary.empty() ? "" : ", ",
                  type.c_str(), ratio);
    summary += buf;
  }
  std::printf("kvstore_bench: push+pull step vs transport: %s\n", summary.c_str());
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (kvtrain::NodeConfig::InDistributedJob(kvtrain::ProcessEnv())) {
    return kvtrain::bench::RunBenchNode(FLAGS_type, kvtrain::bench::kBaselineApp,
                                        kvtrain::bench::RunWorker);
  }
  return kvtrain::bench::RunDriver();
}
