// ps_test_node: one node of the transport's multi-process tests; the role
// and job come from the DMLC_* environment. --scenario=sums: servers add up
// pushed floats; every worker pushes known integer-valued floats for three
// key sets (one key; many small keys; one key larger than all others
// together), pulls them back after a barrier and checks the sums exactly.
// --scenario=traffic: workers push+pull until the job ends (kill tests).
// Exit status: 0 success, 2 bad setup, 3 job failed (the Postoffice's
// default failure handler), 4 finalize failed, 5 wrong sums, 6 request error.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "net/node_config.h"
#include "transport/ps/ps.h"

DEFINE_string(scenario, "sums", "sums or traffic");
DEFINE_int32(rounds, 2, "sums: push/pull rounds");
DEFINE_int32(pause_ms, 0, "sums: pause before each round");
DEFINE_int32(handler_threads, 2, "server handler threads");
DEFINE_int32(traffic_seconds, 300, "traffic: give up after this long");
DEFINE_string(marker_for_tests, "", "ignored: lets tests find the job's processes");

namespace kvtrain {
namespace {

using ps::Blob;
using ps::KVPairs;
using ps::KVServer;
using ps::KVWorker;
using ps::Postoffice;
using ps::RequestMeta;

constexpr auto kWait = std::chrono::seconds(120);

// Server: key -> float sums; pulls return the sums.
class SumServer {
 public:
  void Handle(const RequestMeta& meta, const KVPairs& kv, KVServer* server) {
    const size_t n = kv.num_keys();
    std::vector<float> out;
    std::vector<int64_t> lens;
    const float* in = kv.vals.as<float>();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (size_t i = 0; i < n; ++i) {
        const size_t len =
            kv.lens.empty() ? kv.vals.size() / 4 / n
                            : static_cast<size_t>(kv.lens.as<int64_t>()[i]) / 4;
        std::vector<float>& s = sums_[kv.key(i)];
        if (meta.push) {
          if (s.size() < len) s.resize(len, 0.f);
          for (size_t j = 0; j < len; ++j) s[j] += in[j];
          in += len;
        }
        if (meta.pull) {
          out.insert(out.end(), s.begin(), s.end());
          lens.push_back(static_cast<int64_t>(s.size() * 4));
        }
      }
    }
    KVPairs reply;
    if (meta.pull) {
      reply.keys = kv.keys;
      reply.vals = Blob::FromVector(std::move(out));
      reply.lens = Blob::FromVector(std::move(lens));
    }
    Status s = server->Respond(meta, reply);
    LOG_IF(ERROR, !s.ok()) << s;
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, std::vector<float>> sums_;
};

struct KeySet {
  std::string name;
  std::vector<uint64_t> keys;
  std::vector<int64_t> lens;  // bytes per key
};

std::vector<KeySet> MakeKeySets(const std::vector<ps::KeyRange>& ranges) {
  std::vector<KeySet> sets(3);
  sets[0].name = "single key";
  sets[0].keys = {ranges[0].begin + 5};
  sets[0].lens = {4096 * 4};
  sets[1].name = "many small keys";
  for (const ps::KeyRange& r : ranges) {
    for (int i = 0; i < 1200 / static_cast<int>(ranges.size()); ++i) {
      sets[1].keys.push_back(r.begin + 100 + 7 * i);
      sets[1].lens.push_back(2 * 4);
    }
  }
  sets[2].name = "one big key";
  for (size_t r = 0; r < ranges.size(); ++r) {
    for (int i = 0; i < 20; ++i) {
      sets[2].keys.push_back(ranges[r].begin + 50000 + i);
      sets[2].lens.push_back(4 * 4);
    }
    if (r == ranges.size() / 2) {  // the big key sits among the others
      sets[2].keys.push_back(ranges[r].begin + 60000);
      sets[2].lens.push_back(300000 * 4);
    }
  }
  return sets;
}

// The float pushed by worker `rank` at position j of a key set.
float Value(int rank, size_t j) { return (rank + 1) * float(j % 1000 + 1); }

int RunSumsWorker(Postoffice* po, KVWorker* w) {
  const std::vector<KeySet> sets = MakeKeySets(po->ServerKeyRanges());
  const int nw = po->num_workers();
  for (int round = 1; round <= FLAGS_rounds; ++round) {
    if (FLAGS_pause_ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(FLAGS_pause_ms));
    }
    std::vector<int64_t> pushes;
    for (const KeySet& set : sets) {
      size_t total = 0;
      for (int64_t l : set.lens) total += l / 4;
      std::vector<float> vals(total);
      for (size_t j = 0; j < total; ++j) vals[j] = Value(po->rank(), j);
      auto ts =
          w->Push(KVPairs::From(set.keys, Blob::FromVector(vals), set.lens));
      if (!ts.ok())
        return std::printf("push: %s\n", ts.status().ToString().c_str()), 6;
      pushes.push_back(*ts);
    }
    for (int64_t ts : pushes) {
      Status s = w->Wait(ts, kWait);
      if (!s.ok()) return std::printf("push: %s\n", s.ToString().c_str()), 6;
    }
    if (!po->Barrier(ps::kWorkerGroup, kWait).ok()) return 6;
    const float scale = round * nw * (nw + 1) / 2.0f;
    for (size_t si = 0; si < sets.size(); ++si) {
      const KeySet& set = sets[si];
      size_t total = 0;
      for (int64_t l : set.lens) total += l / 4;
      std::vector<float> got(total, -1.f);
      Status s;
      if (si == 2) {  // into a caller buffer, laid out by lens
        ps::PullDest dest;
        dest.data = reinterpret_cast<char*>(got.data());
        dest.size = total * 4;
        dest.lens = Blob::FromVector(set.lens);
        auto ts = w->Pull(Blob::FromVector(set.keys), {}, dest);
        s = ts.ok() ? w->Wait(*ts, kWait) : ts.status();
      } else {  // zero-copy views
        auto ts = w->Pull(Blob::FromVector(set.keys));
        ps::PullResult result;
        s = ts.ok() ? w->Wait(*ts, kWait, &result) : ts.status();
        if (s.ok())
          s = result.CopyTo(reinterpret_cast<char*>(got.data()), total * 4);
      }
      if (!s.ok()) return std::printf("pull: %s\n", s.ToString().c_str()), 6;
      for (size_t j = 0; j < total; ++j) {
        const float want = scale * float(j % 1000 + 1);
        if (got[j] != want) {
          std::printf("MISMATCH in %s round %d at value %zu: got %g want %g\n",
                      set.name.c_str(), round, j, got[j], want);
          return 5;
        }
      }
      std::printf("ps_test_node: %s round %d: %zu keys, %zu values exact\n",
                  set.name.c_str(), round, set.keys.size(), total);
    }
    if (!po->Barrier(ps::kWorkerGroup, kWait).ok()) return 6;
  }
  return 0;
}

int RunTrafficWorker(Postoffice* po, KVWorker* w) {
  std::vector<uint64_t> keys;
  for (const ps::KeyRange& r : po->ServerKeyRanges())
    keys.push_back(r.begin + 1);
  const auto stop = std::chrono::steady_clock::now() +
                    std::chrono::seconds(FLAGS_traffic_seconds);
  bool announced = false;
  while (std::chrono::steady_clock::now() < stop) {
    std::vector<float> vals(keys.size() * 1024, 1.f);
    auto ts = w->PushPull(KVPairs::From(keys, Blob::FromVector(vals)));
    Status s = ts.ok() ? w->Wait(*ts, kWait) : ts.status();
    if (!s.ok()) return std::printf("traffic: %s\n", s.ToString().c_str()), 6;
    if (!announced) {
      std::printf("ps_test_node: traffic running\n");
      std::fflush(stdout);
      announced = true;
    }
  }
  return 0;
}

int Main() {
  StatusOr<NodeConfig> config = NodeConfig::FromEnv(ProcessEnv());
  if (!config.ok()) {
    std::printf("ps_test_node: %s\n", config.status().ToString().c_str());
    return 2;
  }
  auto po = Postoffice::Create(*config);
  if (!po.ok()) {
    std::printf("ps_test_node: %s\n", po.status().ToString().c_str());
    return 2;
  }
  Status s = (*po)->Start();
  if (!s.ok())
    return std::printf("ps_test_node: %s\n", s.ToString().c_str()), 3;
  std::printf("ps_test_node: %s started\n", (*po)->name().c_str());
  std::fflush(stdout);
  int rc = 0;
  SumServer sums;
  std::unique_ptr<KVServer> server;
  if (config->role == Role::kServer) {
    ps::KVServerOptions so;
    so.handler_threads = FLAGS_handler_threads;
    auto srv = KVServer::Create(
        po->get(), 0,
        [&sums](const RequestMeta& m, const KVPairs& kv, KVServer* s) {
          sums.Handle(m, kv, s);
        },
        so);
    if (!srv.ok())
      return std::printf("%s\n", srv.status().ToString().c_str()), 2;
    server = std::move(*srv);
  } else if (config->role == Role::kWorker) {
    auto w = KVWorker::Create(po->get(), 0);
    if (!w.ok()) return std::printf("%s\n", w.status().ToString().c_str()), 2;
    rc = FLAGS_scenario == "traffic" ? RunTrafficWorker(po->get(), w->get())
                                     : RunSumsWorker(po->get(), w->get());
    if (rc != 0) return rc;
  }
  s = (*po)->Finalize(std::chrono::seconds(FLAGS_traffic_seconds + 120));
  if (!s.ok())
    return std::printf("ps_test_node: %s\n", s.ToString().c_str()), 4;
  std::printf("ps_test_node: %s done\n", (*po)->name().c_str());
  return 0;
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return kvtrain::Main();
}
