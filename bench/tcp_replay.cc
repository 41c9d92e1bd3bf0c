// tcp_replay: a training step's messages over plain TCP, without kvtrain:
// the baseline that dist_train_bench --link measures on the same emulated
// links. Each worker sends its step's messages (server, bytes) in order on
// one connection per server; a server answers message i of a step with as
// many bytes once every worker's message i is in (--answer=all, dist_sync's
// rule), or each worker's message as it comes in (--answer=each,
// dist_async's); the worker then spins for the step's compute and goes on.
// Prints the median time from a step's first send to its last answer.
//
//   tcp_replay --role=server --port=P --workers=N [--answer=all|each]
//   tcp_replay --role=worker --servers=H:P,H:P --messages=S:BYTES,...
//              --steps=300 --compute_us=420
#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

void WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) Die(std::string("write: ") + std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// False at the end of the stream (the peer is done).
bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) Die(std::string("read: ") + std::strerror(errno));
    if (k == 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void NoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
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
  std::vector<std::mutex> write_mu(n);
  std::mutex mu;
  std::map<uint64_t, int>
      arrived;  // (step, index) -> workers whose message is in
  std::vector<std::thread> readers;
  for (int w = 0; w < n; ++w) {
    readers.emplace_back([&, w] {
      std::vector<char> body;
      Header h;
      while (ReadAll(fds[w], &h, sizeof h)) {
        body.resize(h.bytes);
        if (!ReadAll(fds[w], body.data(), h.bytes)) break;
        // Which workers get the answer now: the sender (each), or every
        // worker once the last copy is in (all).
        int first = w, last = w + 1;
        if (!each) {
          std::lock_guard<std::mutex> l(mu);
          const uint64_t key = (uint64_t{h.step} << 32) | h.index;
          if (++arrived[key] < n) continue;
          arrived.erase(key);
          first = 0;
          last = n;
        }
        for (int o = first; o < last; ++o) {
          std::lock_guard<std::mutex> l(write_mu[o]);
          WriteAll(fds[o], &h, sizeof h);
          WriteAll(fds[o], body.data(), h.bytes);
        }
      }
    });
  }
  for (std::thread& t : readers) t.join();
  return 0;
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
  std::vector<int> fds;
  for (const auto& [host, port] : servers) fds.push_back(Connect(host, port));
  std::mutex mu;
  std::condition_variable cv;
  size_t answered = 0;
  for (int fd : fds) {
    std::thread([&, fd] {
      std::vector<char> body;
      Header h;
      while (ReadAll(fd, &h, sizeof h)) {
        body.resize(h.bytes);
        if (!ReadAll(fd, body.data(), h.bytes)) break;
        std::lock_guard<std::mutex> l(mu);
        ++answered;
        cv.notify_all();
      }
    }).detach();
  }
  uint32_t largest = 0;
  for (const auto& m : messages) largest = std::max(largest, m.second);
  const std::vector<char> payload(largest, 1);
  std::vector<double> us;
  for (int step = 0; step < FLAGS_steps; ++step) {
    const Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < messages.size(); ++i) {
      const Header h{static_cast<uint32_t>(step), static_cast<uint32_t>(i),
                     messages[i].second};
      WriteAll(fds[messages[i].first], &h, sizeof h);
      WriteAll(fds[messages[i].first], payload.data(), h.bytes);
    }
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return answered == messages.size(); });
      answered = 0;
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
