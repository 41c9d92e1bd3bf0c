// The process's CPU pool (see cpu_threads.h).
#include "tensor/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include <glog/logging.h>

#include "base/thread_annotations.h"
#include "base/thread_pool.h"

namespace kvtrain {
namespace {

struct CpuPoolState {
  std::mutex mu;
  std::shared_ptr<ThreadPool> pool GUARDED_BY(mu);
};

CpuPoolState& PoolState() {
  static CpuPoolState* state = new CpuPoolState;
  return *state;
}

std::shared_ptr<ThreadPool> CpuPool() {
  CpuPoolState& s = PoolState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.pool == nullptr) {
    StatusOr<int> n = CpuThreadsFromEnv(ProcessEnv());
    if (!n.ok()) {
      LOG(WARNING) << n.status() << "; using 1 CPU thread";
    }
    s.pool = std::make_shared<ThreadPool>(n.ok() ? *n : 1);
  }
  return s.pool;
}

}  // namespace

void SetCpuThreads(int n) {
  CpuPoolState& s = PoolState();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.pool == nullptr || s.pool->num_threads() != std::max(1, n)) {
    s.pool = std::make_shared<ThreadPool>(std::max(1, n));
  }
}

int CpuThreads() { return CpuPool()->num_threads(); }

void RestCpuThreads() { CpuPool()->Rest(); }

void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  CpuPool()->ParallelFor(n, grain, fn);
}

StatusOr<int> CpuThreadsFromEnv(const EnvLookup& env) {
  if (env(env::kNumThreads)) {
    KV_ASSIGN_OR_RETURN(int64_t n,
                        GetIntVar(env, env::kNumThreads, 1, 1, 1024));
    return static_cast<int>(n);
  }
  if (env(env::kOmpNumThreads)) {
    KV_ASSIGN_OR_RETURN(int64_t n,
                        GetIntVar(env, env::kOmpNumThreads, 1, 1, 1024));
    return static_cast<int>(n);
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return 1;
}

}  // namespace kvtrain
