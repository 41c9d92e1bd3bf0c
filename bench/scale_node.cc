// scale_node: one node of bench/scale_bench.py's jobs (scheduler, server or
// worker, from the DMLC_* environment), light enough to start a thousand on
// one host. Every node prints `scale_node: <role> <rank> key=value ...` lines
// that the benchmark reads; times are CLOCK_MONOTONIC nanoseconds, which the
// benchmark's own clock shares.
//
// --scenario=run: start; push-pull rounds (each worker one key on every
// server); barriers over every node and over the workers; an idle spell in
// which every node measures its own CPU; memory; a clean end.
// --scenario=traffic: workers push-pull until the job ends (a node is
// killed); servers serve; the scheduler waits.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/ps/ps.h"
#include "net/node_config.h"

DEFINE_string(scenario, "run", "run or traffic");
DEFINE_int32(rounds, 5, "run: push-pull rounds measured after one warm-up");
DEFINE_int32(barriers, 20, "run: back-to-back barriers measured per group");
DEFINE_double(idle_seconds, 10, "run: seconds the job sits idle");
DEFINE_int32(value_bytes, 1024, "bytes each worker pushes to each server per round");
DEFINE_int32(traffic_seconds, 600, "traffic: give up after this long");
DEFINE_int32(step_ms, 100, "traffic: a worker's pause between push-pulls (its compute)");

namespace kvtrain {
namespace {

using ps::Blob;
using ps::KVPairs;
using ps::Postoffice;

constexpr auto kWait = std::chrono::seconds(600);

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t CpuNs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// "<role> <rank>", the prefix of every line this node prints.
std::string g_me = "node";

void Report(const std::string& fields) {
  std::printf("scale_node: %s %s\n", g_me.c_str(), fields.c_str());
  std::fflush(stdout);
}

// kB fields of /proc/self/status and /proc/self/smaps_rollup.
std::string MemoryFields() {
  std::map<std::string, long> kb;
  for (const char* path : {"/proc/self/status", "/proc/self/smaps_rollup"}) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      char name[64];
      long value;
      if (std::sscanf(line.c_str(), "%63s %ld", name, &value) == 2) kb[name] = value;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof(buf), "rss_kb=%ld anon_kb=%ld shmem_kb=%ld pss_kb=%ld threads=%ld",
                kb["VmRSS:"], kb["RssAnon:"], kb["RssShmem:"], kb["Pss:"], kb["Threads:"]);
  return buf;
}

// One key in the middle of every server's range.
std::vector<uint64_t> KeyPerServer(Postoffice* po) {
  std::vector<uint64_t> keys;
  for (const ps::KeyRange& r : po->ServerKeyRanges()) keys.push_back(r.begin + 1);
  return keys;
}

Status PushPull(ps::KVWorker* w, const std::vector<uint64_t>& keys) {
  std::vector<char> vals(keys.size() * FLAGS_value_bytes, 1);
  StatusOr<int64_t> ts = w->PushPull(KVPairs::From(keys, Blob::FromVector(std::move(vals))));
  return ts.ok() ? w->Wait(*ts, kWait) : ts.status();
}

// Times `n` back-to-back barriers over `groups`; the mean in ms.
StatusOr<double> TimeBarriers(Postoffice* po, int groups, int n) {
  KV_RETURN_IF_ERROR(po->Barrier(groups, kWait));  // line up first
  const int64_t t0 = MonoNs();
  for (int i = 0; i < n; ++i) KV_RETURN_IF_ERROR(po->Barrier(groups, kWait));
  return (MonoNs() - t0) / 1e6 / std::max(1, n);
}

// The worker's side of --scenario=run: rounds, then its part of the barriers.
Status WorkerRounds(Postoffice* po, ps::KVWorker* w) {
  const std::vector<uint64_t> keys = KeyPerServer(po);
  KV_RETURN_IF_ERROR(PushPull(w, keys));  // warm-up: rings and arenas set up
  std::vector<double> ms;
  for (int r = 0; r < FLAGS_rounds; ++r) {
    KV_RETURN_IF_ERROR(po->Barrier(ps::kWorkerGroup, kWait));
    const int64_t t0 = MonoNs();
    KV_RETURN_IF_ERROR(PushPull(w, keys));
    ms.push_back((MonoNs() - t0) / 1e6);
  }
  std::sort(ms.begin(), ms.end());
  char buf[128];
  std::snprintf(buf, sizeof(buf), "round_ms=%.3f round_max_ms=%.3f keys=%zu",
                ms.empty() ? 0.0 : ms[ms.size() / 2], ms.empty() ? 0.0 : ms.back(),
                keys.size());
  Report(buf);
  StatusOr<double> workers = TimeBarriers(po, ps::kWorkerGroup, FLAGS_barriers);
  KV_RETURN_IF_ERROR(workers.status());
  if (po->rank() == 0) Report("barrier_workers_ms=" + std::to_string(*workers));
  return Status::OK();
}

// Every role's --scenario=run after Start.
Status Run(Postoffice* po, ps::KVWorker* w) {
  if (w != nullptr) KV_RETURN_IF_ERROR(WorkerRounds(po, w));
  StatusOr<double> all = TimeBarriers(po, ps::kAllGroups, FLAGS_barriers);
  KV_RETURN_IF_ERROR(all.status());
  if (w != nullptr && po->rank() == 0) Report("barrier_all_ms=" + std::to_string(*all));
  // The idle spell: nothing but heartbeats between the two barriers.
  KV_RETURN_IF_ERROR(po->Barrier(ps::kAllGroups, kWait));
  const int64_t wall0 = MonoNs(), cpu0 = CpuNs();
  if (w != nullptr) {
    std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_idle_seconds));
  }
  KV_RETURN_IF_ERROR(po->Barrier(ps::kAllGroups, kWait));
  char buf[96];
  std::snprintf(buf, sizeof(buf), "idle_cpu_ms=%.1f idle_wall_ms=%.1f", (CpuNs() - cpu0) / 1e6,
                (MonoNs() - wall0) / 1e6);
  Report(buf);
  Report(MemoryFields());
  if (w != nullptr && po->rank() == 0) Report("finalize_ns=" + std::to_string(MonoNs()));
  return Status::OK();
}

Status Traffic(Postoffice* po, ps::KVWorker* w) {
  const std::vector<uint64_t> keys = KeyPerServer(po);
  const int64_t stop = MonoNs() + FLAGS_traffic_seconds * 1000000000LL;
  KV_RETURN_IF_ERROR(PushPull(w, keys));
  if (po->rank() == 0) Report("traffic running");
  while (MonoNs() < stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_step_ms));
    KV_RETURN_IF_ERROR(PushPull(w, keys));
  }
  return Status::OK();
}

int Main() {
  const int64_t launched = MonoNs();
  StatusOr<NodeConfig> config = NodeConfig::FromEnv(ProcessEnv());
  if (!config.ok()) return std::printf("scale_node: %s\n", config.status().ToString().c_str()), 2;
  g_me = std::string(RoleName(config->role)) + " " +
         std::to_string(config->role == Role::kScheduler ? 0 : config->requested_rank);
  StatusOr<std::unique_ptr<Postoffice>> po = Postoffice::Create(*config);
  Status s = po.status();
  if (s.ok()) s = (*po)->Start();
  if (!s.ok()) return std::printf("scale_node: %s\n", s.ToString().c_str()), 3;
  Postoffice* p = po->get();
  g_me = std::string(RoleName(p->role())) + " " + std::to_string(p->rank());
  Report("pid=" + std::to_string(getpid()) + " exec_ns=" + std::to_string(launched) +
         " started_ns=" + std::to_string(MonoNs()));
  std::unique_ptr<ps::KVServer> server;
  std::unique_ptr<ps::KVWorker> worker;
  if (p->role() == Role::kServer) {
    // Answers a push-pull with the bytes pushed: the transport is measured.
    StatusOr<std::unique_ptr<ps::KVServer>> srv = ps::KVServer::Create(
        p, 0, [](const ps::RequestMeta& m, const KVPairs& kv, ps::KVServer* server) {
          Status st = server->Respond(m, kv);
          LOG_IF(ERROR, !st.ok()) << st;
        });
    s = srv.status();
    if (s.ok()) server = std::move(*srv);
  } else if (p->role() == Role::kWorker) {
    StatusOr<std::unique_ptr<ps::KVWorker>> wk = ps::KVWorker::Create(p, 0);
    s = wk.status();
    if (s.ok()) worker = std::move(*wk);
  }
  if (s.ok() && worker != nullptr && p->rank() == 0) {
    Report("first_step_ns=" + std::to_string(MonoNs()));
  }
  if (s.ok()) {
    if (FLAGS_scenario == "traffic") {
      if (worker != nullptr) s = Traffic(p, worker.get());
    } else {
      s = Run(p, worker.get());
    }
  }
  if (s.ok()) s = p->Finalize(std::chrono::seconds(FLAGS_traffic_seconds + 600));
  if (!s.ok()) return std::printf("scale_node: %s\n", s.ToString().c_str()), 4;
  return 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::SetUsageMessage("one node of bench/scale_bench.py's jobs");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  return kvtrain::Main();
}
