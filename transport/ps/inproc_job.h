// Test helper: a whole job (scheduler, servers, workers) inside one process
// over InprocVan, with failure handlers that record instead of exiting.
#ifndef KVTRAIN_TRANSPORT_PS_INPROC_JOB_H_
#define KVTRAIN_TRANSPORT_PS_INPROC_JOB_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/ps/inproc_van.h"
#include "transport/ps/ps.h"

namespace kvtrain {
namespace ps {

struct InprocJobOptions {
  int num_servers = 1;
  int num_workers = 1;
  double heartbeat_interval_s = 0.05;
  double heartbeat_timeout_s = 2.0;
  double startup_timeout_s = 20.0;
  int verbose = 0;
  // KVTRAIN_SERVER_REPLICAS.
  int server_replicas = 0;
  // KVTRAIN_WORKER_RESTARTS, KVTRAIN_REJOIN_TIMEOUT.
  int worker_restarts = 0;
  double rejoin_timeout_s = 60.0;
  // The scheduler's (virtual) port.
  int root_port = 9000;
};

// Not thread-safe, except the failure records.
class InprocJob {
 public:
  explicit InprocJob(const InprocJobOptions& options);
  ~InprocJob();

  NodeConfig ConfigFor(Role role) const;
  // Creates a node with a recording failure handler; it is owned here.
  StatusOr<Postoffice*> AddNode(const NodeConfig& config);
  // Creates the scheduler and every server and worker.
  Status CreateAll();
  // Starts every node created so far, concurrently; the first error.
  Status StartAll();
  Status FinalizeAll();

  // After StartAll: nodes by rank.
  Postoffice* scheduler();
  Postoffice* server(int rank);
  Postoffice* worker(int rank);
  const std::vector<std::unique_ptr<Postoffice>>& nodes() { return nodes_; }
  InprocNetwork* net() { return &net_; }

  // "worker 0 (127.0.0.1:30001): <reason>" for each failure so far.
  std::vector<std::string> Failures();
  // Waits until at least `count` nodes failed.
  bool WaitForFailures(size_t count, Duration timeout);

 private:
  InprocJobOptions options_;
  InprocNetwork net_;
  std::vector<std::unique_ptr<Postoffice>> nodes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> failures_;
};

// For a network tap: whether `raw` is an application request (a push or
// pull), and if so how many keys and value bytes it carries.
bool IsDataRequest(const RawMessage& raw, size_t* num_keys, size_t* value_bytes);

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_INPROC_JOB_H_
