// Dependency engine: per-var FIFO queues of pending ops (readers share,
// writers are exclusive), one compute worker per device, an I/O pool.
#include "base/trace.h"
#include "engine/engine.h"

#include <algorithm>

#include "base/logging.h"

namespace kvtrain {

struct Engine::Var {
  std::string name;
  int running_reads = 0;
  bool running_write = false;
  // Ops waiting for this var, in push order, with whether they write it.
  std::deque<std::pair<Op*, bool>> queue;
  Status error;
  bool to_delete = false;
  // The latest GPU compute op on each GPU that read or wrote this var:
  // where its work ends in that GPU's stream.
  std::vector<std::shared_ptr<StreamFence>> fences;
};

struct Engine::Op {
  Fn fn;
  std::vector<Var*> reads, writes;
  // Vars whose errors skip the op: the reads, including written vars that
  // were also listed as read (read-modify-write).
  std::vector<Var*> inputs;
  Device device;
  Queue queue = Queue::kCompute;
  // A GPU compute op: its work is queued on the device's stream and ends
  // at a fence.
  bool sync_gpu = false;
  // PushBarrier: waits for no GPU work; its Completion does.
  bool barrier = false;
  int wait = 0;  // vars not yet granted
  std::shared_ptr<Completion::State> done;
  // Links in the engine's list of pending ops (no allocation per op).
  Op* prev = nullptr;
  Op* next = nullptr;
};

struct Engine::Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Op*> ops;
  bool stop = false;
  std::vector<std::thread> threads;
};

// ---- Completion.

Status Completion::Wait(std::chrono::milliseconds timeout) const {
  if (state_ == nullptr) return Status::OK();
  std::vector<std::shared_ptr<StreamFence>> fences;
  Status status;
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
      return Status::DeadlineExceeded("engine: op \"" + state_->name +
                                      "\" not finished after " +
                                      std::to_string(timeout.count()) + " ms");
    }
    fences = state_->fences;
    status = state_->status;
  }
  for (const auto& f : fences) f->Wait();
  return status;
}

bool Completion::done() const {
  if (state_ == nullptr) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->done) return false;
  for (const auto& f : state_->fences) {
    if (!f->Passed()) return false;
  }
  return true;
}

// ---- Engine.

StatusOr<Engine::Mode> EngineModeFromEnv(const EnvLookup& env) {
  const std::optional<std::string> v = env(env::kEngine);
  if (!v || *v == "threaded") return Engine::Mode::kThreaded;
  if (*v == "naive") return Engine::Mode::kNaive;
  return Status::InvalidArgument(std::string(env::kEngine) + "=\"" + *v +
                                 "\": expected threaded or naive");
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Options& options) {
  Mode mode = Mode::kThreaded;
  if (options.mode) {
    mode = *options.mode;
  } else {
    KV_ASSIGN_OR_RETURN(mode, EngineModeFromEnv(options.env));
  }
  if (options.io_threads < 1) {
    return Status::InvalidArgument("engine: io_threads must be >= 1");
  }
  return std::unique_ptr<Engine>(new Engine(mode, options.io_threads));
}

Engine::Engine(Mode mode, int io_threads)
    : mode_(mode), io_threads_(io_threads) {}

Engine::~Engine() {
  for (int minutes = 1;; ++minutes) {
    const Status st = WaitForAll(std::chrono::minutes(1));
    if (st.code() != Status::Code::kDeadlineExceeded) break;
    LOG(WARNING) << "engine shutting down, still waiting after " << minutes
                 << " min: " << st.message();
  }
  std::vector<Worker*> all;
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    for (auto& [key, w] : workers_) all.push_back(w.get());
    if (io_) all.push_back(io_.get());
  }
  for (Worker* w : all) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->stop = true;
    }
    w->cv.notify_all();
    for (std::thread& t : w->threads) t.join();
  }
}

Engine::Var* Engine::NewVar(const std::string& name) {
  Var* v = new Var;
  v->name = name;
  return v;
}

void Engine::DeleteVar(Var* var) {
  std::lock_guard<std::mutex> lock(mu_);
  if (var->queue.empty() && var->running_reads == 0 && !var->running_write) {
    delete var;
    return;
  }
  var->to_delete = true;
}

void Engine::ClearErrors(const std::vector<Var*>& vars) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Var* v : vars) v->error = Status::OK();
}

Completion Engine::Push(Fn fn, const std::vector<Var*>& reads,
                        const std::vector<Var*>& writes, const Device& device,
                        Queue queue, std::string name) {
  return Push(std::move(fn), reads, writes, device, queue, std::move(name),
              /*barrier=*/false);
}

Completion Engine::Push(Fn fn, const std::vector<Var*>& reads,
                        const std::vector<Var*>& writes, const Device& device,
                        Queue queue, std::string name, bool barrier) {
  Op* op = new Op;
  op->barrier = barrier;
  op->fn = std::move(fn);
  op->device = device;
  op->sync_gpu = queue == Queue::kCompute && device.is_gpu();
  op->queue = mode_ == Mode::kNaive ? Queue::kInline : queue;
  op->writes = writes;
  std::sort(op->writes.begin(), op->writes.end());
  op->writes.erase(std::unique(op->writes.begin(), op->writes.end()),
                   op->writes.end());
  for (Var* v : reads) {
    if (std::find(op->inputs.begin(), op->inputs.end(), v) == op->inputs.end()) {
      op->inputs.push_back(v);
    }
    if (!std::binary_search(op->writes.begin(), op->writes.end(), v) &&
        std::find(op->reads.begin(), op->reads.end(), v) == op->reads.end()) {
      op->reads.push_back(v);
    }
  }
  op->done = std::make_shared<Completion::State>();
  op->done->name = std::move(name);
  Completion handle;
  handle.state_ = op->done;
  bool ready = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (op->sync_gpu &&
        std::find(gpus_.begin(), gpus_.end(), op->device.id) == gpus_.end()) {
      gpus_.push_back(op->device.id);
    }
    ++pending_;
    op->next = pending_list_;
    if (pending_list_ != nullptr) pending_list_->prev = op;
    pending_list_ = op;
    for (Var* v : op->reads) {
      if (v->queue.empty() && !v->running_write) {
        ++v->running_reads;
      } else {
        v->queue.emplace_back(op, false);
        ++op->wait;
      }
    }
    for (Var* v : op->writes) {
      if (v->queue.empty() && !v->running_write && v->running_reads == 0) {
        v->running_write = true;
      } else {
        v->queue.emplace_back(op, true);
        ++op->wait;
      }
    }
    ready = op->wait == 0;
  }
  if (ready) Dispatch(op);
  return handle;
}

void Engine::Grant(Var* var, std::vector<Op*>* ready) {
  while (!var->queue.empty()) {
    auto [op, write] = var->queue.front();
    if (write) {
      if (var->running_write || var->running_reads > 0) return;
      var->running_write = true;
    } else {
      if (var->running_write) return;
      ++var->running_reads;
    }
    var->queue.pop_front();
    if (--op->wait == 0) ready->push_back(op);
    if (write) return;
  }
}

Engine::Worker* Engine::WorkerFor(const Op& op) {
  std::lock_guard<std::mutex> lock(workers_mu_);
  std::unique_ptr<Worker>* slot = nullptr;
  int threads = 1;
  if (op.queue != Queue::kCompute) {
    slot = &io_;
    threads = io_threads_;
  } else {
    slot = &workers_[{static_cast<int>(op.device.type), op.device.id}];
  }
  if (*slot == nullptr) {
    *slot = std::make_unique<Worker>();
    Worker* w = slot->get();
    for (int i = 0; i < threads; ++i) {
      w->threads.emplace_back([this, w] { WorkerLoop(w); });
    }
  }
  return slot->get();
}

bool Engine::WaitsForGpu(const Op& op) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto* list : {&op.reads, &op.writes}) {
    for (Var* v : *list) {
      for (const auto& f : v->fences) {
        if (!f->Passed()) return true;
      }
    }
  }
  return false;
}

void Engine::Dispatch(Op* op) {
  // An inline op that would wait for GPU work goes to the I/O pool: run on
  // the thread that made it ready (often a GPU's compute worker), its wait
  // would keep that thread from queueing the next ops.
  if (op->queue == Queue::kInline &&
      (mode_ == Mode::kNaive || op->barrier || !WaitsForGpu(*op))) {
    Execute(op);
    return;
  }
  Worker* w = WorkerFor(*op);
  {
    std::lock_guard<std::mutex> lock(w->mu);
    w->ops.push_back(op);
  }
  w->cv.notify_one();
}

void Engine::WorkerLoop(Worker* w) {
  while (true) {
    Op* op = nullptr;
    {
      std::unique_lock<std::mutex> lock(w->mu);
      w->cv.wait(lock, [w] { return w->stop || !w->ops.empty(); });
      if (w->ops.empty()) return;  // stopping
      op = w->ops.front();
      w->ops.pop_front();
    }
    Execute(op);
  }
}

void Engine::Execute(Op* op) {
  Status status;
  // GPU work on the op's vars that this op's stream does not order for it:
  // waited for here, or by a barrier's Completion.
  std::vector<std::shared_ptr<StreamFence>> waits;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Var* v : op->inputs) {
      if (!v->error.ok()) {
        status = v->error;
        break;
      }
    }
    for (const auto* list : {&op->reads, &op->writes}) {
      for (Var* v : *list) {
        for (const auto& f : v->fences) {
          if (!op->sync_gpu || f->device_id() != op->device.id) {
            waits.push_back(f);
          }
        }
      }
    }
  }
  std::shared_ptr<StreamFence> fence;
  if (op->barrier) {
    // Traced (its end marks a pass in KVTRAIN_TRACE), though it runs nothing.
    { trace::Scope span("engine", "", op->done->name); }
    Finish(op, status, nullptr, std::move(waits));
    return;
  }
  if (status.ok()) {
    trace::Scope span("engine", "", op->done->name);
    for (const auto& f : waits) f->Wait();
    status = op->fn();
    if (status.ok() && op->sync_gpu) {
      StatusOr<DeviceContext*> ctx = DeviceContext::Get(op->device);
      if (ctx.ok()) {
        fence = StreamFence::Record(*ctx);
      } else {
        status = ctx.status();
      }
    }
  }
  std::vector<std::shared_ptr<StreamFence>> done_fences;
  if (fence != nullptr) done_fences.push_back(fence);
  Finish(op, status, std::move(fence), std::move(done_fences));
}

void Engine::Finish(Op* op, Status status, std::shared_ptr<StreamFence> fence,
                    std::vector<std::shared_ptr<StreamFence>> done_fences) {
  std::vector<Op*> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Var* v : op->reads) --v->running_reads;
    for (Var* v : op->writes) {
      v->running_write = false;
      v->error = status;
    }
    if (fence != nullptr) {
      // The newest point in that GPU's stream stands for the older ones.
      for (const auto* list : {&op->reads, &op->writes}) {
        for (Var* v : *list) {
          auto same = std::find_if(
              v->fences.begin(), v->fences.end(),
              [&](const auto& f) { return f->device_id() == fence->device_id(); });
          if (same != v->fences.end()) {
            *same = fence;
          } else {
            v->fences.push_back(fence);
          }
        }
      }
    }
    for (const auto* list : {&op->reads, &op->writes}) {
      for (Var* v : *list) {
        Grant(v, &ready);
        if (v->to_delete && v->queue.empty() && v->running_reads == 0 &&
            !v->running_write) {
          delete v;
        }
      }
    }
    if (op->prev != nullptr) op->prev->next = op->next;
    if (op->next != nullptr) op->next->prev = op->prev;
    if (pending_list_ == op) pending_list_ = op->next;
    if (--pending_ == 0) idle_cv_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(op->done->mu);
    op->done->done = true;
    op->done->status = status;
    op->done->fences = std::move(done_fences);
  }
  op->done->cv.notify_all();
  delete op;
  for (Op* r : ready) Dispatch(r);
}

Completion Engine::PushBarrier(const std::vector<Var*>& vars,
                               std::string name) {
  return Push([] { return Status::OK(); }, vars, {}, Device::CPU(),
              Queue::kInline, std::move(name), /*barrier=*/true);
}

Status Engine::WaitForVar(Var* var, std::chrono::milliseconds timeout) {
  return PushBarrier({var}, "wait for " + var->name).Wait(timeout);
}

Status Engine::WaitForAll(std::chrono::milliseconds timeout) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_for(lock, timeout, [this] { return pending_ == 0; })) {
      const std::string one =
          pending_list_ == nullptr ? "?" : pending_list_->done->name;
      return Status::DeadlineExceeded(
          "engine: " + std::to_string(pending_) + " op(s) still pending after " +
          std::to_string(timeout.count()) + " ms, e.g. \"" + one + "\"");
    }
  }
  // The ops ran; their GPU work may still be queued.
  std::vector<int> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gpus = gpus_;
  }
  for (int id : gpus) {
    KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(Device::GPU(id)));
    KV_RETURN_IF_ERROR(ctx->Synchronize());
  }
  return Status::OK();
}

}  // namespace kvtrain
