// Rendezvous over one ZeroMQ ROUTER (server) and a DEALER per rank. The
// messages are one text frame each:
//   rank -> server: "register <rank> <size> <endpoint>"
//   server -> rank: "ok <endpoint> <endpoint> ..." or "error <message>".
#include "transport/collective/rendezvous.h"

#include <zmq.h>

#include <algorithm>
#include <string>

#include "net/roster.h"
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
};

// The words of `text` split at single spaces; false if any is empty (two
// spaces in a row, or one at either end).
bool Words(std::string_view text, std::vector<std::string_view>* out) {
  out->clear();
  for (;;) {
    const size_t space = text.find(' ');
    out->push_back(text.substr(0, space));
    if (out->back().empty()) return false;
    if (space == std::string_view::npos) return true;
    text.remove_prefix(space + 1);
  }
}

// A decimal number in [lo, hi] with at most 9 digits, nothing else.
bool Number(std::string_view s, int lo, int hi, int* out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

std::string Quoted(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return "\"" + out + (s.size() > 80 ? "...\"" : "\"");
}

std::string Hex(const std::string& id) {
  static const char* kHex = "0123456789abcdef";
  std::string out = "0x";
  for (unsigned char c : id.substr(0, 16)) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

void Reply(void* socket, const std::string& identity, const std::string& text) {
  zmq_send(socket, identity.data(), identity.size(), ZMQ_SNDMORE);
  zmq_send(socket, text.data(), text.size(), 0);
}

}  // namespace

std::string EncodeRegisterRequest(const RegisterRequest& r) {
  return "register " + std::to_string(r.rank) + " " + std::to_string(r.size) + " " +
         r.endpoint.Encode();
}

StatusOr<RegisterRequest> ParseRegisterRequest(const std::vector<std::string_view>& frames) {
  if (frames.size() != 1) {
    return Status::DataLoss(std::to_string(frames.size()) + " frames, expected 1");
  }
  const std::string_view text = frames[0];
  if (text.size() > kMaxRegistrationBytes) {
    return Status::DataLoss(std::to_string(text.size()) + " bytes, more than " +
                            std::to_string(kMaxRegistrationBytes));
  }
  if (!Printable(text)) return Status::DataLoss("not text: " + Quoted(text));
  std::vector<std::string_view> w;
  RegisterRequest r;
  if (!Words(text, &w) || w.size() != 4 || w[0] != "register" ||
      !Number(w[1], 0, 65534, &r.rank) || !Number(w[2], 1, 65535, &r.size) ||
      !Endpoint::Decode(std::string(w[3]), &r.endpoint)) {
    return Status::DataLoss("not \"register <rank> <size> <host:port>\": " + Quoted(text));
  }
  return r;
}

StatusOr<std::vector<Endpoint>> ParseRendezvousAnswer(
    const std::vector<std::string_view>& frames, int size) {
  if (frames.size() != 1) {
    return Status::DataLoss("rendezvous: an answer of " + std::to_string(frames.size()) +
                            " frames, expected 1");
  }
  const std::string_view text = frames[0];
  if (text.rfind("error ", 0) == 0) {
    return Status::FailedPrecondition(std::string(text.substr(6)));
  }
  std::vector<std::string_view> w;
  std::vector<Endpoint> table;
  bool parsed = Printable(text) && Words(text, &w) && w[0] == "ok" &&
                static_cast<int>(w.size()) == size + 1;
  for (size_t i = 1; parsed && i < w.size(); ++i) {
    table.emplace_back();
    parsed = Endpoint::Decode(std::string(w[i]), &table.back());
  }
  if (!parsed) return Status::DataLoss("rendezvous: malformed answer " + Quoted(text));
  return table;
}

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
  const int64_t max_size = kMaxRegistrationBytes;
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_size, sizeof(max_size));
  const int deadline = net::kHandshakeDeadlineMs;
  zmq_setsockopt(s, ZMQ_HANDSHAKE_IVL, &deadline, sizeof(deadline));
  // Watched as every node's bound socket is: strangers beyond the bound on
  // connections in their handshake are shed, a connection sending more than
  // a HELLO before its answer is closed, failures are logged.
  auto monitor = net::HandshakeMonitor::Start(
      ctx, key.secure(), "all-reduce rendezvous",
      [](int, const std::string&, const std::string&, int, bool) {});
  Status secured = monitor->Watch(s, /*is_server=*/true, -1);
  if (secured.ok()) secured = net::SecureSocket(s, key, /*is_server=*/true);
  const std::string ep =
      port == 0 ? "tcp://*:*" : "tcp://*:" + std::to_string(port);
  if (!secured.ok() || zmq_bind(s, ep.c_str()) != 0) {
    const std::string err = secured.ok() ? ZmqError() : secured.message();
    zmq_close(s);
    monitor.reset();
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
  server->monitor_ = std::move(monitor);
  return server;
}

RendezvousServer::~RendezvousServer() {
  const int linger = 2000;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(socket_);
  monitor_.reset();
  zap_.reset();
  zmq_ctx_term(ctx_);
}

bool RendezvousServer::ReadMessage(std::string* identity, std::vector<std::string>* frames,
                                   size_t* count, std::string* address) {
  zmq_msg_t m;
  zmq_msg_init(&m);
  if (zmq_msg_recv(&m, socket_, ZMQ_DONTWAIT) < 0) {
    zmq_msg_close(&m);
    return false;
  }
  identity->assign(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
  frames->clear();
  *count = 0;
  address->clear();
  while (zmq_msg_more(&m)) {
    if (zmq_msg_recv(&m, socket_, 0) < 0) break;
    ++*count;
    if (frames->size() < 4) {
      frames->emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    }
    const char* a = zmq_msg_gets(&m, "Peer-Address");
    if (a != nullptr) *address = a;
  }
  zmq_msg_close(&m);
  return true;
}

Status RendezvousServer::Serve(int size, Clock::time_point deadline) {
  // The rules are the roster's (net/roster.h); registered[i] is the
  // connection and whole endpoint of roster.entries()[i].
  net::Roster roster({{"rank", size, /*ranks_given=*/true}});
  std::vector<Registration> registered;
  std::string identity, address;
  std::vector<std::string> frames;
  size_t count = 0;
  while (!roster.complete()) {
    zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(&item, 1, std::min(MillisUntil(deadline), 100));
    if (n <= 0) {
      if (Clock::now() < deadline) continue;
      const std::string msg = "rendezvous: ranks " + roster.MissingRanks(0) + " of " +
                              std::to_string(size) + " did not register in time";
      for (const Registration& g : registered) Reply(socket_, g.identity, "error " + msg);
      return Status::DeadlineExceeded(msg);
    }
    while (!roster.complete() && ReadMessage(&identity, &frames, &count, &address)) {
      auto from = [&] {
        return "connection " + Hex(identity) + (address.empty() ? "" : " at " + address);
      };
      StatusOr<RegisterRequest> req =
          ParseRegisterRequest(std::vector<std::string_view>(frames.begin(), frames.end()));
      if (!req.ok()) {
        ++dropped_;
        KV_LOG_LIMITED(WARNING, log_)
            << "rendezvous: dropped a message from " << from() << ": "
            << (count > frames.size() ? std::to_string(count) + " frames, expected 1"
                                      : req.status().message());
        continue;
      }
      std::string error;
      if (req->size != size) {
        error = "rank " + std::to_string(req->rank) + " (" + req->endpoint.ToString() +
                ") says the group has " + std::to_string(req->size) +
                " ranks, the rendezvous expects " + std::to_string(size);
      } else {
        error = roster.Add({0, req->rank, req->endpoint.host, req->endpoint.port, identity});
        if (error.empty()) registered.push_back({identity, req->endpoint});
      }
      if (error == net::Roster::kRepeat) continue;
      if (!error.empty()) {
        KV_LOG_LIMITED(WARNING, log_) << "rendezvous: refused " << from() << ": " << error;
        Reply(socket_, identity, "error rendezvous: " + error);
      }
    }
  }
  std::string table = "ok";
  const std::vector<size_t> by_rank = roster.Ranked(nullptr)[0];
  for (size_t i : by_rank) table += " " + registered[i].endpoint.Encode();
  for (const Registration& g : registered) Reply(socket_, g.identity, table);
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
  // The table (at most a registration's worth per rank) or an error that
  // quotes two registrations.
  const int64_t max_answer = 4096 + static_cast<int64_t>(size) * (kMaxRegistrationBytes + 1);
  zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &max_answer, sizeof(max_answer));
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
  const std::string msg = EncodeRegisterRequest({rank, size, self});
  zmq_send(s, msg.data(), msg.size(), 0);
  std::vector<std::string> frames;
  while (frames.empty()) {
    zmq_pollitem_t item{s, 0, ZMQ_POLLIN, 0};
    const int n = zmq_poll(&item, 1, std::min(MillisUntil(deadline), 100));
    if (n > 0) {
      // One whole message, however many frames it has.
      zmq_msg_t m;
      zmq_msg_init(&m);
      bool more = true;
      while (more && zmq_msg_recv(&m, s, 0) >= 0) {
        if (frames.size() < 4) {
          frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
        }
        more = zmq_msg_more(&m);
      }
      zmq_msg_close(&m);
    } else if (Clock::now() >= deadline) {
      return finish(Status::DeadlineExceeded(
          "rank " + std::to_string(rank) + ": no answer from the rendezvous at " +
          server.ToString() + " in time (is it up? are all " +
          std::to_string(size) + " ranks started? do they share the job key?)"));
    }
  }
  return finish(ParseRendezvousAnswer(
      std::vector<std::string_view>(frames.begin(), frames.end()), size));
}

}  // namespace collective
}  // namespace kvtrain
