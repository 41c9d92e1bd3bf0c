// Parsing and validation of the distributed-job environment.
#include "net/node_config.h"

#include <sstream>

namespace kvtrain {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kScheduler:
      return "scheduler";
    case Role::kServer:
      return "server";
    case Role::kWorker:
      return "worker";
  }
  return "unknown";
}

StatusOr<Role> ParseRole(const std::string& name) {
  if (name == "scheduler") return Role::kScheduler;
  if (name == "server") return Role::kServer;
  if (name == "worker") return Role::kWorker;
  return Status::InvalidArgument(std::string(env::kRole) + "=\"" + name +
                                 "\": expected scheduler, server or worker");
}

bool NodeConfig::InDistributedJob(const EnvLookup& env) {
  return env(env::kRole).has_value();
}

StatusOr<NodeConfig> NodeConfig::FromEnv(const EnvLookup& env) {
  NodeConfig c;
  const std::string launcher_hint = "tracker/launch.py sets it";
  KV_ASSIGN_OR_RETURN(std::string role,
                      RequireVar(env, env::kRole,
                                 "expected scheduler, server or worker (" +
                                     launcher_hint + ")"));
  KV_ASSIGN_OR_RETURN(c.role, ParseRole(role));
  KV_ASSIGN_OR_RETURN(c.root_uri,
                      RequireVar(env, env::kRootUri,
                                 "expected the scheduler's host name or IPv4 "
                                 "address (" + launcher_hint + ")"));
  KV_ASSIGN_OR_RETURN(
      std::string port,
      RequireVar(env, env::kRootPort,
                 "expected the scheduler's port (" + launcher_hint + ")"));
  KV_ASSIGN_OR_RETURN(int64_t root_port,
                      ParseIntVar(env::kRootPort, port, 0, 65535));
  c.root_port = static_cast<int>(root_port);
  if (c.root_port == 0 && c.role != Role::kScheduler) {
    return Status::InvalidArgument(
        std::string(env::kRootPort) + "=\"0\": only the scheduler may pick its own "
        "port; servers and workers need the port it listens on");
  }
  KV_ASSIGN_OR_RETURN(
      std::string nw,
      RequireVar(env, env::kNumWorker,
                 "expected the number of workers (" + launcher_hint + ")"));
  KV_ASSIGN_OR_RETURN(int64_t num_workers,
                      ParseIntVar(env::kNumWorker, nw, 1, 65535));
  c.num_workers = static_cast<int>(num_workers);
  KV_ASSIGN_OR_RETURN(
      std::string ns,
      RequireVar(env, env::kNumServer,
                 "expected the number of servers (" + launcher_hint + ")"));
  KV_ASSIGN_OR_RETURN(int64_t num_servers,
                      ParseIntVar(env::kNumServer, ns, 0, 65535));
  c.num_servers = static_cast<int>(num_servers);

  c.interface = env(env::kInterface).value_or("");
  c.node_host = env(env::kNodeHost).value_or("");
  KV_ASSIGN_OR_RETURN(int64_t node_port,
                      GetIntVar(env, env::kNodePort, 0, 0, 65535));
  c.node_port = static_cast<int>(node_port);
  KV_ASSIGN_OR_RETURN(int64_t rank, GetIntVar(env, env::kRank, -1, 0, 65535));
  c.requested_rank = static_cast<int>(rank);
  c.scheduler_port_file = env(env::kSchedulerPortFile).value_or("");
  c.job_id = env(env::kJobId).value_or("");
  KV_ASSIGN_OR_RETURN(int64_t verbose, GetIntVar(env, env::kVerbose, 0, 0, 2));
  c.verbose = static_cast<int>(verbose);

  KV_ASSIGN_OR_RETURN(c.heartbeat_interval_s,
                      GetSecondsVar(env, env::kHeartbeatInterval,
                                    c.heartbeat_interval_s, 0, 3600));
  KV_ASSIGN_OR_RETURN(c.heartbeat_timeout_s,
                      GetSecondsVar(env, env::kHeartbeatTimeout,
                                    c.heartbeat_timeout_s, 0.01, 86400));
  if (c.heartbeat_interval_s > 0 &&
      c.heartbeat_timeout_s <= c.heartbeat_interval_s) {
    std::ostringstream msg;
    msg << env::kHeartbeatTimeout << "=" << c.heartbeat_timeout_s
        << " must be larger than " << env::kHeartbeatInterval << "="
        << c.heartbeat_interval_s;
    return Status::InvalidArgument(msg.str());
  }
  KV_ASSIGN_OR_RETURN(c.startup_timeout_s,
                      GetSecondsVar(env, env::kStartupTimeout,
                                    c.startup_timeout_s, 0.01, 86400));
  KV_ASSIGN_OR_RETURN(int64_t replicas, GetIntVar(env, env::kServerReplicas, 0, 0, 65535));
  if (replicas > 0 && replicas >= c.num_servers) {
    return Status::InvalidArgument(
        std::string(env::kServerReplicas) + "=" + std::to_string(replicas) +
        " needs more servers than that: each copy of a key range lives on another server, "
        "and the job has " + std::string(env::kNumServer) + "=" + std::to_string(c.num_servers));
  }
  c.server_replicas = static_cast<int>(replicas);
  KV_ASSIGN_OR_RETURN(int64_t restarts, GetIntVar(env, env::kWorkerRestarts, 0, 0, 1000000));
  c.worker_restarts = static_cast<int>(restarts);
  KV_ASSIGN_OR_RETURN(c.rejoin_timeout_s,
                      GetSecondsVar(env, env::kRejoinTimeout, c.rejoin_timeout_s, 0.01, 86400));
  return c;
}

std::string NodeConfig::DebugString() const {
  std::ostringstream os;
  os << RoleName(role) << " (root " << root_uri << ":" << root_port << ", "
     << num_workers << " workers, " << num_servers << " servers";
  if (!node_host.empty()) os << ", host " << node_host;
  if (!interface.empty()) os << ", interface " << interface;
  if (node_port != 0) os << ", port " << node_port;
  os << ")";
  return os.str();
}

}  // namespace kvtrain
