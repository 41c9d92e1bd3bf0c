// KVServer: checks incoming requests, runs the handler, sends responses.
#include <memory>

#include "base/logging.h"
#include "base/trace.h"
#include "transport/ps/handler_pool.h"
#include "transport/ps/postoffice_impl.h"

namespace kvtrain {
namespace ps {

class KVServer::Impl : public Customer {
 public:
  Impl(PostofficeImpl* po, int app_id, RequestHandler handler,
       const KVServerOptions& options)
      : po_(po),
        app_id_(app_id),
        handler_(std::move(handler)),
        on_worker_back_(options.on_worker_back),
        pool_(std::make_unique<HandlerPool>(options.handler_threads)) {}

  ~Impl() override {
    po_->UnregisterCustomer(this);
    pool_.reset();  // runs what is queued; handlers may still respond
  }

  void set_owner(KVServer* owner) { owner_ = owner; }
  int app_id() const override { return app_id_; }
  bool serves() const override { return true; }
  void Abort(const Status& /*reason*/) override {}
  void Accept(Message&& msg) override;
  void PeerBack(int id) override {
    const NodeEntry* e = po_->table() == nullptr ? nullptr : po_->table()->ById(id);
    if (on_worker_back_ && e != nullptr && e->role == Role::kWorker) on_worker_back_(e->rank);
  }
  Status Respond(const RequestMeta& req, const KVPairs& values);
  Status RespondError(const RequestMeta& req, const Status& error);
  SendBuffer NewAnswerBuffer(const RequestMeta& req, size_t size) {
    return po_->NewSendBuffer(req.sender_id, size);
  }

 private:
  Status CheckKeys(const KVPairs& kv) const;

  PostofficeImpl* const po_;
  const int app_id_;
  const RequestHandler handler_;
  const std::function<void(int)> on_worker_back_;
  KVServer* owner_ = nullptr;
  std::unique_ptr<HandlerPool> pool_;
  LogRateLimiter log_;
};

Status KVServer::Impl::CheckKeys(const KVPairs& kv) const {
  KV_RETURN_IF_ERROR(kv.Validate());
  const size_t n = kv.num_keys();
  if (n == 0) return Status::OK();
  const std::vector<KeyRange> ranges = po_->ServerKeyRanges();
  const int num = static_cast<int>(ranges.size());
  // Its own range and, with replicas, the ranges of the servers before it
  // (PostofficeImpl::RangeServers); one request's keys lie in one range.
  for (int j = 0; j <= po_->server_replicas(); ++j) {
    const KeyRange& r = ranges.at(static_cast<size_t>(((po_->rank() - j) % num + num) % num));
    if (r.Contains(kv.key(0)) && r.Contains(kv.key(n - 1))) return Status::OK();
  }
  const KeyRange& mine = ranges.at(static_cast<size_t>(po_->rank()));
  const uint64_t k = mine.Contains(kv.key(0)) ? kv.key(n - 1) : kv.key(0);
  return Status::InvalidArgument(
      "key " + std::to_string(k) + " is outside " + po_->name() + "'s key range [" +
      std::to_string(mine.begin) + ", " + std::to_string(mine.end) + ")" +
      (po_->server_replicas() > 0 ? " and the ranges it holds copies of" : ""));
  return Status::OK();
}

void KVServer::Impl::Accept(Message&& msg) {
  const wire::Header& h = msg.meta;
  const NodeTable* t = po_->table();
  const NodeEntry* from = t == nullptr ? nullptr : t->ById(h.sender());
  if (!h.request() || from == nullptr) {
    KV_LOG_LIMITED(WARNING, log_)
        << po_->name() << ": dropped a response sent to server application "
        << app_id_;
    return;
  }
  RequestMeta meta;
  meta.app_id = app_id_;
  meta.timestamp = h.timestamp();
  meta.sender_id = from->id;
  meta.sender_role = from->role;
  meta.sender_rank = from->rank;
  meta.sender_name = from->name;
  meta.push = h.push();
  meta.pull = h.pull();
  meta.head = h.head();
  meta.body = h.body();
  meta.priority = h.priority();
  meta.resent = h.resent();
  KVPairs kv;
  kv.keys = msg.Frame(wire::KEYS);
  kv.vals = msg.Frame(wire::VALUES);
  kv.lens = msg.Frame(wire::LENS);
  kv.attrs = msg.Frame(wire::ATTRS);
  Status s = CheckKeys(kv);
  if (!s.ok()) {
    KV_LOG_LIMITED(WARNING, log_) << po_->name() << ": bad request from "
                                  << from->name << ": " << s.message();
    RespondError(meta, s);
    return;
  }
  const uint64_t lane_key = kv.num_keys() > 0 ? kv.key(0) : 0;
  pool_->Submit(lane_key, [this, meta = std::move(meta), kv = std::move(kv)] {
    handler_(meta, kv, owner_);
  });
}

Status KVServer::Impl::Respond(const RequestMeta& req, const KVPairs& values) {
  KV_RETURN_IF_ERROR(values.Validate());
  Message m;
  m.meta.set_command(wire::DATA);
  m.meta.set_app_id(req.app_id);
  m.meta.set_timestamp(req.timestamp);
  m.meta.set_request(false);
  m.meta.set_push(req.push);
  m.meta.set_pull(req.pull);
  m.meta.set_head(req.head);
  m.meta.set_priority(req.priority);
  // The values go last: a message that ends with its large frame arrives
  // complete with that frame, not with a small trailing TCP segment that
  // the receiver has to wake up for again.
  if (!values.keys.empty()) m.AddFrame(wire::KEYS, values.keys);
  if (!values.lens.empty()) m.AddFrame(wire::LENS, values.lens);
  if (!values.vals.empty()) m.AddFrame(wire::VALUES, values.vals);
  // Marked before it is sent: the requester may have it before this
  // thread runs again.
  trace::Instant("server", "reply to ", req.sender_name, req.timestamp);
  return po_->SendData(req.sender_id, &m);
}

Status KVServer::Impl::RespondError(const RequestMeta& req,
                                    const Status& error) {
  Message m;
  m.meta.set_command(wire::DATA);
  m.meta.set_app_id(req.app_id);
  m.meta.set_timestamp(req.timestamp);
  m.meta.set_request(false);
  m.meta.set_push(req.push);
  m.meta.set_pull(req.pull);
  m.meta.set_head(req.head);
  m.meta.set_priority(req.priority);
  m.meta.set_status_code(error.ok() ? static_cast<int>(Status::Code::kInternal)
                                    : static_cast<int>(error.code()));
  m.meta.set_status_message(error.ok() ? "RespondError with an ok status"
                                       : error.message());
  return po_->SendData(req.sender_id, &m);
}

// ---- KVServer (public) ----

StatusOr<std::unique_ptr<KVServer>> KVServer::Create(
    Postoffice* po, int app_id, RequestHandler handler,
    const KVServerOptions& options) {
  if (!handler) return Status::InvalidArgument("KVServer needs a handler");
  if (options.handler_threads < 0) {
    return Status::InvalidArgument(
        "KVServerOptions.handler_threads must be "
        ">= 0; got " +
        std::to_string(options.handler_threads));
  }
  if (po->role() != Role::kServer) {
    return Status::FailedPrecondition(
        "KVServer needs a server node; this node is a " +
        std::string(RoleName(po->role())));
  }
  auto impl =
      std::make_unique<Impl>(po->impl(), app_id, std::move(handler), options);
  Impl* raw = impl.get();
  std::unique_ptr<KVServer> server(new KVServer(std::move(impl)));
  raw->set_owner(server.get());
  KV_RETURN_IF_ERROR(po->impl()->RegisterCustomer(raw));
  return server;
}

KVServer::KVServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KVServer::~KVServer() = default;

Status KVServer::Respond(const RequestMeta& req, const KVPairs& values) {
  return impl_->Respond(req, values);
}

Status KVServer::RespondError(const RequestMeta& req, const Status& error) {
  return impl_->RespondError(req, error);
}

SendBuffer KVServer::NewAnswerBuffer(const RequestMeta& req, size_t size) {
  return impl_->NewAnswerBuffer(req, size);
}

}  // namespace ps
}  // namespace kvtrain
