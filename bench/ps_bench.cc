// ps_bench: push+pull time and throughput of the parameter-server transport
// (KVWorker::PushPull, one key per server) for payloads of 4 B .. 64 MB,
// with 1 worker/1 server and 2 workers/2 servers, one or several requests in
// flight, next to its baseline measured in the same run: a zero-copy ZeroMQ
// DEALER/ROUTER echo of the same size between two processes on loopback.
// Every row prints ours/raw; the last line is a one-line summary. With
// --curve (default), each job also runs with security on as between hosts
// (CURVE, large frames on the sealed lane: the default) and with CURVE alone
// (KVTRAIN_SEALED_LANE=0), and two more tables print their cost next to the
// plain run;
// with --same_host (default), a third table shows the jobs as a user gets
// them on one host (security on: the same-host socket, no CURVE). The main
// and CURVE tables run over TCP, like the raw echo.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <malloc.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <map>
#include <sstream>

#include "base/malloc_tuning.h"
#include "net/node_config.h"
#include "bench/raw_echo.h"
#include "transport/ps/ps.h"
#include "tests/util/local_job.h"

DEFINE_string(sizes, "4,1024,65536,1048576,4194304,16777216,67108864",
              "payload bytes of one push (and of its pull)");
DEFINE_double(min_time, 0.6,
              "seconds per measurement (at least 3 ops); each row is the "
              "median of --reps measurements");
DEFINE_int32(reps, 5, "measurements per row, raw and ours alternating");
DEFINE_int32(in_flight, 4, "requests in flight in the pipelined rows");
DEFINE_string(jobs, "1x1,2x2", "jobs to run, <workers>x<servers>");
DEFINE_int32(handler_threads, 0,
             "server handler threads (0: on the receive thread)");
DEFINE_bool(keep_freed_memory, true,
            "in every process of the run (raw and ours alike): one malloc "
            "arena that keeps freed memory mapped, so that receive buffers "
            "are reused instead of page-faulted in for every message; and, "
            "unless GLIBC_TUNABLES is set, glibc.malloc.hugetlb=1: buffers "
            "above glibc's 32 MB mmap threshold cap, which are mapped afresh "
            "for every message, are faulted in 2 MB at a time");
DEFINE_bool(curve, true,
            "also run every job with security on over TCP (KVTRAIN_JOB_KEY: "
            "CURVE with the sealed lane, the default, and CURVE alone) and "
            "print their cost; the main table is without (like the raw echo)");
DEFINE_bool(same_host, true,
            "also run every job as a user gets it on one host (security on, peers "
            "over the same-host socket) and print it next to the plain TCP run");
DEFINE_int32(raw_echo_port, 0, "internal: run the echo server on this port");
DEFINE_int32(echo_client_port, 0, "internal: the echo server a job uses");
DEFINE_string(results_dir, "", "internal: where job workers write results");

namespace kvtrain {
namespace bench {
namespace {

using ps::Blob;
using ps::KVPairs;
using Clock = std::chrono::steady_clock;
constexpr auto kWait = std::chrono::seconds(300);

std::vector<size_t> Sizes() {
  std::vector<size_t> out;
  std::stringstream ss(FLAGS_sizes);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoull(item));
  return out;
}

std::string SizeName(size_t b) {
  char buf[32];
  if (b >= (1 << 20) && b % (1 << 20) == 0) {
    std::snprintf(buf, sizeof(buf), "%zuMB", b >> 20);
  } else if (b >= 1024 && b % 1024 == 0) {
    std::snprintf(buf, sizeof(buf), "%zuKB", b >> 10);
  } else {
    std::snprintf(buf, sizeof(buf), "%zuB", b);
  }
  return buf;
}

std::string TimeName(double us) {
  char buf[32];
  if (us >= 1000) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", us / 1000);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f us", us);
  }
  return buf;
}

// ---- Nodes of the benchmark job ----

// Answers a push+pull with the values it was pushed, as the raw echo
// server answers with what it received: the server does no arithmetic and
// keeps nothing between requests, so the job measures the transport alone.
// (Keeping each pushed value until the next push would make every receive
// buffer a different, cold one instead of the one just sent back: 5-10%
// at 16 MB on a 2-core VM, a cost of the store, not of the transport.)
void Echo(const ps::RequestMeta& meta, const KVPairs& kv,
          ps::KVServer* server) {
  Status s = meta.push && meta.pull
                 ? server->Respond(meta, kv)  // zero-copy
                 : server->RespondError(
                       meta, Status::InvalidArgument(
                                 "the ps_bench server answers push+pull only"));
  LOG_IF(ERROR, !s.ok()) << s;
}

// One size, `in_flight` PushPulls outstanding, for about min_time seconds.
StatusOr<EchoResult> TimePushPull(ps::KVWorker* w, const KVPairs& kv,
                                  size_t bytes, int in_flight) {
  for (int i = 0; i < 2; ++i) {  // warm-up
    KV_ASSIGN_OR_RETURN(int64_t ts, w->PushPull(kv));
    ps::PullResult r;
    KV_RETURN_IF_ERROR(w->Wait(ts, kWait, &r));
  }
  EchoResult res;
  res.bytes = bytes;
  res.in_flight = in_flight;
  std::deque<int64_t> q;
  const auto t0 = Clock::now();
  for (int i = 0; i < in_flight; ++i) {
    KV_ASSIGN_OR_RETURN(int64_t ts, w->PushPull(kv));
    q.push_back(ts);
  }
  for (;;) {
    ps::PullResult r;
    KV_RETURN_IF_ERROR(w->Wait(q.front(), kWait, &r));
    if (r.total_bytes() != bytes) {
      return Status::DataLoss("pulled " + std::to_string(r.total_bytes()) +
                              " bytes, pushed " + std::to_string(bytes));
    }
    q.pop_front();
    ++res.ops;
    res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (res.seconds >= FLAGS_min_time && res.ops >= 3) break;
    KV_ASSIGN_OR_RETURN(int64_t ts, w->PushPull(kv));
    q.push_back(ts);
  }
  for (int64_t ts : q) KV_RETURN_IF_ERROR(w->Wait(ts, kWait));
  return res;
}

std::vector<int> InFlights() {
  std::vector<int> k = {1};
  if (FLAGS_in_flight > 1) k.push_back(FLAGS_in_flight);
  return k;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rank 0 also runs the raw echo client, alternating with the job's own
// measurements so that both see the same machine conditions. Each line:
// "<raw|ours> <bytes> <in_flight> <us per op> <GB/s>" (medians).
Status RunWorker(ps::Postoffice* po) {
  KV_ASSIGN_OR_RETURN(auto w, ps::KVWorker::Create(po, 0));
  std::unique_ptr<EchoClient> echo;
  if (po->rank() == 0) {
    KV_ASSIGN_OR_RETURN(EchoClient * c,
                        EchoClient::Connect(FLAGS_echo_client_port));
    echo.reset(c);
  }
  std::vector<uint64_t> keys;
  for (const ps::KeyRange& r : po->ServerKeyRanges())
    keys.push_back(r.begin + 1);
  std::ofstream out(FLAGS_results_dir + "/worker-" +
                    std::to_string(po->rank()));
  // Every worker runs the same rows and barriers; 64 B gives the raw round
  // trip that the 1 KB target refers to.
  std::vector<size_t> sizes = Sizes();
  if (!std::count(sizes.begin(), sizes.end(), 64))
    sizes.insert(sizes.begin(), 64);
  for (size_t bytes : sizes) {
    std::vector<int64_t> lens;
    for (size_t i = 0; i < keys.size(); ++i) {
      lens.push_back(bytes / keys.size() + (i < bytes % keys.size() ? 1 : 0));
    }
    KVPairs kv = KVPairs::From(
        keys, Blob::FromVector(std::vector<char>(bytes, 'v')), lens);
    for (int in_flight : InFlights()) {
      std::vector<double> raw_us, raw_gbps, us, gbps;
      for (int rep = 0; rep < FLAGS_reps; ++rep) {
        KV_RETURN_IF_ERROR(po->Barrier(ps::kWorkerGroup, kWait));
        if (echo) {
          KV_ASSIGN_OR_RETURN(EchoResult r,
                              echo->Run(bytes, in_flight, FLAGS_min_time));
          raw_us.push_back(r.us_per_op());
          raw_gbps.push_back(r.gbps());
        }
        KV_RETURN_IF_ERROR(po->Barrier(ps::kWorkerGroup, kWait));
        KV_ASSIGN_OR_RETURN(EchoResult r,
                            TimePushPull(w.get(), kv, bytes, in_flight));
        us.push_back(r.us_per_op());
        gbps.push_back(r.gbps());
      }
      if (echo) {
        out << "raw " << bytes << " " << in_flight << " " << Median(raw_us)
            << " " << Median(raw_gbps) << "\n";
      }
      out << "ours " << bytes << " " << in_flight << " " << Median(us) << " "
          << Median(gbps) << "\n";
    }
  }
  out.close();
  return po->Barrier(ps::kWorkerGroup, kWait);
}

int RunNode() {
  StatusOr<NodeConfig> config = NodeConfig::FromEnv(ProcessEnv());
  if (!config.ok())
    return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 2;
  auto po = ps::Postoffice::Create(*config);
  if (!po.ok())
    return std::fprintf(stderr, "%s\n", po.status().ToString().c_str()), 2;
  Status s = (*po)->Start();
  std::unique_ptr<ps::KVServer> server;
  if (s.ok() && config->role == Role::kServer) {
    ps::KVServerOptions so;
    so.handler_threads = FLAGS_handler_threads;
    auto srv = ps::KVServer::Create(po->get(), 0, Echo, so);
    s = srv.status();
    if (srv.ok()) server = std::move(*srv);
  }
  if (s.ok() && config->role == Role::kWorker) s = RunWorker(po->get());
  if (s.ok()) s = (*po)->Finalize(kWait);
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  return 0;
}

// ---- The driver ----

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : "";
}

std::string MachineLine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  int major, minor, patch;
  zmq_version(&major, &minor, &patch);
  std::ostringstream os;
  os << model << ", " << sysconf(_SC_NPROCESSORS_ONLN) << " cores; ZeroMQ "
     << major << "." << minor << "." << patch;
  return os.str();
}

struct Row {
  double raw_us = 0;  // raw echo, measured by worker 0
  double us = 0;      // ours: mean over workers
  double gbps = 0;    // ours: total over workers
};
using Rows = std::map<std::pair<size_t, int>, Row>;

// `same_host`: peers talk over the same-host socket (the default on one
// host); else over TCP, as between hosts and as the raw echo does.
// `sealed_lane`: with `secure`, large frames go over the sealed lane (the
// default) instead of CURVE.
StatusOr<Rows> MeasureJob(int workers, int servers, int echo_port, bool secure,
                          bool same_host, bool sealed_lane = true) {
  testutil::LocalJobOptions o;
  o.binary = SelfPath();
  o.secure = secure;
  o.env["KVTRAIN_SAME_HOST_IPC"] = same_host ? "1" : "0";
  o.env["KVTRAIN_SEALED_LANE"] = sealed_lane ? "1" : "0";
  o.num_workers = workers;
  o.num_servers = servers;
  o.log_dir = testutil::NewTempDir("ps_bench-");
  o.args = {"--sizes=" + FLAGS_sizes,
            "--min_time=" + std::to_string(FLAGS_min_time),
            "--reps=" + std::to_string(FLAGS_reps),
            "--in_flight=" + std::to_string(FLAGS_in_flight),
            "--handler_threads=" + std::to_string(FLAGS_handler_threads),
            std::string("--keep_freed_memory=") +
                (FLAGS_keep_freed_memory ? "true" : "false"),
            "--echo_client_port=" + std::to_string(echo_port),
            "--results_dir=" + o.log_dir};
  KV_ASSIGN_OR_RETURN(auto job, testutil::LocalJob::Start(o));
  if (!job->WaitAll(std::chrono::minutes(30)) || !job->AllSucceeded()) {
    return Status::Internal("benchmark job failed:\n" + job->Report());
  }
  Rows rows;
  for (int r = 0; r < workers; ++r) {
    std::ifstream in(o.log_dir + "/worker-" + std::to_string(r));
    std::string kind;
    size_t bytes;
    int in_flight;
    double us, gbps;
    while (in >> kind >> bytes >> in_flight >> us >> gbps) {
      Row& row = rows[{bytes, in_flight}];
      if (kind == "raw") {
        row.raw_us = us;
      } else {
        row.us += us / workers;
        row.gbps += gbps;
      }
    }
  }
  return rows;
}

void PrintRows(const std::string& name, const Rows& rows,
               const std::vector<size_t>& sizes) {
  for (const auto& [key, row] : rows) {
    if (key.first == 64 && !std::count(sizes.begin(), sizes.end(), 64)) {
      continue;  // measured for the 1 KB target line only
    }
    std::printf("%-6s %7s %9d %12s %12s %9.2f %12.2f\n", name.c_str(),
                SizeName(key.first).c_str(), key.second,
                TimeName(row.raw_us).c_str(), TimeName(row.us).c_str(),
                row.us / row.raw_us, row.gbps);
  }
}

// Plain vs CURVE, row by row.
void PrintCurveRows(const std::string& name, const Rows& plain,
                    const Rows& curve, const std::vector<size_t>& sizes) {
  for (const auto& [key, row] : plain) {
    if (!std::count(sizes.begin(), sizes.end(), key.first)) continue;
    auto it = curve.find(key);
    if (it == curve.end()) continue;
    const Row& c = it->second;
    std::printf("%-6s %7s %9d %12s %12s %11.2f %10.2f %10.2f\n", name.c_str(),
                SizeName(key.first).c_str(), key.second,
                TimeName(row.us).c_str(), TimeName(c.us).c_str(),
                c.us / row.us, row.gbps, c.gbps);
  }
}

// The 1 KB line and, last, the one-line summary (1 MB if measured, else the
// largest size) of the first job.
void PrintSummary(const std::string& name, const Rows& rows,
                  const std::vector<size_t>& sizes) {
  const double raw64 = rows.at({64, 1}).raw_us;
  if (rows.count({1024, 1})) {
    const double us = rows.at({1024, 1}).us;
    std::printf("\n%s 1KB push+pull %s = %.2f x raw 64B round trip (%s)\n",
                name.c_str(), TimeName(us).c_str(), us / raw64,
                TimeName(raw64).c_str());
  }
  size_t pick = *std::max_element(sizes.begin(), sizes.end());
  if (std::count(sizes.begin(), sizes.end(), size_t{1} << 20)) pick = 1 << 20;
  const Row& row = rows.at({pick, 1});
  std::printf("ps_bench: %s push+pull %s = %.2f x raw zmq echo\n",
              SizeName(pick).c_str(), TimeName(row.us).c_str(),
              row.us / row.raw_us);
}

int Fail(const Status& s) {
  std::fprintf(stderr, "ps_bench: %s\n", s.ToString().c_str());
  return 1;
}

int RunDriver() {
  const std::vector<size_t> sizes = Sizes();
  std::printf(
      "ps_bench: kvtrain push+pull (KVWorker::PushPull, one key per server, "
      "%d server handler thread%s) vs raw ZeroMQ zero-copy DEALER/ROUTER echo "
      "of the same size between two processes, both over tcp://127.0.0.1, "
      "alternating in this run; each row: median of %d x %.2f s\n",
      FLAGS_handler_threads, FLAGS_handler_threads == 1 ? "" : "s", FLAGS_reps,
      FLAGS_min_time);
  std::printf("machine: %s\n", MachineLine().c_str());
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::printf("malloc: %s; GLIBC_TUNABLES=%s\n\n",
              FLAGS_keep_freed_memory
                  ? "one arena, freed memory kept (--keep_freed_memory)"
                  : "glibc defaults (--nokeep_freed_memory)",
              tunables != nullptr ? tunables : "(unset)");
  StatusOr<int> port = testutil::FreeTcpPort();
  if (!port.ok()) return Fail(port.status());
  testutil::ProcessOptions po;
  po.argv = {SelfPath(), "--raw_echo_port=" + std::to_string(*port),
             std::string("--keep_freed_memory=") +
                 (FLAGS_keep_freed_memory ? "true" : "false")};
  auto echo_server = testutil::Process::Spawn(po);
  if (!echo_server.ok()) return Fail(echo_server.status());
  std::printf("%-6s %7s %9s %12s %12s %9s %12s\n", "job", "size", "in flight",
              "raw echo", "push+pull", "ours/raw", "GB/s (ours)");
  std::vector<std::pair<std::string, Rows>> jobs;
  std::vector<Rows> curve_jobs, curve_only_jobs, same_host_jobs;
  std::stringstream js(FLAGS_jobs);
  std::string spec;
  while (std::getline(js, spec, ',')) {
    int w = 0, s = 0;
    if (std::sscanf(spec.c_str(), "%dx%d", &w, &s) != 2 || w < 1 || s < 1) {
      return Fail(Status::InvalidArgument("--jobs: bad entry \"" + spec +
                                          "\" (want <workers>x<servers>)"));
    }
    StatusOr<Rows> rows = MeasureJob(w, s, *port, /*secure=*/false, /*same_host=*/false);
    if (!rows.ok()) return Fail(rows.status());
    jobs.emplace_back(std::to_string(w) + "w" + std::to_string(s) + "s",
                      std::move(*rows));
    PrintRows(jobs.back().first, jobs.back().second, sizes);
    std::fflush(stdout);
    if (FLAGS_curve) {
      StatusOr<Rows> secure = MeasureJob(w, s, *port, /*secure=*/true, /*same_host=*/false);
      if (!secure.ok()) return Fail(secure.status());
      curve_jobs.push_back(std::move(*secure));
      StatusOr<Rows> curve_only =
          MeasureJob(w, s, *port, /*secure=*/true, /*same_host=*/false,
                     /*sealed_lane=*/false);
      if (!curve_only.ok()) return Fail(curve_only.status());
      curve_only_jobs.push_back(std::move(*curve_only));
    }
    if (FLAGS_same_host) {
      StatusOr<Rows> local = MeasureJob(w, s, *port, /*secure=*/true, /*same_host=*/true);
      if (!local.ok()) return Fail(local.status());
      same_host_jobs.push_back(std::move(*local));
    }
  }
  // One table of `other` against the plain jobs, row by row.
  auto table = [&](const char* title, const char* plain, const char* name,
                   const char* short_name, const std::vector<Rows>& other) {
    std::printf("\n%s, the same jobs in this run:\n", title);
    std::printf("%-6s %7s %9s %12s %12s %11s %10s %10s\n", "job", "size",
                "in flight", plain, name,
                (std::string(short_name) + "/plain").c_str(), "GB/s plain",
                (std::string("GB/s ") + short_name).c_str());
    for (size_t i = 0; i < other.size(); ++i) {
      PrintCurveRows(jobs[i].first, jobs[i].second, other[i], sizes);
    }
  };
  if (FLAGS_curve) {
    table(
        "Security between hosts as a user gets it (KVTRAIN_JOB_KEY: CURVE, "
        "then every "
        "message on the sealed lane, AES-256-GCM) vs plain",
        "plain", "secure", "secure", curve_jobs);
    table(
        "CURVE alone (KVTRAIN_SEALED_LANE=0: every byte through CURVE) vs "
        "plain",
        "plain", "CURVE", "CURVE", curve_only_jobs);
  }
  if (FLAGS_same_host) {
    table(
        "Default settings on one host (security on: the same-host socket, no "
        "CURVE) vs "
        "plain TCP",
        "plain TCP", "same-host", "same", same_host_jobs);
  }
  if (StatusOr<EchoClient*> c = EchoClient::Connect(*port); c.ok()) {
    (*c)->Stop();  // an empty message ends the echo server
    delete *c;
  }
  (*echo_server)->Wait(std::chrono::seconds(30));
  PrintSummary(jobs.front().first, jobs.front().second, sizes);
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (FLAGS_keep_freed_memory) {
    // Same setting on both sides of the comparison (the echo server and the
    // job's nodes are this binary too).
    kvtrain::KeepFreedMemory();
    // glibc reads its tunables at start-up: this applies to the processes
    // the driver starts. Without it, a 64 MB receive buffer costs 16384
    // page faults per message (about 290 ms on a 2-vCPU VM; 12 ms in 2 MB
    // pages).
    setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", /*overwrite=*/0);
  }
  if (FLAGS_raw_echo_port != 0) {
    kvtrain::Status s = kvtrain::bench::RunEchoServer(FLAGS_raw_echo_port);
    return s.ok() ? 0 : 1;
  }
  if (kvtrain::NodeConfig::InDistributedJob(kvtrain::ProcessEnv())) {
    return kvtrain::bench::RunNode();
  }
  return kvtrain::bench::RunDriver();
}
