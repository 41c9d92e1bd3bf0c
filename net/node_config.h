// NodeConfig: the DMLC_*/PS_* environment contract of a distributed job,
// parsed once. Every error names the variable, its value and what was expected.
#ifndef KVTRAIN_NET_NODE_CONFIG_H_
#define KVTRAIN_NET_NODE_CONFIG_H_

#include <string>

#include "base/env.h"
#include "base/status.h"

namespace kvtrain {

enum class Role { kScheduler, kServer, kWorker };

// "scheduler", "server", "worker".
const char* RoleName(Role role);
// Inverse of RoleName; anything else is an error listing the valid names.
StatusOr<Role> ParseRole(const std::string& name);

struct NodeConfig {
  // This process's role (DMLC_ROLE).
  Role role = Role::kWorker;
  // Scheduler address: host name or IPv4 (DMLC_PS_ROOT_URI).
  std::string root_uri;
  // Scheduler port (DMLC_PS_ROOT_PORT).
  int root_port = 0;
  // Number of workers (DMLC_NUM_WORKER), >= 1.
  int num_workers = 1;
  // Number of servers (DMLC_NUM_SERVER), >= 0.
  int num_servers = 1;
  // Interface whose IPv4 address is advertised (DMLC_INTERFACE); "" = rule.
  std::string interface;
  // Address advertised, overriding `interface` (DMLC_NODE_HOST); "" = unset.
  std::string node_host;
  // Port a server/worker binds (DMLC_NODE_PORT); 0 = any free port.
  int node_port = 0;
  // Rank asked for within the role (DMLC_RANK); -1 = none.
  int requested_rank = -1;
  // Scheduler with root_port 0: where it writes the port it bound
  // (KVTRAIN_SCHEDULER_PORT_FILE); "" = nowhere.
  std::string scheduler_port_file;
  // 0 quiet, 1 control plane, 2 also every data message (PS_VERBOSE).
  int verbose = 0;
  // Seconds between heartbeats; 0 = off (PS_HEARTBEAT_INTERVAL).
  double heartbeat_interval_s = 1.0;
  // Seconds of silence before a peer is declared dead (PS_HEARTBEAT_TIMEOUT).
  double heartbeat_timeout_s = 10.0;
  // The launcher's name for the job (KVTRAIN_JOB_ID); the scheduler refuses
  // a node whose job id differs. "" = unset.
  std::string job_id;
  // Seconds the scheduler waits for all nodes (KVTRAIN_STARTUP_TIMEOUT).
  double startup_timeout_s = 60.0;
  // Servers holding a copy of each server's key range besides the server
  // itself, the next ones in rank order (KVTRAIN_SERVER_REPLICAS), so that
  // the job survives the death of that many servers; 0: a dead server ends
  // the job. Less than num_servers.
  int server_replicas = 0;
  // A dead worker is waited for, to be started again by the launcher
  // (KVTRAIN_WORKER_RESTARTS > 0: `launch.py --max-restarts`), this many
  // seconds (KVTRAIN_REJOIN_TIMEOUT); 0 restarts: a dead worker ends the job.
  int worker_restarts = 0;
  double rejoin_timeout_s = 60.0;

  // Parses and validates the whole contract from `env`.
  static StatusOr<NodeConfig> FromEnv(const EnvLookup& env);

  // True when DMLC_ROLE is set, i.e. this process belongs to a distributed
  // job started by a launcher.
  static bool InDistributedJob(const EnvLookup& env);

  // "worker (root 10.0.0.1:9091, 2 workers, 2 servers)".
  std::string DebugString() const;
};

}  // namespace kvtrain

#endif  // KVTRAIN_NET_NODE_CONFIG_H_
