// Shared setup of the transport's multi-process tests: LocalJob options
// running ps_test_node, and log helpers.
#ifndef KVTRAIN_TESTS_PS_PS_JOB_H_
#define KVTRAIN_TESTS_PS_PS_JOB_H_

#include <string>
#include <thread>
#include <vector>

#include "tests/util/local_job.h"

namespace kvtrain {
namespace testutil {

// Generous: things that must happen on a loaded 2-core machine.
inline constexpr auto kJobDeadline = std::chrono::seconds(240);

inline std::string TestNodeBinary() {
  return RunfilePath("tests/ps/ps_test_node");
}

// A job of ps_test_node. Heartbeats are relaxed here (a loaded machine must
// not look like a dead peer); the kill tests tighten them.
inline LocalJobOptions PsJob(int servers, int workers,
                             std::vector<std::string> args = {}) {
  LocalJobOptions o;
  o.binary = TestNodeBinary();
  o.args = std::move(args);
  o.num_servers = servers;
  o.num_workers = workers;
  o.env = {{"PS_VERBOSE", "0"},
           {"PS_HEARTBEAT_INTERVAL", "0.5"},
           {"PS_HEARTBEAT_TIMEOUT", "60"},
           {"KVTRAIN_STARTUP_TIMEOUT", "120"}};
  return o;
}

// The node's name as it printed it after starting ("server 1 (host:port)"),
// or "" if it has not printed it.
inline std::string StartedName(Process* p) {
  const std::string log = p->ReadLog();
  const std::string mark = "ps_test_node: ";
  const size_t end = log.find(" started\n");
  if (end == std::string::npos) return "";
  const size_t begin = log.rfind(mark, end);
  if (begin == std::string::npos) return "";
  return log.substr(begin + mark.size(), end - begin - mark.size());
}

// Waits until `p`'s log contains `text` (or it exits, or the deadline).
inline bool WaitForLog(Process* p, const std::string& text,
                       Duration timeout = kJobDeadline) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (p->ReadLog().find(text) != std::string::npos) return true;
    if (!p->Alive()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace testutil
}  // namespace kvtrain

#endif  // KVTRAIN_TESTS_PS_PS_JOB_H_
