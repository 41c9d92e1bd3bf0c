// JobKey (environment, key files), SecureSocket and the ZAP handler.
#include "net/curve.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "net/seal.h"
#include "net/zmq_error.h"

namespace kvtrain {
namespace net {
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

// The key file's text. Every check is made on the descriptor that is then
// read (a file swapped in after a check by path would go unseen): not a
// symbolic link, a regular file, owned by this user, unreadable to others.
StatusOr<std::string> ReadKeyFile(const std::string& path) {
  const std::string what = std::string(env::kJobKeyFile) + "=\"" + path + "\"";
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) {
      return Status::FailedPrecondition(
          what + ": the job key file is a symbolic link; name the file itself");
    }
    return Status::NotFound(what + ": cannot read the job key file: " +
                            std::strerror(errno));
  }
  auto fail = [fd](Status s) {
    close(fd);
    return s;
  };
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return fail(Status::Unavailable(what + ": cannot stat the job key file: " +
                                    std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(Status::FailedPrecondition(
        what + ": the job key file is not a regular file"));
  }
  if (st.st_uid != geteuid()) {
    return fail(Status::FailedPrecondition(
        what + ": the job key file belongs to uid " + std::to_string(st.st_uid) +
        ", not to this process's user (uid " + std::to_string(geteuid()) +
        "), who could not keep others from replacing it"));
  }
  if ((st.st_mode & 077) != 0) {
    return fail(Status::FailedPrecondition(
        what + ": the job key file has mode " + OctalMode(st.st_mode) +
        ", which lets other users read it; it must be 0600 or stricter "
        "(chmod 600 " + path + ")"));
  }
  // A key is 40 characters; anything much longer is not a key file.
  constexpr size_t kMaxBytes = 4096;
  if (st.st_size > static_cast<off_t>(kMaxBytes)) {
    return fail(Status::FailedPrecondition(
        what + ": " + std::to_string(st.st_size) +
        " bytes is too long for a job key file"));
  }
  std::string text(kMaxBytes, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return fail(Status::Unavailable(what + ": cannot read the job key file: " +
                                      std::strerror(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  return Trim(text);
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

Status LimitInbound(void* socket) {
  const int64_t max_frame = kMaxFrameBytes;
  if (zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_frame, sizeof(max_frame)) != 0) {
    return Status::Internal(std::string("zmq_setsockopt(ZMQ_MAXMSGSIZE): ") +
                            zmq_strerror(zmq_errno()));
  }
  const int deadline = kHandshakeDeadlineMs;
  if (zmq_setsockopt(socket, ZMQ_HANDSHAKE_IVL, &deadline, sizeof(deadline)) != 0) {
    return Status::Internal(std::string("zmq_setsockopt(ZMQ_HANDSHAKE_IVL): ") +
                            zmq_strerror(zmq_errno()));
  }
  return Status::OK();
}

StatusOr<void*> BindLaneSocket(void* zmq_context, int* port,
                               const std::function<Status(void*)>& before_bind) {
  void* s = zmq_socket(zmq_context, ZMQ_ROUTER);
  if (s == nullptr) return Status::Internal("zmq_socket: " + ZmqError());
  const int zero = 0, one = 1;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  Status st = LimitInbound(s);
  if (st.ok() &&
      (zmq_setsockopt(s, ZMQ_PLAIN_SERVER, &one, sizeof(one)) != 0 ||
       zmq_setsockopt(s, ZMQ_ZAP_DOMAIN, kLaneZapDomain,
                      sizeof(kLaneZapDomain) - 1) != 0)) {
    st = Status::Internal("cannot make the sealed lane ask for a token: " +
                          ZmqError());
  }
  if (st.ok() && before_bind) st = before_bind(s);
  if (st.ok() && zmq_bind(s, "tcp://*:*") != 0) {
    st = Status::Unavailable("cannot bind the sealed lane: " + ZmqError());
  }
  char last[256];
  size_t len = sizeof(last);
  if (st.ok() && zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, last, &len) != 0) {
    st = Status::Internal("ZMQ_LAST_ENDPOINT: " + ZmqError());
  }
  if (!st.ok()) {
    zmq_close(s);
    return st;
  }
  const std::string bound(last);
  *port = std::atoi(bound.c_str() + bound.rfind(':') + 1);
  return s;
}

Status SecureLaneClient(void* socket, const std::string& key) {
  const std::string token = LaneToken(key);
  if (zmq_setsockopt(socket, ZMQ_PLAIN_USERNAME, kLaneUser,
                     sizeof(kLaneUser) - 1) != 0 ||
      zmq_setsockopt(socket, ZMQ_PLAIN_PASSWORD, token.data(),
                     token.size()) != 0) {
    return Status::Internal("cannot set the sealed lane's token: " + ZmqError());
  }
  return Status::OK();
}

void RaiseFileLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
    const rlim_t want = std::min<rlim_t>(r.rlim_max, 65536);
    if (r.rlim_cur >= want) return;
    r.rlim_cur = want;
    setrlimit(RLIMIT_NOFILE, &r);
  });
}

void SizeContext(void* ctx) {
  RaiseFileLimit();
  rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const int most = zmq_ctx_get(ctx, ZMQ_SOCKET_LIMIT);
  const int64_t want = std::min<int64_t>(most > 0 ? most : 65535,
                                         static_cast<int64_t>(r.rlim_cur));
  if (want > zmq_ctx_get(ctx, ZMQ_MAX_SOCKETS)) {
    zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, static_cast<int>(want));
  }
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
  const int zero = 0;
  zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero));
  if (zmq_bind(s, kZapEndpoint) != 0) {
    const std::string err = zmq_strerror(zmq_errno());
    zmq_close(s);
    return Status::Internal(std::string("cannot bind the ZAP handler at ") +
                            kZapEndpoint + ": " + err);
  }
  return std::unique_ptr<ZapHandler>(
      new ZapHandler(ctx, s, key, std::move(log_name)));
}

ZapHandler::ZapHandler(void* ctx, void* socket, const JobKey& key, std::string log_name)
    : ctx_(ctx),
      socket_(socket),
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
  // Loop waits for a request without a timeout: one that it will not
  // answer wakes it (a terminated context has woken it already).
  void* wake = zmq_socket(ctx_, ZMQ_REQ);
  if (wake != nullptr) {
    const int zero = 0;
    zmq_setsockopt(wake, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(wake, kZapEndpoint) == 0) zmq_send(wake, "stop", 4, ZMQ_DONTWAIT);
  }
  thread_.join();
  if (wake != nullptr) zmq_close(wake);
  zmq_close(socket_);
}

void ZapHandler::SetLogName(std::string name) {
  std::lock_guard<std::mutex> l(mu_);
  log_name_ = std::move(name);
}

void ZapHandler::AllowLane(const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  lane_tokens_.insert(token);
}

void ZapHandler::ForgetLane(const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  lane_tokens_.erase(token);
}

void ZapHandler::Loop() {
  std::vector<std::string> req;
  while (!stop_.load()) {
    if (!RecvFrames(socket_, &req)) continue;
    if (stop_.load()) break;  // the destructor's wake-up
    // version, request id, domain, address, identity, mechanism, credentials
    const bool well_formed = req.size() >= 6 && req[0] == "1.0";
    const std::string request_id = req.size() > 1 ? req[1] : "";
    const std::string address = req.size() > 3 ? req[3] : "?";
    const std::string domain = req.size() > 2 ? req[2] : "";
    const std::string mechanism = req.size() > 5 ? req[5] : "";
    std::string why;
    if (!well_formed) {
      why = "malformed ZAP request";
    } else if (domain == kLaneZapDomain) {
      // A sealed lane's connection: only with the token of a lane this
      // node was offered over CURVE.
      bool allowed = false;
      if (mechanism == "PLAIN" && req.size() >= 8 && req[6] == kLaneUser) {
        std::lock_guard<std::mutex> l(mu_);
        allowed = lane_tokens_.count(req[7]) != 0;
      }
      if (!allowed) why = "it has no token of a sealed lane offered to this node";
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

}  // namespace net
}  // namespace kvtrain
