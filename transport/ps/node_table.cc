// The job's node table (who is who: ids, tokens, roles, liveness), node
// names and groups, shared by the postoffice and the scheduler.
#include <sstream>

#include "transport/ps/postoffice_impl.h"
#include "net/liveness.h"
#include "net/same_host.h"

namespace kvtrain {
namespace ps {

int64_t NowNs() { return net::SteadyNowNs(); }

int GroupOf(Role role) {
  switch (role) {
    case Role::kScheduler:
      return kSchedulerGroup;
    case Role::kServer:
      return kServerGroup;
    case Role::kWorker:
      return kWorkerGroup;
  }
  return 0;
}

bool OnOneHost(const std::vector<NodeEntry>& nodes) {
  std::string host;
  for (const NodeEntry& n : nodes) {
    if (n.role != Role::kServer && n.role != Role::kWorker) continue;
    const std::string id = net::SameHostIdentity(n.same_host);
    if (id.empty() || (!host.empty() && id != host)) return false;
    host = id;
  }
  return !host.empty();
}

std::string NodeName(Role role, int rank, const std::string& host, int port) {
  std::ostringstream os;
  os << RoleName(role);
  if (role != Role::kScheduler && rank >= 0) os << " " << rank;
  os << " (" << host << ":" << port << ")";
  return os.str();
}

NodeEntry WithNewProcess(const NodeEntry& old, const wire::NodeInfo& n) {
  NodeEntry e = old;
  e.host = n.host();
  e.port = n.port();
  e.token = n.token();
  e.same_host = n.same_host();
  e.pid = n.pid();
  e.name = NodeName(e.role, e.rank, e.host, e.port);
  return e;
}

NodeTable::NodeTable(std::vector<NodeEntry> nodes, std::string job_id,
                     const net::LivenessOptions& liveness)
    : nodes_(std::move(nodes)), job_id_(std::move(job_id)) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    by_id_[nodes_[i].id] = i;
    by_token_[nodes_[i].token] = i;
  }
  liveness_ = std::make_unique<net::PeerLiveness>(
      static_cast<int>(nodes_.size()), liveness, NowNs());
  lost_ = std::make_unique<std::atomic<bool>[]>(nodes_.size());
  generation_ = std::make_unique<std::atomic<int64_t>[]>(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    lost_[i].store(false);
    generation_[i].store(0);
  }
}

bool NodeTable::MarkLost(int id) const {
  const int i = IndexOf(id);
  return i >= 0 && !lost_[static_cast<size_t>(i)].exchange(true);
}

void NodeTable::MarkLive(int id, int64_t generation) const {
  const int i = IndexOf(id);
  if (i < 0) return;
  generation_[static_cast<size_t>(i)].store(generation);
  lost_[static_cast<size_t>(i)].store(false);
}

int64_t NodeTable::Generation(int id) const {
  const int i = IndexOf(id);
  return i < 0 ? 0 : generation_[static_cast<size_t>(i)].load();
}

bool NodeTable::Lost(int id) const {
  const int i = IndexOf(id);
  return i >= 0 && lost_[static_cast<size_t>(i)].load();
}

const NodeEntry* NodeTable::ById(int id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &nodes_[it->second];
}

const NodeEntry* NodeTable::ByToken(const std::string& token) const {
  auto it = by_token_.find(token);
  return it == by_token_.end() ? nullptr : &nodes_[it->second];
}

std::vector<int> NodeTable::Members(int groups) const {
  std::vector<int> ids;
  for (const NodeEntry& e : nodes_) {
    if ((groups & GroupOf(e.role)) && !Lost(e.id)) ids.push_back(e.id);
  }
  return ids;
}

void NodeTable::Touch(int id, int64_t now_ns) const {
  liveness_->Heard(IndexOf(id), now_ns);
}

int NodeTable::IndexOf(int id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? -1 : static_cast<int>(it->second);
}

}  // namespace ps
}  // namespace kvtrain
