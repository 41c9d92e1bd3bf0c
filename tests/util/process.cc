// Child processes, free ports, temp dirs and runfiles for multi-process tests.
#include "tests/util/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace kvtrain {
namespace testutil {

std::string ExitInfo::ToString() const {
  if (exited) return "exit " + std::to_string(code);
  return "killed by signal " + std::to_string(signal) + " (" +
         strsignal(signal) + ")";
}

namespace {

std::vector<std::string> ChildEnv(const ProcessOptions& opts) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    env[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const std::string& name : opts.unset_env) env.erase(name);
  for (const auto& [k, v] : opts.env) env[k] = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Process>> Process::Spawn(const ProcessOptions& opts) {
  if (opts.argv.empty()) return Status::InvalidArgument("Spawn: empty argv");
  // Everything the child touches is prepared before fork: after fork only
  // async-signal-safe calls are allowed.
  std::vector<std::string> argv = opts.argv;
  std::vector<std::string> envs = ChildEnv(opts);
  std::vector<char*> c_argv = CStrings(argv);
  std::vector<char*> c_env = CStrings(envs);
  int log_fd = -1;
  if (!opts.log_path.empty()) {
    log_fd = open(opts.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return Status::Unavailable("cannot create " + opts.log_path + ": " +
                                 strerror(errno));
    }
  }
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    if (log_fd >= 0) close(log_fd);
    return Status::Internal(std::string("pipe2: ") + strerror(errno));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(err_pipe[0]);
    close(err_pipe[1]);
    if (log_fd >= 0) close(log_fd);
    return Status::Internal(std::string("fork: ") + strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execve(c_argv[0], c_argv.data(), c_env.data());
    const int e = errno;
    ssize_t unused = write(err_pipe[1], &e, sizeof(e));
    (void)unused;
    _exit(127);
  }
  close(err_pipe[1]);
  if (log_fd >= 0) close(log_fd);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(err_pipe[0], &child_errno, sizeof(child_errno));
  } while (n < 0 && errno == EINTR);
  close(err_pipe[0]);
  std::unique_ptr<Process> p(new Process(pid, opts.log_path));
  if (n == sizeof(child_errno)) {
    p->Wait(std::chrono::seconds(10));
    return Status::Unavailable("cannot run " + opts.argv[0] + ": " +
                               strerror(child_errno));
  }
  return p;
}

Process::Process(pid_t pid, std::string log_path)
    : pid_(pid), log_path_(std::move(log_path)), started_(Clock::now()) {}

Process::~Process() {
  if (!exit_) {
    kill(pid_, SIGKILL);
    Reap(/*block=*/true);
  }
}

bool Process::Reap(bool block) {
  if (exit_) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return false;
  ExitInfo info;
  info.at = Clock::now();
  info.after = info.at - started_;
  if (WIFEXITED(status)) {
    info.exited = true;
    info.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    info.signal = WTERMSIG(status);
  }
  exit_ = info;
  return true;
}

bool Process::Alive() { return !Reap(/*block=*/false); }

Status Process::Signal(int sig) {
  if (!Alive()) {
    return Status::FailedPrecondition("process " + std::to_string(pid_) +
                                      " already ended: " + exit_->ToString());
  }
  if (kill(pid_, sig) != 0) {
    return Status::Internal(std::string("kill: ") + strerror(errno));
  }
  return Status::OK();
}

StatusOr<ExitInfo> Process::Wait(Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!Reap(/*block=*/false)) {
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded(
          "process " + std::to_string(pid_) + " still running after " +
          std::to_string(std::chrono::duration<double>(timeout).count()) +
          " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return *exit_;
}

std::string Process::ReadLog() const {
  return log_path_.empty() ? "" : ReadFile(log_path_);
}

namespace {

// The first port of the kernel's ephemeral range (bind to port 0 and the
// source port of every connect are drawn from it).
int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (f >> low && low > 1024) return low;
  return 32768;
}

// Binds fd to 127.0.0.1:port (0: any); returns the port bound, or -1.
int BindLoopback(int fd, int port) {
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return -1;
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace

StatusOr<int> FreeTcpPort() {
  const int low = EphemeralLow();
  std::random_device seed;
  std::mt19937 rng(seed());
  std::uniform_int_distribution<int> below(std::max(1025, low - 12000), low - 1);
  for (int attempt = 0; attempt <= 100; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      return Status::Internal(std::string("socket: ") + strerror(errno));
    // The last attempt lets the kernel choose.
    const int port = BindLoopback(fd, attempt < 100 ? below(rng) : 0);
    const std::string err = strerror(errno);
    close(fd);
    if (port > 0) return port;
    if (attempt == 100) return Status::Unavailable("no free port: " + err);
  }
  return Status::Unavailable("no free port");
}

bool PortAcceptsConnections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::string NewTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") +
                     "/" + prefix + "XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return base != nullptr ? base : "/tmp";
  return tmpl;
}

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && *srcdir) {
    return std::string(srcdir) + "/" + (ws != nullptr && *ws ? ws : "kvtrain") +
           "/" + workspace_relative;
  }
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return workspace_relative;
  return std::string(cwd) + "/" + workspace_relative;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace testutil
}  // namespace kvtrain
