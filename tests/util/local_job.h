// LocalJob: starts a whole distributed job on 127.0.0.1 (one scheduler, S
// servers, W workers, all running one binary with the DMLC_* environment
// set), captures each process's log, and collects exit codes.
#ifndef KVTRAIN_TESTS_UTIL_LOCAL_JOB_H_
#define KVTRAIN_TESTS_UTIL_LOCAL_JOB_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "net/node_config.h"
#include "tests/util/process.h"

namespace kvtrain {
namespace testutil {

struct LocalJobOptions {
  // The program every node runs, and its arguments (after argv[0]).
  std::string binary;
  std::vector<std::string> args;
  int num_servers = 1;
  int num_workers = 1;
  // Processes actually started; -1 = all. Fewer than declared makes the
  // job incomplete (start-up deadline tests).
  int servers_to_start = -1;
  int workers_to_start = -1;
  // The scheduler's port; 0 = a free one (retried if taken meanwhile).
  int root_port = 0;
  // Give every server and worker its own DMLC_NODE_PORT, known in advance
  // (node_port()); otherwise they bind any free port.
  bool fixed_node_ports = false;
  // Security: every node gets KVTRAIN_JOB_KEY = `job_key` ("" = a fresh
  // key made by Start), or KVTRAIN_INSECURE=1 when !secure.
  bool secure = true;
  std::string job_key;
  // Environment for every node (e.g. PS_HEARTBEAT_TIMEOUT).
  std::map<std::string, std::string> env;
  // Last word on a node's environment: called with its role, launch index
  // and environment before it starts.
  std::function<void(Role, int, std::map<std::string, std::string>*)> customize;
  // Where logs go; "" = a new temp dir.
  std::string log_dir;
  // Wait until the scheduler accepts connections before starting the
  // others (and retry a taken automatic port).
  bool wait_for_scheduler = true;
};

// One node of the job.
struct JobNode {
  Role role = Role::kWorker;
  int index = 0;      // launch index within the role (not the rank)
  std::string name;   // "scheduler", "server-0", "worker-1"
  int node_port = 0;  // 0 unless fixed_node_ports (or the scheduler)
  std::unique_ptr<Process> process;
};

// Not thread-safe. The destructor kills whatever still runs.
class LocalJob {
 public:
  static StatusOr<std::unique_ptr<LocalJob>> Start(LocalJobOptions options);

  JobNode& scheduler() { return nodes_[0]; }
  JobNode& server(int index);
  JobNode& worker(int index);
  std::vector<JobNode>& nodes() { return nodes_; }
  int root_port() const { return root_port_; }
  // The job's CURVE secret key (Z85); "" when insecure.
  const std::string& job_key() const { return options_.job_key; }
  const std::string& log_dir() const { return log_dir_; }

  // Waits up to `timeout` until every process exited; false if some still
  // run (they are left running).
  bool WaitAll(Duration timeout);
  // True if every process exited with status 0.
  bool AllSucceeded() const;
  // Each node's name, exit status and log: for failure messages.
  std::string Report() const;

 private:
  explicit LocalJob(LocalJobOptions options) : options_(std::move(options)) {}
  Status StartScheduler();
  StatusOr<std::unique_ptr<Process>> Launch(Role role, int index,
                                            int node_port);

  LocalJobOptions options_;
  std::vector<JobNode> nodes_;
  int root_port_ = 0;
  std::string log_dir_;
};

}  // namespace testutil
}  // namespace kvtrain

#endif  // KVTRAIN_TESTS_UTIL_LOCAL_JOB_H_
