// LocalJob: a scheduler, servers and workers as child processes.
#include "tests/util/local_job.h"

#include <sys/stat.h>

#include <set>
#include <sstream>
#include <thread>

#include "base/env.h"
#include "net/curve.h"

namespace kvtrain {
namespace testutil {
namespace {

std::string NodeFileName(Role role, int index) {
  if (role == Role::kScheduler) return "scheduler";
  return std::string(RoleName(role)) + "-" + std::to_string(index);
}

}  // namespace

StatusOr<std::unique_ptr<LocalJob>> LocalJob::Start(LocalJobOptions options) {
  if (options.binary.empty()) {
    return Status::InvalidArgument("LocalJob needs a binary");
  }
  if (options.secure && options.job_key.empty()) {
    options.job_key = net::JobKey::Generate().secret_z85();
  }
  if (!options.secure) options.job_key.clear();
  std::unique_ptr<LocalJob> job(new LocalJob(std::move(options)));
  const LocalJobOptions& o = job->options_;
  job->log_dir_ = o.log_dir.empty() ? NewTempDir("job-") : o.log_dir;
  mkdir(job->log_dir_.c_str(), 0755);
  KV_RETURN_IF_ERROR(job->StartScheduler());
  const int servers =
      o.servers_to_start < 0 ? o.num_servers : o.servers_to_start;
  const int workers =
      o.workers_to_start < 0 ? o.num_workers : o.workers_to_start;
  // A port probed free stays free until its node binds it, so the next probe
  // may return it again: never hand one port to two nodes.
  std::set<int> handed_out = {job->root_port_};
  for (Role role : {Role::kServer, Role::kWorker}) {
    const int n = role == Role::kServer ? servers : workers;
    for (int i = 0; i < n; ++i) {
      int port = 0;
      for (int probe = 0; o.fixed_node_ports; ++probe) {
        KV_ASSIGN_OR_RETURN(port, FreeTcpPort());
        if (handed_out.insert(port).second) break;
        if (probe == 100) return Status::Internal("no distinct free TCP port for a node");
      }
      KV_ASSIGN_OR_RETURN(std::unique_ptr<Process> p,
                          job->Launch(role, i, port));
      job->nodes_.push_back(
          JobNode{role, i, NodeFileName(role, i), port, std::move(p)});
    }
  }
  return job;
}

Status LocalJob::StartScheduler() {
  const bool automatic = options_.root_port == 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    root_port_ = options_.root_port;
    if (automatic) {
      KV_ASSIGN_OR_RETURN(root_port_, FreeTcpPort());
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Process> p,
                        Launch(Role::kScheduler, 0, root_port_));
    if (!options_.wait_for_scheduler) {
      nodes_.push_back(
          JobNode{Role::kScheduler, 0, "scheduler", root_port_, std::move(p)});
      return Status::OK();
    }
    // Up to a minute for a loaded machine to start it.
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (p->Alive() && !PortAcceptsConnections(root_port_) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (p->Alive() && PortAcceptsConnections(root_port_)) {
      nodes_.push_back(
          JobNode{Role::kScheduler, 0, "scheduler", root_port_, std::move(p)});
      return Status::OK();
    }
    const bool port_taken =
        p->ReadLog().find("already in use") != std::string::npos;
    if (!automatic || !port_taken) {
      return Status::Unavailable("the scheduler did not start (" +
                                 (p->exit_info() ? p->exit_info()->ToString()
                                                 : std::string("no port")) +
                                 "):\n" + p->ReadLog());
    }
  }
  return Status::Unavailable("the scheduler found no free port in 5 tries");
}

StatusOr<std::unique_ptr<Process>> LocalJob::Launch(Role role, int index,
                                                    int node_port) {
  ProcessOptions po;
  po.argv.push_back(options_.binary);
  po.argv.insert(po.argv.end(), options_.args.begin(), options_.args.end());
  po.env = options_.env;
  if (options_.secure) {
    po.env[env::kJobKey] = options_.job_key;
    // KVTRAIN_INSECURE=1 inherited from the caller's environment would win
    // over the key; the job's own options.env may still set it.
    po.env.emplace(env::kInsecure, "0");
  } else {
    po.env[env::kInsecure] = "1";
  }
  po.env[env::kRole] = RoleName(role);
  po.env[env::kRootUri] = "127.0.0.1";
  po.env[env::kRootPort] = std::to_string(root_port_);
  po.env[env::kNumServer] = std::to_string(options_.num_servers);
  po.env[env::kNumWorker] = std::to_string(options_.num_workers);
  if (role != Role::kScheduler && node_port != 0) {
    po.env[env::kNodePort] = std::to_string(node_port);
  }
  if (options_.customize) options_.customize(role, index, &po.env);
  po.log_path = log_dir_ + "/" + NodeFileName(role, index) + ".log";
  return Process::Spawn(po);
}

JobNode& LocalJob::server(int index) {
  for (JobNode& n : nodes_) {
    if (n.role == Role::kServer && n.index == index) return n;
  }
  LOG(FATAL) << "LocalJob has no server " << index;
}

JobNode& LocalJob::worker(int index) {
  for (JobNode& n : nodes_) {
    if (n.role == Role::kWorker && n.index == index) return n;
  }
  LOG(FATAL) << "LocalJob has no worker " << index;
}

bool LocalJob::WaitAll(Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  for (JobNode& n : nodes_) {
    const Duration left = deadline - Clock::now();
    if (!n.process->Wait(left > Duration::zero() ? left : Duration::zero())
             .ok()) {
      return false;
    }
  }
  return true;
}

bool LocalJob::AllSucceeded() const {
  for (const JobNode& n : nodes_) {
    if (!n.process->exit_info() || !n.process->exit_info()->ok()) return false;
  }
  return true;
}

std::string LocalJob::Report() const {
  std::ostringstream os;
  for (const JobNode& n : nodes_) {
    os << "==== " << n.name << " (pid " << n.process->pid() << "): "
       << (n.process->exit_info() ? n.process->exit_info()->ToString()
                                  : std::string("still running"))
       << " ====\n"
       << n.process->ReadLog() << "\n";
  }
  return os.str();
}

}  // namespace testutil
}  // namespace kvtrain
