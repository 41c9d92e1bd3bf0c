// sparse_bench: row-sparse keys through real jobs on 127.0.0.1 (security on,
// as users run them), each figure next to a baseline measured in the same run.
//
//   row path   1 worker + 1 server, dist_sync: push then pull of --rows
//              random rows (ids from a pool whose rows exist after warm-up)
//              x --width floats. Baseline: the same sums, table updates and
//              reads in one process (sparse::Table, no transport) plus the
//              transport's echo of the same bytes (raw KVWorker PushPulls
//              answered by an echo handler on the same server).
//   scale      1 worker + 2 servers, dist_sync, Adagrad: batches of --batch
//              samples x --fields ids, Zipf(--zipf) over tables of each of
//              --table_rows rows; pull the batch's unique rows, push their
//              gradients. Reports samples/s, unique ids per batch, bytes per
//              step against unique x row bytes x 2, and peak resident memory
//              of the worker and of each server. Baseline: the same table as a
//              dense key through dist_sync (push-pull of the whole table per
//              step) at the sizes in --dense_rows.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kvstore/kvstore.h"
#include "transport/ps/ps.h"
#include "kvstore/sparse/rows.h"
#include "kvstore/sparse/table.h"
#include "net/node_config.h"
#include "bench/bench_node.h"
#include "tests/util/local_job.h"

DEFINE_string(modes, "rowpath,scale", "what to measure: rowpath, scale, dense");
DEFINE_int32(rows, 4096, "row path: rows per push and per pull");
DEFINE_int32(width, 16, "floats per row");
DEFINE_int64(pool, 1000000, "row path: ids are drawn from [0, pool)");
DEFINE_int32(steps, 30, "steps measured (per round; 3 rounds)");
DEFINE_string(table_rows, "1000000,10000000,100000000", "scale: table sizes (rows)");
DEFINE_string(dense_rows, "1000000", "dense baseline: table sizes (rows)");
DEFINE_int32(batch, 512, "scale: samples per batch");
DEFINE_int32(fields, 8, "scale: ids per sample");
DEFINE_double(zipf, 1.1, "scale: Zipf exponent of the ids");
DEFINE_string(results_dir, "", "internal: where nodes write results");
DEFINE_string(mode, "", "internal: this job's mode");
DEFINE_int64(table, 0, "internal: this job's table rows");

namespace kvtrain {
namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(600);
constexpr int kEchoApp = 1;

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Peak resident memory of this process, MB.
double PeakRssMb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

Tensor IdTensor(const std::vector<int64_t>& ids) {
  Tensor t = Tensor::Empty(Shape({static_cast<int64_t>(ids.size())}), DType::kInt64);
  std::copy(ids.begin(), ids.end(), t.data<int64_t>());
  return t;
}

// One echo round trip of `bytes` to server 0.
StatusOr<double> EchoStep(ps::KVWorker* w, ps::Postoffice* po, size_t bytes,
                          std::vector<char>* land) {
  const uint64_t key = po->ServerKeyRanges()[0].begin;
  land->resize(bytes);
  ps::PullDest d;
  d.data = land->data();
  d.size = bytes;
  const auto t0 = Clock::now();
  KV_ASSIGN_OR_RETURN(int64_t ts,
                      w->PushPull(ps::KVPairs::From({key}, ps::Blob::Copy(land->data(), bytes)),
                                  {}, d));
  KV_RETURN_IF_ERROR(w->Wait(ts, kWait));
  return Seconds(t0);
}

proto::OptimizerSpec Adagrad() {
  proto::OptimizerSpec o;
  o.set_type(proto::OptimizerSpec::ADAGRAD);
  o.set_learning_rate(0.05f);
  return o;
}

Status RowPathWorker(ps::Postoffice* po, KVStore* kv, std::ostream& out) {
  const int64_t width = FLAGS_width;
  proto::SparseTableSpec spec;
  spec.set_width(width);
  spec.set_init(proto::SparseTableSpec::UNIFORM);
  spec.set_scale(0.01f);
  KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
  KV_RETURN_IF_ERROR(kv->SetOptimizer(Adagrad()));
  KV_ASSIGN_OR_RETURN(auto opt, Optimizer::Create(Adagrad()));
  KV_ASSIGN_OR_RETURN(auto local, sparse::Table::Create("emb", spec));
  KV_ASSIGN_OR_RETURN(auto echo, ps::KVWorker::Create(po, kEchoApp));
  std::mt19937_64 rng(1);
  const size_t n = static_cast<size_t>(FLAGS_rows);
  std::vector<int64_t> ids(n);
  Tensor grads = Tensor::Empty(Shape({static_cast<int64_t>(n), width}));
  CHECK(grads.Fill(1e-3f).ok());
  Tensor rows = Tensor::Empty(Shape({static_cast<int64_t>(n), width}));
  auto draw = [&] {
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % FLAGS_pool);
  };
  // Warm-up: create every row of the pool on both sides.
  for (int64_t b = 0; b < FLAGS_pool; b += static_cast<int64_t>(n)) {
    for (size_t i = 0; i < n; ++i) ids[i] = (b + static_cast<int64_t>(i)) % FLAGS_pool;
    KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", IdTensor(ids), grads));
    sparse::RowSum sum(width);
    sum.Add(ids.data(), n, grads.data<float>());
    KV_RETURN_IF_ERROR(local->Update(sum.ids().data(), sum.size(), sum.rows().data(), opt.get()));
  }
  const size_t push_bytes = n * (8 + 4 * static_cast<size_t>(width));
  const size_t pull_bytes = n * 4 * static_cast<size_t>(width);
  std::vector<char> land;
  std::vector<double> store, in_process, transport;
  for (int round = 0; round < 3; ++round) {
    for (int s = 0; s < FLAGS_steps; ++s) {
      draw();
      const Tensor id_t = IdTensor(ids);
      auto t0 = Clock::now();
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", id_t, grads));
      KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", id_t, rows));
      store.push_back(Seconds(t0));
      t0 = Clock::now();
      sparse::RowSum sum(width);
      sum.Add(ids.data(), n, grads.data<float>());
      KV_RETURN_IF_ERROR(
          local->Update(sum.ids().data(), sum.size(), sum.rows().data(), opt.get()));
      local->Read(ids.data(), n, rows.data<float>());
      in_process.push_back(Seconds(t0));
      KV_ASSIGN_OR_RETURN(double a, EchoStep(echo.get(), po, push_bytes, &land));
      KV_ASSIGN_OR_RETURN(double b, EchoStep(echo.get(), po, pull_bytes, &land));
      transport.push_back(a + b);
    }
  }
  out << Median(store) << " " << Median(in_process) << " " << Median(transport) << "\n";
  return Status::OK();
}

// Zipf over [0, n) by inverting the continuous power law (O(1) per draw).
class Zipf {
 public:
  Zipf(double s, int64_t n, uint64_t seed) : s_(s), n_(static_cast<double>(n)), rng_(seed) {}
  int64_t operator()() {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng_);
    const double a = 1 - s_;
    const double x = std::pow(u * (std::pow(n_ + 1, a) - 1) + 1, 1 / a) - 1;
    return std::min(static_cast<int64_t>(x), static_cast<int64_t>(n_) - 1);
  }

 private:
  double s_, n_;
  std::mt19937_64 rng_;
};

Status ScaleWorker(KVStore* kv, std::ostream& out) {
  const int64_t width = FLAGS_width;
  proto::SparseTableSpec spec;
  spec.set_width(width);
  spec.set_num_rows(FLAGS_table);
  spec.set_init(proto::SparseTableSpec::NORMAL);
  spec.set_scale(0.01f);
  KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
  KV_RETURN_IF_ERROR(kv->SetOptimizer(Adagrad()));
  Zipf zipf(FLAGS_zipf, FLAGS_table, 7);
  // Ids are scrambled over the table so hot rows are not neighbours.
  auto scramble = [](int64_t r, int64_t n) {
    return static_cast<int64_t>(sparse::Mix64(static_cast<uint64_t>(r)) % static_cast<uint64_t>(n));
  };
  const size_t n = static_cast<size_t>(FLAGS_batch) * FLAGS_fields;
  std::vector<int64_t> ids(n), unique;
  std::vector<uint32_t> where;
  double unique_total = 0;
  std::vector<double> step_s;
  const int steps = 3 * FLAGS_steps + 10;
  for (int s = 0; s < steps; ++s) {
    for (int64_t& id : ids) id = scramble(zipf(), FLAGS_table);
    const auto t0 = Clock::now();
    sparse::UniqueIds(ids.data(), n, &unique, &where);
    const Tensor uid = IdTensor(unique);
    Tensor rows = Tensor::Empty(Shape({static_cast<int64_t>(unique.size()), width}));
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", uid, rows));
    // The model's gradient for each unique row: here its own value, scaled.
    Tensor grads = Tensor::Empty(rows.shape());
    for (int64_t i = 0; i < rows.size(); ++i) grads.data<float>()[i] = 0.1f * rows.data<float>()[i];
    KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", uid, grads));
    if (s >= 10) {  // after warm-up
      step_s.push_back(Seconds(t0));
      unique_total += static_cast<double>(unique.size());
    }
  }
  const double per_step = Median(step_s);
  const double uniq = unique_total / static_cast<double>(step_s.size());
  out << per_step << " " << uniq << " " << PeakRssMb() << "\n";
  return Status::OK();
}

Status DenseWorker(KVStore* kv, std::ostream& out) {
  const int64_t elems = FLAGS_table * FLAGS_width;
  Tensor w = Tensor::Zeros({elems}), g = Tensor::Zeros({elems});
  CHECK(g.Fill(1e-3f).ok());
  KV_RETURN_IF_ERROR(kv->Init({"emb"}, {w}));
  KV_RETURN_IF_ERROR(kv->SetOptimizer(Adagrad()));
  std::vector<double> step_s;
  for (int s = 0; s < 6; ++s) {
    const auto t0 = Clock::now();
    KV_RETURN_IF_ERROR(kv->PushPull({"emb"}, {g}, {w}));
    if (s >= 2) step_s.push_back(Seconds(t0));
  }
  out << Median(step_s) << " 0 " << PeakRssMb() << "\n";
  return Status::OK();
}

int RunNode() {
  auto work = [](ps::Postoffice* po, KVStore* kv) -> Status {
    std::ofstream out(FLAGS_results_dir + "/worker");
    if (FLAGS_mode == "rowpath") return RowPathWorker(po, kv, out);
    if (FLAGS_mode == "scale") return ScaleWorker(kv, out);
    return DenseWorker(kv, out);
  };
  return RunBenchNode("dist_sync", kEchoApp, work, [](Role role) {
    if (role != Role::kServer) return;
    std::ofstream out(FLAGS_results_dir + "/server" + std::to_string(getpid()));
    out << PeakRssMb() << "\n";
  });
}

// ---- The driver ----

struct JobResult {
  std::vector<double> worker;       // the worker's numbers
  std::vector<double> server_rss;   // MB, per server
};

StatusOr<JobResult> RunJob(const std::string& mode, int servers, int64_t table) {
  testutil::LocalJobOptions o;
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  o.binary = std::string(self, len > 0 ? len : 0);
  const std::string dir = testutil::NewTempDir("sparse_bench");
  o.args = {"--mode=" + mode, "--results_dir=" + dir, "--table=" + std::to_string(table),
            "--rows=" + std::to_string(FLAGS_rows), "--width=" + std::to_string(FLAGS_width),
            "--pool=" + std::to_string(FLAGS_pool), "--steps=" + std::to_string(FLAGS_steps),
            "--batch=" + std::to_string(FLAGS_batch), "--fields=" + std::to_string(FLAGS_fields),
            "--zipf=" + std::to_string(FLAGS_zipf)};
  o.num_servers = servers;
  o.num_workers = 1;
  o.env = {{"PS_HEARTBEAT_TIMEOUT", "120"}, {"KVTRAIN_STARTUP_TIMEOUT", "120"},
           {"KVTRAIN_KVSTORE_TIMEOUT", "600"}};
  KV_ASSIGN_OR_RETURN(auto job, testutil::LocalJob::Start(o));
  if (!job->WaitAll(std::chrono::seconds(1800)) || !job->AllSucceeded()) {
    return Status::Internal("the " + mode + " job failed:\n" + job->Report());
  }
  JobResult r;
  std::ifstream in(dir + "/worker");
  double v;
  while (in >> v) r.worker.push_back(v);
  if (r.worker.size() < 3) return Status::Internal("no result from the worker");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind("server", 0) != 0) continue;
    std::ifstream f(entry.path());
    double mb;
    if (f >> mb) r.server_rss.push_back(mb);
  }
  return r;
}

std::vector<int64_t> Sizes(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(std::stoll(item));
  }
  return out;
}

std::string Servers(const std::vector<double>& rss) {
  std::string s;
  char buf[32];
  for (double mb : rss) {
    std::snprintf(buf, sizeof(buf), "%s%.0f", s.empty() ? "" : "+", mb);
    s += buf;
  }
  return s.empty() ? "?" : s;
}

int RunDriver() {
  std::printf("sparse_bench: row width %d floats, dist_sync on 127.0.0.1 (CURVE on), %ld cores\n",
              FLAGS_width, sysconf(_SC_NPROCESSORS_ONLN));
  const std::string modes = FLAGS_modes;
  if (modes.find("rowpath") != std::string::npos) {
    StatusOr<JobResult> r = RunJob("rowpath", 1, 0);
    if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
    const double store = r->worker[0], local = r->worker[1], echo = r->worker[2];
    std::printf("\nrow path: push + pull of %d random rows (of %lld) through 1 server\n",
                FLAGS_rows, static_cast<long long>(FLAGS_pool));
    std::printf("  %-34s %9.3f ms\n", "kvtrain (1 worker, 1 server)", store * 1e3);
    std::printf("  %-34s %9.3f ms\n", "baseline: table ops in one process", local * 1e3);
    std::printf("  %-34s %9.3f ms\n", "baseline: transport echo of bytes", echo * 1e3);
    std::printf("  baseline / kvtrain = %.2f  (target >= 0.5)\n", (local + echo) / store);
  }
  const int64_t row_bytes = 4LL * FLAGS_width;
  if (modes.find("scale") != std::string::npos) {
    std::printf("\nscale: batch %d x %d ids, Zipf %.2f, Adagrad, 1 worker + 2 servers\n",
                FLAGS_batch, FLAGS_fields, FLAGS_zipf);
    std::printf("  %12s %12s %10s %14s %10s %12s %16s\n", "table rows", "samples/s", "unique",
                "bytes/step", "vs 2*u*row", "worker MB", "servers MB");
    double first = 0;
    for (int64_t rows : Sizes(FLAGS_table_rows)) {
      StatusOr<JobResult> r = RunJob("scale", 2, rows);
      if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
      const double sps = FLAGS_batch / r->worker[0], uniq = r->worker[1];
      // Pull: ids out, rows back; push: ids and rows out.
      const double bytes = uniq * (8 + row_bytes + 8 + row_bytes);
      if (first == 0) first = sps;
      std::printf("  %12lld %12.0f %10.0f %14.0f %9.2fx %12.0f %16s   (%.2fx of the first)\n",
                  static_cast<long long>(rows), sps, uniq, bytes, bytes / (2 * uniq * row_bytes),
                  r->worker[2], Servers(r->server_rss).c_str(), sps / first);
    }
  }
  if (modes.find("dense") != std::string::npos || modes.find("scale") != std::string::npos) {
    std::printf("\ndense baseline: the table as one dense key, push-pull per step, dist_sync\n");
    for (int64_t rows : Sizes(FLAGS_dense_rows)) {
      StatusOr<JobResult> r = RunJob("dense", 2, rows);
      if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;
      std::printf("  %12lld rows: %8.0f samples/s (a step: %.0f ms), worker %0.f MB, "
                  "servers %s MB\n",
                  static_cast<long long>(rows), FLAGS_batch / r->worker[0], r->worker[0] * 1e3,
                  r->worker[2], Servers(r->server_rss).c_str());
    }
  }
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
    return kvtrain::bench::RunNode();
  }
  return kvtrain::bench::RunDriver();
}
