// The process's CPU threads for operators and GEMMs: one pool per process,
// sized from KVTRAIN_NUM_THREADS / OMP_NUM_THREADS / the cores it may run on.
#ifndef KVTRAIN_TENSOR_CPU_THREADS_H_
#define KVTRAIN_TENSOR_CPU_THREADS_H_

#include <cstdint>
#include <functional>

#include "base/env.h"
#include "base/status.h"

namespace kvtrain {

// The pool is the only source of CPU parallelism in operators: OpenBLAS runs
// single-threaded and big CPU GEMMs are split into blocks run here (see
// tensor/blas.h). SetCpuThreads(n) applies to the process; call it before
// work starts (not while a loop runs). Until it is called, the count comes
// from CpuThreadsFromEnv(ProcessEnv()). Thread-safe.
void SetCpuThreads(int n);
int CpuThreads();

// Runs fn(begin, end) over [0, n) split into chunks of at least `grain` on
// the CPU pool (see ThreadPool::ParallelFor); returns when all are done.
void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn);

// The pool's threads stop polling for work and sleep (ThreadPool::Rest):
// the caller is about to block on another process.
void RestCpuThreads();

// KVTRAIN_NUM_THREADS, else OMP_NUM_THREADS, else the cores this process may
// run on (sched_getaffinity).
StatusOr<int> CpuThreadsFromEnv(const EnvLookup& env);

}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_CPU_THREADS_H_
