// Test utilities for multi-process tests: spawn a child process (fork+exec)
// with a given argv and environment, its stdout+stderr captured in a file;
// wait with a timeout; signal it; find free TCP ports on 127.0.0.1.
#ifndef KVTRAIN_TESTS_UTIL_PROCESS_H_
#define KVTRAIN_TESTS_UTIL_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kvtrain {
namespace testutil {

using Clock = std::chrono::steady_clock;
using Duration = Clock::duration;

// How a process ended.
struct ExitInfo {
  bool exited = false;  // true: exit(code); false: killed by `signal`
  int code = -1;
  int signal = 0;
  // When the exit was observed: relative to the spawn, and absolute.
  Duration after = Duration::zero();
  Clock::time_point at;

  bool ok() const { return exited && code == 0; }
  // "exit 0", "exit 3", "killed by signal 9 (Killed)".
  std::string ToString() const;
};

struct ProcessOptions {
  // argv[0] is the program's path.
  std::vector<std::string> argv;
  // Set in the child on top of (overriding) this process's environment.
  std::map<std::string, std::string> env;
  // Removed from the inherited environment.
  std::vector<std::string> unset_env;
  // The child's stdout and stderr go to this file (created or truncated);
  // empty: they are inherited.
  std::string log_path;
};

// A child process. The destructor SIGKILLs and reaps one still running, so
// no test leaves processes behind; children also get SIGKILL if the test
// process dies (PR_SET_PDEATHSIG). Not thread-safe.
class Process {
 public:
  // Errors: an empty argv, an unwritable log file, a program that cannot be
  // executed (with the reason from execve).
  static StatusOr<std::unique_ptr<Process>> Spawn(const ProcessOptions& opts);
  ~Process();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  // True until the process has exited (reaps it once it has).
  bool Alive();
  // Sends `sig` (e.g. SIGKILL, SIGTERM); an error if it already exited.
  Status Signal(int sig);
  // Waits up to `timeout` for the exit; DeadlineExceeded if still running.
  StatusOr<ExitInfo> Wait(Duration timeout);
  // Set once the exit was observed (by Alive or Wait).
  const std::optional<ExitInfo>& exit_info() const { return exit_; }
  // The captured output so far ("" without a log file).
  std::string ReadLog() const;

 private:
  Process(pid_t pid, std::string log_path);
  bool Reap(bool block);

  pid_t pid_;
  std::string log_path_;
  Clock::time_point started_;
  std::optional<ExitInfo> exit_;
};

// A TCP port on 127.0.0.1 that was free a moment ago, drawn below the
// kernel's ephemeral range so that no connect() or bind to port 0 elsewhere
// is handed it in between. Another test may still take it before it is used;
// LocalJob retries the scheduler's port for that reason.
StatusOr<int> FreeTcpPort();

// True once something accepts TCP connections on 127.0.0.1:port.
bool PortAcceptsConnections(int port);

// A fresh directory for the test's files: under $TEST_TMPDIR when Bazel
// runs the test, else under /tmp.
std::string NewTempDir(const std::string& prefix);

// The absolute path of a file of this workspace's runfiles, e.g.
// RunfilePath("tests/ps/ps_test_node"); tests list it in `data`.
std::string RunfilePath(const std::string& workspace_relative);

// Whole-file read; "" if it cannot be read.
std::string ReadFile(const std::string& path);

}  // namespace testutil
}  // namespace kvtrain

#endif  // KVTRAIN_TESTS_UTIL_PROCESS_H_
