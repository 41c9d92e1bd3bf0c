// tcp_replay: a training step's messages over plain TCP, without kvtrain:
// the baseline that dist_train_bench --link measures on the same emulated
// links. Each worker queues its step's messages (server, bytes) in order on
// one connection per server, and every connection sends as its socket takes
// it (non-blocking, one poll loop per process, as an asynchronous transport
// does); a server answers message i of a step with as
// many bytes once every worker's message i is in (--answer=all, dist_sync's
// rule), or each worker's message as it comes in (--answer=each,
// dist_async's); the worker then spins for the step's compute and goes on.
// Prints the median time from a step's first send to its last answer.
//
//   tcp_replay --role=server --port=P --workers=N [--answer=all|each]
//   tcp_replay --role=worker --servers=H:P,H:P --messages=S:BYTES,...
//              --steps=300 --compute_us=420
#include <arpa/inet.h>
#include <fcntl.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

DEFINE_string(role, "", "server or worker");
DEFINE_int32(port, 0, "server: the port to listen on");
DEFINE_int32(workers, 1, "server: the workers that connect");
DEFINE_string(answer, "all",
              "server: answer message i once every worker's copy is in "
              "(all: dist_sync) or each worker's as it comes in (each: "
              "dist_async)");
DEFINE_string(servers, "", "worker: the servers, host:port, comma-separated");
DEFINE_string(
    messages, "",
    "worker: a step's messages in order, server:bytes, comma-separated");
DEFINE_int32(steps, 300, "worker: steps (the first fifth is not counted)");
DEFINE_int32(sndbuf, 0,
             "SO_SNDBUF of every connection, bytes (0: the kernel's)");
DEFINE_int32(compute_us, 0,
             "worker: the compute between a step's last answer and the next");

namespace {

using Clock = std::chrono::steady_clock;

struct Header {
  uint32_t step;
  uint32_t index;
  uint32_t bytes;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tcp_replay: %s\n", what.c_str());
  std::exit(2);
}

// One connection's bytes both ways, without blocking: what is queued goes
// out in order as the socket takes it, and what comes in is cut into
// messages (a header, then as many body bytes, read and dropped). So a
// process that talks to several peers sends to each as fast as its link
// lets it, as an asynchronous transport (ZeroMQ's I/O thread) does, rather
// than waiting on one peer's full socket while another's link idles.
class Conn {
 public:
  explicit Conn(int fd) : fd_(fd) {
    const int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      Die(std::string("fcntl: ") + std::strerror(errno));
    }
  }
  int fd() const { return fd_; }
  bool open() const { return open_; }
  bool sending() const { return open_ && !out_.empty(); }

  // Queues a message: its header, then h.bytes bytes of `payload`.
  void Queue(const Header& h) { out_.push_back({h, 0}); }

  // Writes what the socket takes; `payload` holds the largest body. A peer
  // gone (reset) closes the connection.
  void Flush(const std::vector<char>& payload) {
    while (open_ && !out_.empty()) {
      Pending& m = out_.front();
      const size_t total = sizeof(Header) + m.header.bytes;
      iovec iov[2];
      int n = 0;
      if (m.sent < sizeof(Header)) {
        iov[n++] = {reinterpret_cast<char*>(&m.header) + m.sent,
                    sizeof(Header) - m.sent};
        iov[n++] = {const_cast<char*>(payload.data()), m.header.bytes};
      } else {
        iov[n++] = {
            const_cast<char*>(payload.data()) + (m.sent - sizeof(Header)),
            total - m.sent};
      }
      const ssize_t k = writev(fd_, iov, n);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        Close();
        return;
      }
      if (k <= 0) Die(std::string("write: ") + std::strerror(errno));
      m.sent += static_cast<size_t>(k);
      if (m.sent == total) out_.pop_front();
    }
  }

  // Reads what has arrived; calls done(header) for each whole message. At
  // the end of the stream (the peer is done) the connection is closed.
  template <typename Done>
  void Read(Done&& done) {
    char buf[1 << 16];
    for (;;) {
      ssize_t k = read(fd_, buf, sizeof buf);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k < 0 && errno == ECONNRESET) k = 0;
      if (k < 0) Die(std::string("read: ") + std::strerror(errno));
      if (k == 0) {
        Close();
        return;
      }
      size_t at = 0;
      while (at < static_cast<size_t>(k)) {
        if (got_ < sizeof(Header)) {
          const size_t take =
              std::min(sizeof(Header) - got_, static_cast<size_t>(k) - at);
          std::memcpy(reinterpret_cast<char*>(&in_) + got_, buf + at, take);
          got_ += take;
          at += take;
        } else {
          const size_t take = std::min(sizeof(Header) + in_.bytes - got_,
                                       static_cast<size_t>(k) - at);
          got_ += take;
          at += take;
        }
        if (got_ >= sizeof(Header) && got_ == sizeof(Header) + in_.bytes) {
          got_ = 0;
          done(in_);
        }
      }
    }
  }

 private:
  void Close() {
    close(fd_);
    open_ = false;
    out_.clear();
  }

  struct Pending {
    Header header;
    size_t sent;
  };
  int fd_;
  bool open_ = true;
  std::deque<Pending> out_;
  Header in_{};
  size_t got_ = 0;
};

// Waits until a socket can be read, or written where `conns` has bytes to
// send, and moves what it can on every open connection: `done(c, header)`
// for each whole message that came in on conns[c]. Returns how many
// connections are still open (a peer that closed its end is not polled
// again).
template <typename Done>
size_t Pump(std::vector<Conn>& conns, const std::vector<char>& payload,
            Done&& done) {
  std::vector<pollfd> fds(conns.size());
  for (size_t c = 0; c < conns.size(); ++c) {
    const short events =
        static_cast<short>(POLLIN | (conns[c].sending() ? POLLOUT : 0));
    // poll ignores a negative descriptor.
    fds[c] = {conns[c].open() ? conns[c].fd() : -1, events, 0};
  }
  if (poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) {
    Die(std::string("poll: ") + std::strerror(errno));
  }
  size_t open = 0;
  for (size_t c = 0; c < conns.size(); ++c) {
    if (!conns[c].open()) continue;
    if (fds[c].revents & POLLOUT) conns[c].Flush(payload);
    if (fds[c].revents & (POLLIN | POLLHUP | POLLERR)) {
      conns[c].Read([&](const Header& h) { done(c, h); });
    }
    open += conns[c].open();
  }
  return open;
}

void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (FLAGS_sndbuf > 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &FLAGS_sndbuf, sizeof FLAGS_sndbuf);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// "a:b" -> (a, b as a number); dies naming `flag` otherwise.
std::pair<std::string, long> Pair(const std::string& item, const char* flag) {
  const size_t colon = item.rfind(':');
  char* end = nullptr;
  const long n = colon == std::string::npos
                     ? -1
                     : std::strtol(item.c_str() + colon + 1, &end, 10);
  if (n < 0 || end == nullptr || *end != '\0') {
    Die(std::string("--") + flag + ": \"" + item + "\" is not NAME:NUMBER");
  }
  return {item.substr(0, colon), n};
}

int Serve() {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(FLAGS_port));
  addr.sin_addr.s_addr = INADDR_ANY;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 64) != 0) {
    Die("listen on port " + std::to_string(FLAGS_port) + ": " +
        std::strerror(errno));
  }
  const int n = FLAGS_workers;
  const bool each = FLAGS_answer == "each";
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = accept(listener, nullptr, nullptr);
    if (fd < 0) Die(std::string("accept: ") + std::strerror(errno));
    NoDelay(fd);
    fds.push_back(fd);
  }
  std::vector<Conn> conns(fds.begin(), fds.end());
  // (step, index) -> workers whose message is in.
  std::map<uint64_t, int> arrived;
  std::vector<char> payload;
  // Until every worker is done: one that finishes first may leave others
  // still waiting for answers (--answer=each).
  for (;;) {
    const size_t open = Pump(conns, payload, [&](size_t w, const Header& h) {
      if (h.bytes > payload.size()) payload.resize(h.bytes, 1);
      // Which workers get the answer now: the sender (each), or every
      // worker once the last copy is in (all).
      size_t first = w, last = w + 1;
      if (!each) {
        const uint64_t key = (uint64_t{h.step} << 32) | h.index;
        if (++arrived[key] < n) return;
        arrived.erase(key);
        first = 0;
        last = static_cast<size_t>(n);
      }
      for (size_t o = first; o < last; ++o) {
        conns[o].Queue(h);
        conns[o].Flush(payload);
      }
    });
    if (open == 0) return 0;
  }
}

int Connect(const std::string& host, long port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    Die("--servers: \"" + host + "\" is not an IPv4 address");
  }
  // The server may still be starting: retry for 10 s.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      NoDelay(fd);
      return fd;
    }
    const int err = errno;
    close(fd);
    if (Clock::now() > deadline) {
      Die("connect to " + host + ":" + std::to_string(port) + ": " +
          std::strerror(err));
    }
    usleep(20000);
  }
}

int Work() {
  std::vector<std::pair<std::string, long>> servers;
  for (const std::string& s : Split(FLAGS_servers))
    servers.push_back(Pair(s, "servers"));
  if (servers.empty()) Die("--servers: no server given");
  std::vector<std::pair<int, uint32_t>> messages;
  for (const std::string& m : Split(FLAGS_messages)) {
    const auto [server, bytes] = Pair(m, "messages");
    const int s = std::atoi(server.c_str());
    if (s < 0 || s >= static_cast<int>(servers.size()) || bytes > (64 << 20)) {
      Die("--messages: \"" + m + "\": server out of range or above 64 MiB");
    }
    messages.emplace_back(s, static_cast<uint32_t>(bytes));
  }
  if (messages.empty()) Die("--messages: no message given");
  std::vector<Conn> conns;
  for (const auto& [host, port] : servers)
    conns.emplace_back(Connect(host, port));
  uint32_t largest = 0;
  for (const auto& m : messages) largest = std::max(largest, m.second);
  const std::vector<char> payload(largest, 1);
  std::vector<double> us;
  for (int step = 0; step < FLAGS_steps; ++step) {
    const Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < messages.size(); ++i) {
      conns[messages[i].first].Queue({static_cast<uint32_t>(step),
                                      static_cast<uint32_t>(i),
                                      messages[i].second});
    }
    for (Conn& c : conns) c.Flush(payload);
    size_t answered = 0;
    while (answered < messages.size()) {
      if (Pump(conns, payload, [&](size_t, const Header&) { ++answered; }) <
          conns.size()) {
        Die("a server closed its connection");
      }
    }
    const Clock::time_point t1 = Clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    while (Clock::now() - t1 < std::chrono::microseconds(FLAGS_compute_us)) {
    }
  }
  std::vector<double> counted(us.begin() + us.size() / 5, us.end());
  std::sort(counted.begin(), counted.end());
  std::printf("comm_us median %.0f p10 %.0f p90 %.0f\n",
              counted[counted.size() / 2], counted[counted.size() / 10],
              counted[counted.size() * 9 / 10]);
  std::fflush(stdout);
  // The readers block on the servers, which outlive this process.
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_sndbuf < 0) Die("--sndbuf must be >= 0 (0: the kernel's)");
  // A peer that is gone shows as EPIPE from write, not as a signal.
  signal(SIGPIPE, SIG_IGN);
  if (FLAGS_role == "server") {
    if (FLAGS_port <= 0 || FLAGS_workers <= 0)
      Die("--port and --workers must be positive");
    if (FLAGS_answer != "all" && FLAGS_answer != "each")
      Die("--answer: expected all or each, got \"" + FLAGS_answer + "\"");
    return Serve();
  }
  if (FLAGS_role == "worker") {
    if (FLAGS_steps < 5 || FLAGS_compute_us < 0)
      Die("--steps must be >= 5, --compute_us >= 0");
    return Work();
  }
  Die("--role: expected server or worker, got \"" + FLAGS_role + "\"");
}
