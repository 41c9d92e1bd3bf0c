// InprocVan and InprocNetwork.
#include "transport/ps/inproc_van.h"

namespace kvtrain {
namespace ps {

void InprocNetwork::Isolate(int port) {
  std::lock_guard<std::mutex> l(mu_);
  isolated_.insert(port);
}

int64_t InprocNetwork::delivered() {
  std::lock_guard<std::mutex> l(mu_);
  return delivered_;
}

std::set<std::pair<int, int>> InprocNetwork::connections() {
  std::lock_guard<std::mutex> l(mu_);
  return connections_;
}

void InprocNetwork::Connected(int from_port, int to_port) {
  std::lock_guard<std::mutex> l(mu_);
  connections_.insert({from_port, to_port});
}

void InprocNetwork::SetTap(std::function<void(const RawMessage&)> tap) {
  std::lock_guard<std::mutex> l(mu_);
  tap_ = std::move(tap);
}

StatusOr<int> InprocNetwork::Register(InprocVan* van, int port) {
  std::lock_guard<std::mutex> l(mu_);
  if (port == 0) {
    while (vans_.count(next_port_)) ++next_port_;
    port = next_port_++;
  }
  if (vans_.count(port)) {
    return Status::AlreadyExists("port " + std::to_string(port) +
                                 " is already in use");
  }
  vans_[port] = van;
  return port;
}

void InprocNetwork::Unregister(int port) {
  std::lock_guard<std::mutex> l(mu_);
  vans_.erase(port);
}

void InprocNetwork::SetEdit(EditFn edit) {
  std::lock_guard<std::mutex> l(mu_);
  edit_ = std::move(edit);
}

void InprocNetwork::Deliver(int from_port, int to_port, RawMessage msg) {
  std::lock_guard<std::mutex> l(mu_);
  if (isolated_.count(from_port) || isolated_.count(to_port)) return;
  auto it = vans_.find(to_port);
  if (it == vans_.end()) return;  // like TCP to nobody: lost
  ++delivered_;
  if (edit_) edit_(from_port, to_port, &msg);
  if (tap_) tap_(msg);
  it->second->Enqueue(std::move(msg));
}

InprocVan::InprocVan(InprocNetwork* net, std::string token,
                     Duration poll_interval)
    : net_(net), token_(std::move(token)), poll_interval_(poll_interval) {}

InprocVan::~InprocVan() { Close(Duration::zero()); }

StatusOr<int> InprocVan::Bind(int port) {
  KV_ASSIGN_OR_RETURN(int bound, net_->Register(this, port));
  std::lock_guard<std::mutex> l(mu_);
  port_ = bound;
  return bound;
}

Status InprocVan::Connect(int conn, const std::string& /*host*/, int port,
                          const std::string& /*same_host*/) {
  int from = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    conns_[conn] = port;
    from = port_;
  }
  net_->Connected(from, port);
  return Status::OK();
}

void InprocVan::Disconnect(int conn) {
  std::lock_guard<std::mutex> l(mu_);
  conns_.erase(conn);
}

Status InprocVan::Send(int conn, int /*priority*/, std::vector<Blob> frames) {
  int from = 0, to = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = conns_.find(conn);
    if (it == conns_.end()) {
      return Status::Unavailable("no connection " + std::to_string(conn));
    }
    from = port_;
    to = it->second;
  }
  net_->Deliver(from, to, RawMessage{token_, std::move(frames)});
  return Status::OK();
}

void InprocVan::Enqueue(RawMessage msg) {
  std::lock_guard<std::mutex> l(mu_);
  inbox_.push_back(std::move(msg));
  cv_.notify_one();
}

StatusOr<bool> InprocVan::Recv(RawMessage* msg) {
  std::unique_lock<std::mutex> l(mu_);
  if (!cv_.wait_for(l, poll_interval_, [this] { return !inbox_.empty(); })) {
    return false;
  }
  *msg = std::move(inbox_.front());
  inbox_.pop_front();
  return true;
}

void InprocVan::Close(Duration /*linger*/) {
  int port = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    port = port_;
    port_ = 0;
    conns_.clear();
  }
  if (port != 0) net_->Unregister(port);
}

}  // namespace ps
}  // namespace kvtrain
