// Rendezvous over one ZeroMQ ROUTER (server) and a DEALER per rank. The
// messages are one text frame each:
//   rank -> server: "register <rank> <size> <host> <port>"
//   server -> rank: "ok <host:port> <host:port> ..." or "error <message>".
#include "kvstore/collective/rendezvous.h"

#include <zmq.h>

#include <map>
#include <sstream>
#include <string>

#include "net/zmq_error.h"

namespace kvtrain {
namespace collective {

namespace {

using net::ZmqError;

int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

struct Registration {
  std::string identity;
  Endpoint endpoint;
  int size = 0;
};

void Reply(void* socket, const std::string& identity, const std::string& text) {
  zmq_send(socket, identity.data(), identity.size(), ZMQ_SNDMORE);
  zmq_send(socket, text.data(), text.size(), 0);
}

std::string Missing(const std::map<int, Registration>& got, int size) {
  std::string out;
  for (int r = 0; r < size; ++r) {
    if (!got.count(r)) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Bind(
    int port, const net::JobKey& key) {
  void* ctx = zmq_ctx_new();
  std::unique_ptr<net::ZapHandler> zap;
  if (key.secure()) {
    auto started = net::ZapHandler::Start(ctx, key, "all-reduce rendezvous");
    if (!started.ok()) {
      zmq_ctx_term(ctx);
      return started.status();
    }
    zap = std::move(started).value();
  }
  void* s = zmq_socket(ctx, ZMQ_ROUTER);
  Status secured = net::SecureSocket(s, key, /*is_server=*/true);
  const std::string ep =
      port == 0 ? "tcp://*:*" : "tcp://*:" + std::to_string(port);
  if (!secured.ok() || zmq_bind(s, ep.c_str()) != 0) {
    const std::string err = secured.ok() ? ZmqError() : secured.message();
    zmq_close(s);
    zap.reset();
    zmq_ctx_term(ctx);
    return Status::Unavailable("rendezvous: cannot bind port " +
                               std::to_string(port) + ": " + err);
  }
  char last[256];
  size_t len = sizeof(last);
  zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len);
  const std::string bound(last);
  const int bound_port = std::atoi(bound.c_str() + bound.rfind(':') + 1);
  std::unique_ptr<RendezvousServer> server(
      new RendezvousServer(ctx, s, bound_port));
  server->zap_ = std::move(zap);
  return server;
}

RendezvousServer::~RendezvousServer() {
  const int linger = 2000;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(socket_);
  zap_.reset();
  zmq_ctx_term(ctx_);
}

Status RendezvousServer::Serve(int size, Clock::time_point deadline) {
  std::map<int, Registration> got;
  while (static_cast<int>(got.size()) < size) {
    zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(&item, 1, std::min(MillisUntil(deadline), 100));
    if (n <= 0) {
      if (Clock::now() < deadline) continue;
      const std::string msg = "rendezvous: ranks " + Missing(got, size) +
                              " of " + std::to_string(size) +
                              " did not register in time";
      for (const auto& g : got) Reply(socket_, g.second.identity, "error " + msg);
      return Status::DeadlineExceeded(msg);
    }
    char id[256], text[512];
    const int id_len = zmq_recv(socket_, id, sizeof(id), 0);
    const int text_len = zmq_recv(socket_, text, sizeof(text) - 1, 0);
    if (id_len <= 0 || text_len < 0) continue;
    const std::string identity(id, std::min<size_t>(id_len, sizeof(id)));
    std::istringstream in(std::string(text, std::min<int>(text_len, 511)));
    std::string word;
    Registration reg;
    int rank = -1;
    std::string self;
    in >> word >> rank >> reg.size >> self;
    reg.identity = identity;
    std::string error;
    if (!in || word != "register" || !Endpoint::Decode(self, &reg.endpoint)) {
      error = "malformed registration";
    } else if (reg.size != size) {
      error = "rank " + std::to_string(rank) + " (" + reg.endpoint.ToString() +
              ") says the group has " + std::to_string(reg.size) +
              " ranks, the rendezvous expects " + std::to_string(size);
    } else if (rank < 0 || rank >= size) {
      error = "rank " + std::to_string(rank) + " is not in [0, " +
              std::to_string(size) + ")";
    } else if (got.count(rank)) {
      error = "rank " + std::to_string(rank) + " registered twice: by " +
              got[rank].endpoint.ToString() + " and by " +
              reg.endpoint.ToString();
    }
    if (!error.empty()) {
      Reply(socket_, identity, "error rendezvous: " + error);
      continue;
    }
    got[rank] = reg;
  }
  std::string table = "ok";
  for (const auto& g : got) table += " " + g.second.endpoint.Encode();
  for (const auto& g : got) Reply(socket_, g.second.identity, table);
  return Status::OK();
}

StatusOr<std::vector<Endpoint>> Register(const Endpoint& server, int rank,
                                         int size, const Endpoint& self,
                                         Clock::time_point deadline,
                                         const net::JobKey& key) {
  void* ctx = zmq_ctx_new();
  void* s = zmq_socket(ctx, ZMQ_DEALER);
  // A rendezvous with another key never answers: the deadline error says so.
  const Status secured = net::SecureSocket(s, key, /*is_server=*/false);
  const int zero = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  auto finish = [&](StatusOr<std::vector<Endpoint>> r) {
    zmq_close(s);
    zmq_ctx_term(ctx);
    return r;
  };
  if (!secured.ok()) return finish(secured);
  const std::string ep = "tcp://" + server.ToString();
  if (zmq_connect(s, ep.c_str()) != 0) {
    return finish(Status::InvalidArgument("rendezvous address " +
                                          server.ToString() + ": " + ZmqError()));
  }
  const std::string msg = "register " + std::to_string(rank) + " " +
                          std::to_string(size) + " " + self.Encode();
  zmq_send(s, msg.data(), msg.size(), 0);
  std::string reply;
  while (reply.empty()) {
    zmq_pollitem_t item{s, 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(&item, 1, std::min(MillisUntil(deadline), 100));
    if (n > 0) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, s, 0) >= 0) {
        reply.assign(static_cast<const char*>(zmq_msg_data(&m)),
                     zmq_msg_size(&m));
      }
      zmq_msg_close(&m);
    } else if (Clock::now() >= deadline) {
      return finish(Status::DeadlineExceeded(
          "rank " + std::to_string(rank) + ": no answer from the rendezvous at " +
          server.ToString() + " in time (is it up? are all " +
          std::to_string(size) + " ranks started? do they share the job key?)"));
    }
  }
  if (reply.rfind("error ", 0) == 0) {
    return finish(Status::FailedPrecondition(reply.substr(6)));
  }
  std::istringstream in(reply);
  std::string word, addr;
  in >> word;
  std::vector<Endpoint> table;
  bool parsed = true;
  while (in >> addr) {
    table.emplace_back();
    parsed = Endpoint::Decode(addr, &table.back()) && parsed;
  }
  if (word != "ok" || !parsed || static_cast<int>(table.size()) != size) {
    return finish(Status::DataLoss("rendezvous: malformed answer \"" + reply + "\""));
  }
  return finish(std::move(table));
}

}  // namespace collective
}  // namespace kvtrain
