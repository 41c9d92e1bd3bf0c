// The environment table and the variable parsers.
#include "base/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace kvtrain {

const std::vector<EnvVarDoc>& EnvVarDocs() {
  static const std::vector<EnvVarDoc> kDocs = {
      {env::kRole, "(none)",
       "`scheduler`, `server` or `worker`; set by tracker/launch.py. Unset "
       "means a single-process job."},
      {env::kRootUri, "(none)", "Host name or IPv4 address of the scheduler."},
      {env::kRootPort, "(none)",
       "Port the scheduler listens on (1-65535); 0 lets the scheduler pick a "
       "free port and write it to KVTRAIN_SCHEDULER_PORT_FILE."},
      {env::kNumWorker, "(none)", "Number of worker processes (>= 1)."},
      {env::kNumServer, "(none)",
       "Number of server processes (>= 0; 0 for all-reduce jobs)."},
      {env::kInterface, "(none)",
       "Network interface whose IPv4 address this node advertises; an "
       "unknown name is an error listing the interfaces that exist."},
      {env::kNodeHost, "(none)",
       "Address this node advertises (overrides DMLC_INTERFACE)."},
      {env::kNodePort, "0 (any free port)", "Port a server or worker binds."},
      {env::kRank, "(none)",
       "The rank this server or worker asks for within its role; honoured "
       "when the role's requests are exactly 0..n-1 (tracker/launch.py sets "
       "them), otherwise ranks follow the address order."},
      {env::kSchedulerPortFile, "(none)",
       "Scheduler with DMLC_PS_ROOT_PORT=0: the file it writes its port to, "
       "atomically, once it listens."},
      {env::kVerbose, "0",
       "1: log registrations, ranks, connections, barriers; 2: also every "
       "data message."},
      {env::kHeartbeatInterval, "1",
       "Seconds between heartbeats (decimals allowed; 0 turns heartbeats "
       "off)."},
      {env::kHeartbeatTimeout, "10",
       "Seconds of silence after which a peer is declared dead and the job "
       "is stopped."},
      {env::kStartupTimeout, "60",
       "Seconds the scheduler waits for every node to register before the "
       "job fails naming who is missing."},
      {env::kServerReplicas, "0",
       "Copies of each server's key range on the next servers "
       "(`launch.py --server-replicas`): the job goes on when that many "
       "servers die. Less than `DMLC_NUM_SERVER`; every node of a job must "
       "have the same."},
      {env::kWorkerRestarts, "0",
       "How many times the launcher starts a dead worker (with "
       "`--server-replicas`, also a dead server) again (`launch.py "
       "--max-restarts`); above 0 the job waits for a dead worker to come "
       "back instead of ending, and the servers keep each key's previous "
       "value for it."},
      {env::kRejoinTimeout, "60",
       "Seconds the job waits for a dead worker to come back "
       "(KVTRAIN_WORKER_RESTARTS > 0) before it ends naming the worker."},
      {env::kNumThreads, "cores available to the process",
       "CPU threads for operators and BLAS. `tracker/launch.py --launcher "
       "local` sets it, unless it or `OMP_NUM_THREADS` is set: cores / workers "
       "for each worker, 1 for each server."},
      {env::kOmpNumThreads, "(none)",
       "Used for the CPU thread count when KVTRAIN_NUM_THREADS is unset."},
      {env::kEngine, "threaded",
       "`threaded` runs operations asynchronously with dependency tracking; "
       "`naive` runs each one synchronously (debugging)."},
      {env::kCheckNan, "0",
       "1: check every operator output for NaN/Inf and fail naming the "
       "operator."},
      {env::kBigArrayBound, "65536",
       "Arrays with at least this many elements are split evenly across all "
       "servers; smaller ones go whole to one server, placed to balance "
       "bytes."},
      {env::kMxnetBigArrayBound, "(none)",
       "Accepted for KVTRAIN_BIGARRAY_BOUND when that is unset."},
      {env::kServerThreads, "2 (0 on one host or with 1 CPU thread)",
       "Threads per server applying updates (different keys in parallel; 0 "
       "runs them on the receive thread). Unset: 0 when every process of the "
       "job is on one host, where each request reaches the receive thread "
       "straight from its sender's shared-memory ring and a handler thread "
       "would add a wake-up per request, and 0 when the server has one CPU "
       "thread (KVTRAIN_NUM_THREADS=1, as tracker/launch.py gives servers "
       "that share a host's cores), where a handler thread has no core of "
       "its own."},
      {env::kKVStoreTimeout, "600",
       "Seconds a KVStore push, pull or command may wait for the servers."},
      {env::kKeepFreedMemory, "1",
       "Dist KVStore and all-reduce processes: 1 keeps freed memory in "
       "glibc's one arena so large receive buffers are reused instead of "
       "page-faulted in per message; 0 leaves malloc alone."},
      {env::kJobKey, "(none)",
       "The job's CURVE secret key (40 characters of Z85 text); every "
       "ZeroMQ socket is encrypted and admits only holders of this key. "
       "tracker/launch.py generates one per job."},
      {env::kJobKeyFile, "(none)",
       "Used when KVTRAIN_JOB_KEY is unset: a file holding the key, mode "
       "0600 or stricter. With neither (and no KVTRAIN_INSECURE=1) a "
       "distributed node refuses to start."},
      {env::kInsecure, "0",
       "1: no CURVE (plain ZeroMQ; anyone who reaches the ports can join); "
       "logs a warning. tracker/launch.py --insecure sets it."},
      {env::kJobId, "(none)",
       "The launcher's name for the job (tracker/launch.py sets a random "
       "one); the scheduler refuses a node whose job id differs from its "
       "own."},
      {env::kOmpiRank, "(none)",
       "Set by Open MPI's mpirun: this process's rank in an all-reduce group "
       "(with OMPI_COMM_WORLD_SIZE); read before PMI_* and DMLC_*."},
      {env::kOmpiSize, "(none)",
       "Set by Open MPI's mpirun: the all-reduce group's size."},
      {env::kPmiRank, "(none)",
       "Set by MPICH/Hydra's mpiexec: the rank, when OMPI_COMM_WORLD_RANK is "
       "unset."},
      {env::kPmiSize, "(none)",
       "Set by MPICH/Hydra's mpiexec: the group's size."},
      {env::kRendezvous, "(none)",
       "host:port of an all-reduce group's rendezvous; under mpirun rank 0 "
       "listens there. Unset: DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT "
       "(tracker/launch.py's scheduler serves it)."},
      {env::kAllreduceBucketBytes, "4194304",
       "dist_allreduce: gradients are fused into buckets of about this many "
       "bytes, each all-reduced as soon as all of its keys are pushed."},
      {env::kAllreducePieceBytes, "4194304",
       "Ring all-reduce: each rank's segment travels in pieces of at most this "
       "many bytes, so reducing one piece overlaps receiving the next."},
      {env::kAllreduceDoublingBytes, "1048576",
       "All-reduces of at most this many bytes in a group whose size is a "
       "power of two use recursive doubling (log2 n rounds) instead of the "
       "ring (2(n-1) rounds); 0: always the ring."},
      {env::kPsBucketBytes, "65536 (262144 on one host)",
       "Dist stores: push-pulls wait in a bucket and travel as one request per "
       "server (ps-lite's multi-key messages), sent when the next key would "
       "overfill this many bytes, when the worker waits or when its step has "
       "made its last push-pull. The default is 262144 when every server and "
       "worker of the job is on one host (same-host sockets and shared "
       "memory: more messages only cost thread wake-ups), else 65536. 0: one "
       "request per key (uncut unless KVTRAIN_PS_PIECE_BYTES is given)."},
      {env::kPsPieceBytes, "65536 (262144 on one host)",
       "Dist stores: larger keys are cut into pieces of about this many bytes "
       "of what a push-pull moves on the wire, the heavier way (the push, or "
       "its answer: float32, halves or levels; on one host, float32 bytes), "
       "at most 8 per server between hosts and 4 on one host unless pieces "
       "would exceed 4 MiB; each piece "
       "is updated and answered on its own and travels in a request of at "
       "most this many bytes, so that one piece's transfer overlaps "
       "another's update and answer. Unset: KVTRAIN_PS_BUCKET_BYTES where "
       "that is given, else the default. 0: keys travel uncut."},
      {env::kSameHostIpc, "1",
       "Processes of a job on the same host (same kernel and network "
       "namespace) connect over a Unix-domain socket in /tmp/kvtrain-<uid> "
       "(mode 0700) that only the job's user id may open, without CURVE (the "
       "kernel vouches for the peer), instead of TCP; parameter servers and "
       "all-reduce groups alike. "
       "0: always TCP (with CURVE unless insecure)."},
      {env::kShmBytes, "67108864",
       "Parameter-server nodes on the same host (over the same-host socket) "
       "pass frames of 16 KiB and more through shared memory: the sender "
       "copies the frame into an arena of this many bytes per connection (a "
       "memfd, allocated as pages are first written) and sends where it lies; "
       "the receiver reads it in place from /proc/PID/fd (which the kernel "
       "opens only to the same user). A frame that finds no room goes through "
       "the socket. 0: every frame through the socket."},
      {env::kShmRing, "1",
       "With shared memory on (KVTRAIN_SHM_BYTES > 0), every message to a "
       "parameter-server node on the same host goes through a ring in shared "
       "memory (a memfd, 1 MiB per connection) instead of the socket, and the "
       "sending thread wakes the receiving thread directly through its "
       "doorbell (a pipe): one thread wake-up per message, where the socket "
       "costs three (both processes' ZeroMQ I/O threads). 0: the socket."},
      {env::kSealedLane, "1",
       "With security on, a parameter-server node or all-reduce rank that "
       "reaches a peer over TCP sends it its messages over a second connection "
       "(the sealed lane), every frame encrypted and authenticated with "
       "AES-256-GCM under a random key given to the peer over CURVE once CURVE "
       "has authenticated it: about 2.8 times less CPU per byte than CURVE's "
       "own encryption. 0: every message over CURVE."},
      {env::kSshStrictHostKeys, "0",
       "1: the ssh launcher uses StrictHostKeyChecking=yes (only hosts already "
       "in known_hosts receive the job key); the same as tracker/launch.py "
       "--ssh-strict-host-keys. 0: accept-new (a first-seen host is trusted)."},
      {env::kTrace, "(none)",
       "A file prefix: every process writes a timeline of its training steps, "
       "KVStore requests, messages and server work to PREFIX.<pid>.json "
       "(Chrome trace events); tools/trace_report.py merges a job's files and "
       "prints where a step's time goes."},
      {env::kWaitSpinUs, "200 (1000 on one host)",
       "A worker's Wait for a small push/pull (at most 64 KB each way; any "
       "push/pull when every process of the job is on one host) polls for this "
       "many microseconds, yielding the CPU, before it sleeps: the response "
       "then needs no thread wake-up; 0: sleep at once."},
  };
  return kDocs;
}

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
}

EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](
             const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

namespace {

std::string Quoted(const std::string& name, const std::string& value) {
  return name + "=\"" + value + "\"";
}

}  // namespace

StatusOr<int64_t> ParseIntVar(const std::string& name, const std::string& value,
                              int64_t min, int64_t max) {
  std::ostringstream expected;
  expected << ": expected an integer in [" << min << ", " << max << "]";
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || end == value.c_str() || *end != '\0' || errno != 0) {
    return Status::InvalidArgument(Quoted(name, value) + expected.str());
  }
  if (v < min || v > max) {
    return Status::InvalidArgument(Quoted(name, value) + expected.str());
  }
  return static_cast<int64_t>(v);
}

StatusOr<double> ParseSecondsVar(const std::string& name,
                                 const std::string& value, double min,
                                 double max) {
  std::ostringstream expected;
  expected << ": expected a number of seconds in [" << min << ", " << max
           << "]";
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == value.c_str() || *end != '\0' || errno != 0 ||
      !std::isfinite(v) || v < min || v > max) {
    return Status::InvalidArgument(Quoted(name, value) + expected.str());
  }
  return v;
}

StatusOr<bool> ParseBoolVar(const std::string& name, const std::string& value) {
  if (value == "1" || value == "true" || value == "yes" || value == "on") {
    return true;
  }
  if (value == "0" || value == "false" || value == "no" || value == "off") {
    return false;
  }
  return Status::InvalidArgument(Quoted(name, value) +
                                 ": expected 0 or 1 (or true/false)");
}

StatusOr<int64_t> GetIntVar(const EnvLookup& env, const std::string& name,
                            int64_t fallback, int64_t min, int64_t max) {
  const auto v = env(name);
  if (!v) return fallback;
  return ParseIntVar(name, *v, min, max);
}

StatusOr<double> GetSecondsVar(const EnvLookup& env, const std::string& name,
                               double fallback, double min, double max) {
  const auto v = env(name);
  if (!v) return fallback;
  return ParseSecondsVar(name, *v, min, max);
}

StatusOr<bool> GetBoolVar(const EnvLookup& env, const std::string& name,
                          bool fallback) {
  const auto v = env(name);
  if (!v) return fallback;
  return ParseBoolVar(name, *v);
}

StatusOr<std::string> RequireVar(const EnvLookup& env, const std::string& name,
                                 const std::string& why) {
  auto v = env(name);
  if (!v) return Status::InvalidArgument(name + " is not set: " + why);
  return *v;
}

}  // namespace kvtrain
