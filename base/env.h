// The environment-variable contract of kvtrain, in one place: every variable
// any part of kvtrain reads is a named constant here and a row of kEnvVars
// (name, default, meaning), which docs/environment.md's table mirrors
// (env_test checks code -> doc).
// Reading goes through an EnvLookup so tests can supply their own environment.
#ifndef KVTRAIN_BASE_ENV_H_
#define KVTRAIN_BASE_ENV_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvtrain {
namespace env {

// Roles and the scheduler's address (set by tracker/launch.py).
inline constexpr char kRole[] = "DMLC_ROLE";
inline constexpr char kRootUri[] = "DMLC_PS_ROOT_URI";
inline constexpr char kRootPort[] = "DMLC_PS_ROOT_PORT";
inline constexpr char kNumWorker[] = "DMLC_NUM_WORKER";
inline constexpr char kNumServer[] = "DMLC_NUM_SERVER";
// The address and port this node advertises and binds.
inline constexpr char kInterface[] = "DMLC_INTERFACE";
inline constexpr char kNodeHost[] = "DMLC_NODE_HOST";
inline constexpr char kNodePort[] = "DMLC_NODE_PORT";
// Launchers: the rank a node asks for, and where a scheduler that picked its
// own port (DMLC_PS_ROOT_PORT=0) writes it.
inline constexpr char kRank[] = "DMLC_RANK";
inline constexpr char kSchedulerPortFile[] = "KVTRAIN_SCHEDULER_PORT_FILE";
// Diagnostics and failure detection.
inline constexpr char kVerbose[] = "PS_VERBOSE";
inline constexpr char kHeartbeatInterval[] = "PS_HEARTBEAT_INTERVAL";
inline constexpr char kHeartbeatTimeout[] = "PS_HEARTBEAT_TIMEOUT";
inline constexpr char kStartupTimeout[] = "KVTRAIN_STARTUP_TIMEOUT";
// Compute.
inline constexpr char kNumThreads[] = "KVTRAIN_NUM_THREADS";
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
inline constexpr char kEngine[] = "KVTRAIN_ENGINE";
inline constexpr char kCheckNan[] = "KVTRAIN_CHECK_NAN";
// KVStore.
inline constexpr char kBigArrayBound[] = "KVTRAIN_BIGARRAY_BOUND";
inline constexpr char kMxnetBigArrayBound[] = "MXNET_KVSTORE_BIGARRAY_BOUND";
inline constexpr char kServerThreads[] = "KVTRAIN_SERVER_THREADS";
inline constexpr char kPsBucketBytes[] = "KVTRAIN_PS_BUCKET_BYTES";
inline constexpr char kPsPieceBytes[] = "KVTRAIN_PS_PIECE_BYTES";
inline constexpr char kKVStoreTimeout[] = "KVTRAIN_KVSTORE_TIMEOUT";
inline constexpr char kKeepFreedMemory[] = "KVTRAIN_KEEP_FREED_MEMORY";
// Security (net/curve.h): the job's CURVE secret key, in the
// environment or in a 0600 file; turning CURVE off; the launcher's job id.
inline constexpr char kJobKey[] = "KVTRAIN_JOB_KEY";
inline constexpr char kJobKeyFile[] = "KVTRAIN_JOB_KEY_FILE";
inline constexpr char kInsecure[] = "KVTRAIN_INSECURE";
inline constexpr char kJobId[] = "KVTRAIN_JOB_ID";
// Backups of each server's key range on the next servers (launch.py
// --server-replicas; docs/reliability.md).
inline constexpr char kServerReplicas[] = "KVTRAIN_SERVER_REPLICAS";
inline constexpr char kWorkerRestarts[] = "KVTRAIN_WORKER_RESTARTS";
inline constexpr char kRejoinTimeout[] = "KVTRAIN_REJOIN_TIMEOUT";
// All-reduce groups (dist_allreduce): rank and size from MPI launchers, the
// rendezvous address, gradient buckets.
inline constexpr char kOmpiRank[] = "OMPI_COMM_WORLD_RANK";
inline constexpr char kOmpiSize[] = "OMPI_COMM_WORLD_SIZE";
inline constexpr char kPmiRank[] = "PMI_RANK";
inline constexpr char kPmiSize[] = "PMI_SIZE";
inline constexpr char kRendezvous[] = "KVTRAIN_RENDEZVOUS";
inline constexpr char kAllreduceBucketBytes[] = "KVTRAIN_ALLREDUCE_BUCKET_BYTES";
inline constexpr char kAllreducePieceBytes[] = "KVTRAIN_ALLREDUCE_PIECE_BYTES";
inline constexpr char kAllreduceDoublingBytes[] = "KVTRAIN_ALLREDUCE_DOUBLING_BYTES";
inline constexpr char kSameHostIpc[] = "KVTRAIN_SAME_HOST_IPC";
inline constexpr char kShmBytes[] = "KVTRAIN_SHM_BYTES";
inline constexpr char kShmRing[] = "KVTRAIN_SHM_RING";
inline constexpr char kSealedLane[] = "KVTRAIN_SEALED_LANE";
// Read by tracker/launch.py only.
inline constexpr char kSshStrictHostKeys[] = "KVTRAIN_SSH_STRICT_HOST_KEYS";
inline constexpr char kWaitSpinUs[] = "KVTRAIN_WAIT_SPIN_US";
inline constexpr char kTrace[] = "KVTRAIN_TRACE";

}  // namespace env

// One documented environment variable.
struct EnvVarDoc {
  const char* name;
  const char* default_value;  // as docs/environment.md shows it
  const char* meaning;
};

// Every variable kvtrain reads; docs/environment.md's table mirrors it.
const std::vector<EnvVarDoc>& EnvVarDocs();

// Reads one variable: nullopt when unset. An empty value counts as unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The real process environment.
EnvLookup ProcessEnv();
// A fixed map, for tests.
EnvLookup MapEnv(std::map<std::string, std::string> vars);

// Parsers that name the variable, the value and what was expected, e.g.
// `DMLC_NUM_WORKER="two": expected an integer in [1, 65535]`.
StatusOr<int64_t> ParseIntVar(const std::string& name, const std::string& value,
                              int64_t min, int64_t max);
StatusOr<double> ParseSecondsVar(const std::string& name,
                                 const std::string& value, double min,
                                 double max);
StatusOr<bool> ParseBoolVar(const std::string& name, const std::string& value);

// Unset -> `fallback`; set -> parsed (and range-checked) or an error.
StatusOr<int64_t> GetIntVar(const EnvLookup& env, const std::string& name,
                            int64_t fallback, int64_t min, int64_t max);
StatusOr<double> GetSecondsVar(const EnvLookup& env, const std::string& name,
                               double fallback, double min, double max);
StatusOr<bool> GetBoolVar(const EnvLookup& env, const std::string& name,
                          bool fallback);

// Unset -> error "NAME is not set: <why>".
StatusOr<std::string> RequireVar(const EnvLookup& env, const std::string& name,
                                 const std::string& why);

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_ENV_H_
