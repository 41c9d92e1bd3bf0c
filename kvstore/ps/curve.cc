// JobKey (environment, key files), SecureSocket and the ZAP handler.
#include "kvstore/ps/curve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace kvtrain {
namespace ps {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
constexpr size_t kZ85KeyChars = 40;

std::string Trim(const std::string& s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string OctalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0%03o", static_cast<unsigned>(mode & 0777));
  return buf;
}

StatusOr<std::string> ReadKeyFile(const std::string& path) {
  const std::string var = env::kJobKeyFile;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return Status::NotFound(var + "=\"" + path +
                            "\": cannot read the job key file: " +
                            std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    return Status::FailedPrecondition(
        var + "=\"" + path + "\": the job key file has mode " +
        OctalMode(st.st_mode) +
        ", which lets other users read it; it must be 0600 or stricter "
        "(chmod 600 " + path + ")");
  }
  std::ifstream in(path);
  if (!in) {
    return Status::FailedPrecondition(var + "=\"" + path +
                                    "\": cannot open the job key file");
  }
  std::ostringstream os;
  os << in.rdbuf();
  return Trim(os.str());
}

// Receives one multi-part message; false on timeout or error.
bool RecvFrames(void* socket, std::vector<std::string>* frames) {
  frames->clear();
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, socket, 0) < 0) {
      zmq_msg_close(&m);
      if (frames->empty()) return false;
      continue;  // a started message always completes; retry the rest
    }
    frames->emplace_back(static_cast<const char*>(zmq_msg_data(&m)),
                         zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return true;
}

void SendFrames(void* socket, const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    zmq_send(socket, frames[i].data(), frames[i].size(),
             i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
  }
}

}  // namespace

std::string Z85Encode(const std::string& bytes) {
  CHECK_EQ(bytes.size() % 4, 0u) << "Z85 needs a multiple of 4 bytes";
  std::vector<char> out(bytes.size() * 5 / 4 + 1);
  zmq_z85_encode(out.data(), reinterpret_cast<const uint8_t*>(bytes.data()),
                 bytes.size());
  return std::string(out.data());
}

StatusOr<std::string> Z85Decode(const std::string& text) {
  if (text.size() % 5 != 0) {
    return Status::InvalidArgument("Z85 text must be a multiple of 5 long");
  }
  std::string out(text.size() * 4 / 5, '\0');
  if (zmq_z85_decode(reinterpret_cast<uint8_t*>(&out[0]), text.c_str()) ==
      nullptr) {
    return Status::InvalidArgument("not Z85 text");
  }
  return out;
}

StatusOr<JobKey> JobKey::FromSecretZ85(const std::string& z85,
                                       const std::string& source) {
  if (!zmq_has("curve")) {
    return Status::FailedPrecondition(
        "this libzmq was built without CURVE security (zmq_has(\"curve\") is "
        "false); install a libzmq with libsodium, or set " +
        std::string(env::kInsecure) + "=1 to run without security");
  }
  if (z85.size() != kZ85KeyChars || !Z85Decode(z85).ok()) {
    return Status::InvalidArgument(
        source + ": not a job key: expected 40 characters of Z85 text (a "
        "CURVE secret key, as tracker/launch.py writes), got " +
        std::to_string(z85.size()) + " characters");
  }
  char pub[kZ85KeyChars + 1];
  if (zmq_curve_public(pub, z85.c_str()) != 0) {
    return Status::InvalidArgument(source + ": not a CURVE secret key: " +
                                   zmq_strerror(zmq_errno()));
  }
  JobKey key;
  key.secret_z85_ = z85;
  key.public_z85_ = pub;
  return key;
}

JobKey JobKey::Generate() {
  char pub[kZ85KeyChars + 1], sec[kZ85KeyChars + 1];
  CHECK_EQ(zmq_curve_keypair(pub, sec), 0) << zmq_strerror(zmq_errno());
  JobKey key;
  key.secret_z85_ = sec;
  key.public_z85_ = pub;
  return key;
}

StatusOr<JobKey> JobKey::FromEnv(const EnvLookup& env) {
  KV_ASSIGN_OR_RETURN(bool insecure, GetBoolVar(env, env::kInsecure, false));
  if (insecure) {
    static std::once_flag warned;
    std::call_once(warned, [] {
      LOG(WARNING) << env::kInsecure
                   << "=1: CURVE security is off; anyone who can reach this "
                      "job's ports can join it, push, pull and stop it";
    });
    return Insecure();
  }
  if (auto text = env(env::kJobKey)) {
    return FromSecretZ85(Trim(*text), env::kJobKey);
  }
  if (auto path = env(env::kJobKeyFile)) {
    KV_ASSIGN_OR_RETURN(std::string text, ReadKeyFile(*path));
    return FromSecretZ85(text, std::string(env::kJobKeyFile) + "=\"" + *path +
                                   "\"");
  }
  return Status::FailedPrecondition(
      "no job key: set " + std::string(env::kJobKey) +
      " (the job's CURVE secret key, Z85 text) or " + env::kJobKeyFile +
      " (a 0600 file holding it), as tracker/launch.py does, or " +
      env::kInsecure + "=1 to run without security");
}

std::string JobKey::Fingerprint() const {
  return secure() ? public_z85_.substr(0, 8) : "insecure";
}

Status SecureSocket(void* socket, const JobKey& key, bool is_server) {
  if (!key.secure()) return Status::OK();
  auto set = [socket](int option, const void* value, size_t size,
                      const char* name) -> Status {
    if (zmq_setsockopt(socket, option, value, size) != 0) {
      return Status::Internal(std::string("zmq_setsockopt(") + name +
                              "): " + zmq_strerror(zmq_errno()));
    }
    return Status::OK();
  };
  const std::string& sec = key.secret_z85();
  const std::string& pub = key.public_z85();
  if (is_server) {
    const int one = 1;
    KV_RETURN_IF_ERROR(set(ZMQ_CURVE_SERVER, &one, sizeof(one),
                           "ZMQ_CURVE_SERVER"));
    return set(ZMQ_CURVE_SECRETKEY, sec.c_str(), sec.size() + 1,
               "ZMQ_CURVE_SECRETKEY");
  }
  KV_RETURN_IF_ERROR(set(ZMQ_CURVE_SERVERKEY, pub.c_str(), pub.size() + 1,
                         "ZMQ_CURVE_SERVERKEY"));
  KV_RETURN_IF_ERROR(set(ZMQ_CURVE_PUBLICKEY, pub.c_str(), pub.size() + 1,
                         "ZMQ_CURVE_PUBLICKEY"));
  return set(ZMQ_CURVE_SECRETKEY, sec.c_str(), sec.size() + 1,
             "ZMQ_CURVE_SECRETKEY");
}

// ---- ZapHandler ----

StatusOr<std::unique_ptr<ZapHandler>> ZapHandler::Start(void* ctx,
                                                        const JobKey& key,
                                                        std::string log_name) {
  void* s = zmq_socket(ctx, ZMQ_REP);
  if (s == nullptr) {
    return Status::Internal(std::string("ZAP socket: ") +
                            zmq_strerror(zmq_errno()));
  }
  const int zero = 0, poll_ms = 50;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &poll_ms, sizeof(poll_ms));
  if (zmq_bind(s, kZapEndpoint) != 0) {
    const std::string err = zmq_strerror(zmq_errno());
    zmq_close(s);
    return Status::Internal(std::string("cannot bind the ZAP handler at ") +
                            kZapEndpoint + ": " + err);
  }
  return std::unique_ptr<ZapHandler>(
      new ZapHandler(s, key, std::move(log_name)));
}

ZapHandler::ZapHandler(void* socket, const JobKey& key, std::string log_name)
    : socket_(socket),
      log_name_(std::move(log_name)),
      log_limiter_(10, std::chrono::seconds(10)) {
  if (key.secure()) {
    StatusOr<std::string> pub = Z85Decode(key.public_z85());
    CHECK(pub.ok()) << pub.status();
    public_key_ = *pub;
  }
  thread_ = std::thread([this] { Loop(); });
}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  thread_.join();
  zmq_close(socket_);
}

void ZapHandler::SetLogName(std::string name) {
  std::lock_guard<std::mutex> l(mu_);
  log_name_ = std::move(name);
}

void ZapHandler::Loop() {
  std::vector<std::string> req;
  while (!stop_.load()) {
    if (!RecvFrames(socket_, &req)) continue;
    // version, request id, domain, address, identity, mechanism, credentials
    const bool well_formed = req.size() >= 6 && req[0] == "1.0";
    const std::string request_id = req.size() > 1 ? req[1] : "";
    const std::string address = req.size() > 3 ? req[3] : "?";
    const std::string mechanism = req.size() > 5 ? req[5] : "";
    std::string why;
    if (!well_formed) {
      why = "malformed ZAP request";
    } else if (mechanism != "CURVE") {
      why = "it uses the " + mechanism + " mechanism, not CURVE";
    } else if (public_key_.empty() || req.size() < 7 ||
               req[6] != public_key_) {
      why = "its CURVE key is not this job's key";
    }
    const bool ok = why.empty();
    SendFrames(socket_, {"1.0", request_id, ok ? "200" : "400",
                         ok ? "OK" : "not this job's key", "", ""});
    if (ok) {
      accepted_.fetch_add(1);
      continue;
    }
    refused_.fetch_add(1);
    std::string name;
    {
      std::lock_guard<std::mutex> l(mu_);
      name = log_name_;
    }
    KV_LOG_LIMITED(WARNING, log_limiter_)
        << name << ": refused a connection from " << address << ": "
        << why;
  }
}

// ---- HandshakeMonitor ----

struct HandshakeMonitor::Watched {
  void* pair = nullptr;  // receives the socket's events
  bool is_server = false;
  int tag = 0;
  // Server: peer address by file descriptor, from ZMQ_EVENT_ACCEPTED.
  std::map<uint32_t, std::string> peers;
  // Server: the reason of a failure whose ZMQ_EVENT_DISCONNECTED (which
  // names the descriptor) comes next; "" = none.
  std::string failed;
  // Client: failures in a row.
  int in_a_row = 0;
};

namespace {

std::string PeerAddress(uint32_t fd) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss),
                  &len) != 0) {
    return "an address that closed too soon to be read";
  }
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);  // NOLINT
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Why a bound socket's handshake failed, said of the peer.
std::string ServerReason(uint16_t event, uint32_t value, bool secure) {
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
    return secure ? "it closed the connection during the handshake (as a peer "
                    "without CURVE or without this job's key does)"
                  : "it closed the connection during the handshake";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
    return secure ? "it does not use CURVE (it has no job key, or runs with " +
                        std::string(env::kInsecure) + "=1)"
                  : "it uses CURVE but this process runs with " +
                        std::string(env::kInsecure) + "=1";
  }
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return "its CURVE handshake is not made with this job's key";
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%08x", value);
  return std::string("not a valid ZeroMQ handshake (protocol error ") + buf +
         ")";
}

// Why a connecting socket's handshake failed, said of the server.
std::string ClientReason(uint16_t event, uint32_t value, bool secure) {
  const std::string other_key =
      "it does not accept this process's job key (" +
      std::string(env::kJobKey) + "/" + env::kJobKeyFile +
      "); is it another job's node?";
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return other_key;
  if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH ||
      (!secure && event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)) {
    return secure ? "it does not use CURVE (it runs with " +
                        std::string(env::kInsecure) + "=1)"
                  : "it requires CURVE but this process runs with " +
                        std::string(env::kInsecure) + "=1";
  }
  if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
      value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) {
    return "it closed the connection during the CURVE handshake: " + other_key;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%08x", value);
  return std::string("the handshake failed (protocol error ") + buf + ")";
}

}  // namespace

std::unique_ptr<HandshakeMonitor> HandshakeMonitor::Start(
    void* ctx, bool secure, std::string log_name, RefusedFn on_refused) {
  return std::unique_ptr<HandshakeMonitor>(new HandshakeMonitor(
      ctx, secure, std::move(log_name), std::move(on_refused)));
}

HandshakeMonitor::HandshakeMonitor(void* ctx, bool secure,
                                   std::string log_name, RefusedFn on_refused)
    : ctx_(ctx),
      secure_(secure),
      on_refused_(std::move(on_refused)),
      log_name_(std::move(log_name)),
      log_limiter_(10, std::chrono::seconds(10)) {
  thread_ = std::thread([this] { Loop(); });
}

HandshakeMonitor::~HandshakeMonitor() {
  stop_.store(true);
  thread_.join();
  std::lock_guard<std::mutex> l(mu_);
  for (auto* list : {&watched_, &added_}) {
    for (auto& w : *list) zmq_close(w->pair);
    list->clear();
  }
}

void HandshakeMonitor::SetLogName(std::string name) {
  std::lock_guard<std::mutex> l(mu_);
  log_name_ = std::move(name);
}

Status HandshakeMonitor::Watch(void* socket, bool is_server, int tag) {
  std::lock_guard<std::mutex> l(mu_);
  char endpoint[96];
  std::snprintf(endpoint, sizeof(endpoint), "inproc://kvtrain-handshake-%p-%d",
                static_cast<void*>(this), next_id_++);
  const int events =
      ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
      ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
      ZMQ_EVENT_MONITOR_STOPPED;
  if (zmq_socket_monitor(socket, endpoint, events) != 0) {
    return Status::Internal(std::string("zmq_socket_monitor: ") +
                            zmq_strerror(zmq_errno()));
  }
  auto w = std::make_unique<Watched>();
  w->pair = zmq_socket(ctx_, ZMQ_PAIR);
  const int zero = 0;
  zmq_setsockopt(w->pair, ZMQ_LINGER, &zero, sizeof(zero));
  if (w->pair == nullptr || zmq_connect(w->pair, endpoint) != 0) {
    const std::string err = zmq_strerror(zmq_errno());
    if (w->pair != nullptr) zmq_close(w->pair);
    zmq_socket_monitor(socket, nullptr, 0);
    return Status::Internal("handshake monitor: " + err);
  }
  w->is_server = is_server;
  w->tag = tag;
  added_.push_back(std::move(w));
  return Status::OK();
}

void HandshakeMonitor::Loop() {
  std::vector<zmq_pollitem_t> items;
  while (!stop_.load()) {
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& w : added_) watched_.push_back(std::move(w));
      added_.clear();
    }
    if (watched_.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    items.assign(watched_.size(), zmq_pollitem_t{});
    for (size_t i = 0; i < watched_.size(); ++i) {
      items[i].socket = watched_[i]->pair;
      items[i].events = ZMQ_POLLIN;
    }
    if (zmq_poll(items.data(), static_cast<int>(items.size()), 50) <= 0) {
      continue;
    }
    std::vector<size_t> stopped;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      std::vector<std::string> frames;
      while (true) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, watched_[i]->pair, ZMQ_DONTWAIT) < 0) {
          zmq_msg_close(&m);
          break;
        }
        frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)),
                            zmq_msg_size(&m));
        const bool more = zmq_msg_more(&m);
        zmq_msg_close(&m);
        if (more) continue;
        if (frames.size() == 2 && frames[0].size() == 6) {
          uint16_t event;
          uint32_t value;
          std::memcpy(&event, frames[0].data(), 2);
          std::memcpy(&value, frames[0].data() + 2, 4);
          if (event == ZMQ_EVENT_MONITOR_STOPPED) {
            stopped.push_back(i);
          } else {
            OnEvent(watched_[i].get(), event, value, frames[1]);
          }
        }
        frames.clear();
      }
    }
    // A closed socket's monitor is done: drop it (last first).
    for (auto it = stopped.rbegin(); it != stopped.rend(); ++it) {
      zmq_close(watched_[*it]->pair);
      watched_.erase(watched_.begin() + *it);
    }
  }
}

void HandshakeMonitor::OnEvent(Watched* w, uint16_t event, uint32_t value,
                               const std::string& endpoint) {
  const bool failure = event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
                       event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                       event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  if (!w->is_server) {
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) w->in_a_row = 0;
    if (failure && on_refused_) {
      on_refused_(w->tag, endpoint, ClientReason(event, value, secure_),
                  ++w->in_a_row,
                  event != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL);
    }
    return;
  }
  if (event == ZMQ_EVENT_ACCEPTED) {
    w->peers[value] = PeerAddress(value);
  } else if (failure) {
    refused_.fetch_add(1);
    // ZapHandler logs its own refusals (with the address it was given).
    w->failed = event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                    ? ""
                    : ServerReason(event, value, secure_);
  } else if (event == ZMQ_EVENT_DISCONNECTED) {
    auto it = w->peers.find(value);
    const std::string peer =
        it == w->peers.end() ? "an address that closed too soon to be read"
                             : it->second;
    if (it != w->peers.end()) w->peers.erase(it);
    if (!w->failed.empty()) {
      std::string name;
      {
        std::lock_guard<std::mutex> l(mu_);
        name = log_name_;
      }
      KV_LOG_LIMITED(WARNING, log_limiter_)
          << name << ": refused a connection from " << peer << ": "
          << w->failed;
    }
    w->failed.clear();
  }
}

}  // namespace ps
}  // namespace kvtrain
