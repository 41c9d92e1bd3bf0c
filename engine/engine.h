// The dependency engine: runs operations asynchronously in the order their
// read/write dependencies on variables (one per array or buffer) allow. Each
// device has one compute worker (ops on a device run one at a time, in push
// order when they conflict); blocking I/O ops (sends, receives, pushes to
// parameter servers) run on a pool of I/O threads, so a gradient can be sent
// while the next layer's backward still computes. KVTRAIN_ENGINE=naive runs
// every op synchronously in the pushing thread instead (for debugging).
#ifndef KVTRAIN_ENGINE_ENGINE_H_
#define KVTRAIN_ENGINE_ENGINE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "tensor/device.h"

namespace kvtrain {

class Engine;

// Handle to one pushed op. Copyable; Wait may be called from any thread.
class Completion {
 public:
  Completion() = default;
  // The op's status once it ran (or was skipped because an op it depends on
  // failed); DeadlineExceeded naming the op if it is not done in time.
  Status Wait(std::chrono::milliseconds timeout) const;
  bool done() const;

 private:
  friend class Engine;
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Status status;
    std::string name;
    // Where the op's GPU work ends in each stream it used (a GPU compute
    // op's own, or for a barrier its vars'): Wait passes them too.
    std::vector<std::shared_ptr<StreamFence>> fences;
  };
  std::shared_ptr<State> state_;
};

// Thread-safe: any thread may push and wait.
class Engine {
 public:
  enum class Mode { kThreaded, kNaive };

  // Where an op runs.
  enum class Queue {
    kCompute,  // the compute worker of its device
    kIo,       // the I/O pool: ops that may block (network, disk)
    kInline,   // whichever thread makes it ready (tiny bookkeeping ops);
               // the I/O pool when it must wait for GPU work
  };

  struct Options {
    // Unset: from KVTRAIN_ENGINE in `env` (threaded when that is unset).
    std::optional<Mode> mode;
    // Threads of the I/O pool: how many blocking ops can wait at once.
    int io_threads = 4;
    // Where KVTRAIN_ENGINE is read from.
    EnvLookup env = ProcessEnv();
  };

  // An opaque dependency: an array, a buffer, a key.
  class Var;

  using Fn = std::function<Status()>;

  // Errors for a malformed KVTRAIN_ENGINE, naming the accepted values.
  static StatusOr<std::unique_ptr<Engine>> Create(const Options& options);
  // Waits for every pushed op, then stops the workers.
  ~Engine();

  Mode mode() const { return mode_; }

  Var* NewVar(const std::string& name);
  // Frees `var` once every op pushed on it so far has run.
  void DeleteVar(Var* var);

  // Runs `fn` after every earlier op that writes a var in `reads`, and every
  // earlier op that reads or writes a var in `writes`. A var in both lists
  // is read and then written. If a var in `reads` holds an error (an op that
  // wrote it failed), `fn` is skipped and the error passes on to `writes`; a
  // successful op clears the errors of its `writes`. Compute ops on a GPU
  // count as done for the next ops on the same GPU once their work is
  // queued on its stream (the stream keeps their order); ops elsewhere, and
  // Completion::Wait, first wait until that work has finished.
  Completion Push(Fn fn, const std::vector<Var*>& reads,
                  const std::vector<Var*>& writes, const Device& device,
                  Queue queue, std::string name);

  // Completes after every earlier op that writes a var in `vars`, without
  // holding the vars or waiting for their GPU work: that wait happens in
  // the returned Completion's Wait. For "these results are ready" signals
  // (the executor's end of a pass) that must not delay later ops.
  Completion PushBarrier(const std::vector<Var*>& vars, std::string name);

  // Waits for every op pushed so far that writes `var`; returns its error.
  Status WaitForVar(Var* var, std::chrono::milliseconds timeout);
  // Waits until no pushed op is pending and the GPUs' queued work is done;
  // DeadlineExceeded names an op still pending.
  Status WaitForAll(std::chrono::milliseconds timeout);
  // Forgets the errors held by `vars` (after a caller has reported them).
  void ClearErrors(const std::vector<Var*>& vars);

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

 private:
  struct Op;
  struct Worker;

  Engine(Mode mode, int io_threads);
  Completion Push(Fn fn, const std::vector<Var*>& reads,
                  const std::vector<Var*>& writes, const Device& device,
                  Queue queue, std::string name, bool barrier);

  // Grants queued ops on `var` what it can; appends ops that became ready.
  void Grant(Var* var, std::vector<Op*>* ready) REQUIRES(mu_);
  void Dispatch(Op* op) EXCLUDES(mu_);
  // True when a var of `op` has GPU work not yet finished.
  bool WaitsForGpu(const Op& op) EXCLUDES(mu_);
  // Checks dependencies' errors, waits for their GPU work on other
  // streams, runs the op, releases its vars.
  void Execute(Op* op) EXCLUDES(mu_);
  // `fence`: the op's own GPU work (put on its vars); `done_fences`: what
  // its Completion waits for.
  void Finish(Op* op, Status status, std::shared_ptr<StreamFence> fence,
              std::vector<std::shared_ptr<StreamFence>> done_fences)
      EXCLUDES(mu_);
  Worker* WorkerFor(const Op& op) EXCLUDES(workers_mu_);
  void WorkerLoop(Worker* worker);

  const Mode mode_;
  const int io_threads_;

  std::mutex mu_;
  std::condition_variable idle_cv_;
  int64_t pending_ GUARDED_BY(mu_) = 0;
  // Every pending op (names one in WaitForAll's DeadlineExceeded).
  Op* pending_list_ GUARDED_BY(mu_) = nullptr;
  // GPUs that compute ops were pushed to (WaitForAll drains their streams).
  std::vector<int> gpus_ GUARDED_BY(mu_);

  std::mutex workers_mu_;
  std::map<std::pair<int, int>, std::unique_ptr<Worker>> workers_
      GUARDED_BY(workers_mu_);
  std::unique_ptr<Worker> io_ GUARDED_BY(workers_mu_);
};

// "KVTRAIN_ENGINE" parsed; errors name the variable and the accepted values.
StatusOr<Engine::Mode> EngineModeFromEnv(const EnvLookup& env);

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_ENGINE_H_
