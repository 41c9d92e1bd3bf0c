// InprocJob: in-process jobs for the transport's unit tests.
#include "transport/ps/inproc_job.h"

#include <thread>

#include "transport/ps/message.h"

namespace kvtrain {
namespace ps {

InprocJob::InprocJob(const InprocJobOptions& options) : options_(options) {}

InprocJob::~InprocJob() {
  // Workers and servers first, so nobody mourns the scheduler.
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) it->reset();
}

NodeConfig InprocJob::ConfigFor(Role role) const {
  NodeConfig c;
  c.role = role;
  c.root_uri = "127.0.0.1";
  c.root_port = options_.root_port;
  c.num_servers = options_.num_servers;
  c.num_workers = options_.num_workers;
  c.node_host = "127.0.0.1";
  c.verbose = options_.verbose;
  c.heartbeat_interval_s = options_.heartbeat_interval_s;
  c.heartbeat_timeout_s = options_.heartbeat_timeout_s;
  c.startup_timeout_s = options_.startup_timeout_s;
  c.server_replicas = options_.server_replicas;
  c.worker_restarts = options_.worker_restarts;
  c.rejoin_timeout_s = options_.rejoin_timeout_s;
  return c;
}

StatusOr<Postoffice*> InprocJob::AddNode(const NodeConfig& config) {
  static int counter = 0;
  auto van =
      std::make_unique<InprocVan>(&net_, std::string(RoleName(config.role)) +
                                             "-" + std::to_string(++counter));
  PostofficeOptions po_options;
  po_options.startup_grace = std::chrono::milliseconds(500);
  KV_ASSIGN_OR_RETURN(
      std::unique_ptr<Postoffice> po,
      Postoffice::CreateWithVan(config, std::move(van), po_options));
  Postoffice* raw = po.get();
  raw->SetFailureHandler([this, raw](const Status& reason) {
    std::lock_guard<std::mutex> l(mu_);
    failures_.push_back(raw->name() + ": " + reason.message());
    cv_.notify_all();
  });
  nodes_.push_back(std::move(po));
  return raw;
}

Status InprocJob::CreateAll() {
  KV_RETURN_IF_ERROR(AddNode(ConfigFor(Role::kScheduler)).status());
  for (int i = 0; i < options_.num_servers; ++i) {
    KV_RETURN_IF_ERROR(AddNode(ConfigFor(Role::kServer)).status());
  }
  for (int i = 0; i < options_.num_workers; ++i) {
    KV_RETURN_IF_ERROR(AddNode(ConfigFor(Role::kWorker)).status());
  }
  return Status::OK();
}

Status InprocJob::StartAll() {
  std::vector<Status> results(nodes_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    threads.emplace_back(
        [this, i, &results] { results[i] = nodes_[i]->Start(); });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) KV_RETURN_IF_ERROR(s);
  return Status::OK();
}

Status InprocJob::FinalizeAll() {
  std::vector<Status> results(nodes_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    threads.emplace_back([this, i, &results] {
      results[i] = nodes_[i]->Finalize(std::chrono::seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : results) KV_RETURN_IF_ERROR(s);
  return Status::OK();
}

Postoffice* InprocJob::scheduler() {
  for (auto& n : nodes_) {
    if (n->role() == Role::kScheduler) return n.get();
  }
  return nullptr;
}

Postoffice* InprocJob::server(int rank) {
  for (auto& n : nodes_) {
    if (n->role() == Role::kServer && n->rank() == rank) return n.get();
  }
  return nullptr;
}

Postoffice* InprocJob::worker(int rank) {
  for (auto& n : nodes_) {
    if (n->role() == Role::kWorker && n->rank() == rank) return n.get();
  }
  return nullptr;
}

std::vector<std::string> InprocJob::Failures() {
  std::lock_guard<std::mutex> l(mu_);
  return failures_;
}

bool InprocJob::WaitForFailures(size_t count, Duration timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return failures_.size() >= count; });
}

bool IsDataRequest(const RawMessage& raw, size_t* num_keys, size_t* value_bytes) {
  Message m;
  if (!DecodeMessage(raw.frames, &m).ok() || m.meta.command() != wire::DATA ||
      !m.meta.request()) {
    return false;
  }
  *num_keys = m.Frame(wire::KEYS).size() / sizeof(uint64_t);
  *value_bytes = m.Frame(wire::VALUES).size();
  return true;
}

}  // namespace ps
}  // namespace kvtrain
