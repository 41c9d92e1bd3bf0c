// Executor passes: pushing forward/backward steps on the engine, head
// gradients, NaN checks, waiting; and SimpleBind.
#include <algorithm>
#include <map>

#include "engine/executor.h"
#include "engine/executor_internal.h"

namespace kvtrain {

Executor::~Executor() {
  const Status st = Wait();
  if (!st.ok()) LOG(WARNING) << "executor destroyed after an error: " << st;
  if (engine_ == nullptr) return;
  for (auto* list : {&arg_vars_, &grad_vars_, &aux_vars_, &block_vars_}) {
    for (Engine::Var* v : *list) engine_->DeleteVar(v);
  }
}

Status Executor::CheckNan(const std::vector<Tensor>& tensors,
                          const std::vector<OpReq>& reqs, const Step& step,
                          const char* pass, const char* role) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (reqs[i] == OpReq::kNull || !tensors[i].defined()) continue;
    const std::string what = std::string(env::kCheckNan) + ": " +
                             step.op->Describe() + " " + pass + ": " + role +
                             " " + std::to_string(i);
    KV_RETURN_IF_ERROR(CheckFinite(tensors[i], what));
  }
  return Status::OK();
}

Status Executor::RunForward(Step* step, bool is_train) {
  OpContext ctx = step->ctx;
  ctx.is_train = is_train;
  KV_RETURN_IF_ERROR(step->op->Forward(ctx, &step->fwd));
  if (!check_nan_) return Status::OK();
  if (step->device.is_gpu()) KV_RETURN_IF_ERROR(ctx.device->Synchronize());
  return CheckNan(step->fwd.out, step->fwd.req, *step, "forward", "output");
}

Status Executor::RunBackward(Step* step) {
  OpContext ctx = step->ctx;
  ctx.is_train = true;
  KV_RETURN_IF_ERROR(step->op->Backward(ctx, &step->bwd));
  if (!check_nan_) return Status::OK();
  if (step->device.is_gpu()) KV_RETURN_IF_ERROR(ctx.device->Synchronize());
  return CheckNan(step->bwd.in_grad, step->bwd.req, *step, "backward",
                  "input gradient");
}

Completion Executor::Barrier(const std::vector<Engine::Var*>& vars,
                             const char* what) {
  return engine_->PushBarrier(vars, what);
}

namespace {

Engine::Queue QueueOf(const Operator& op) {
  return op.exec_kind() == ExecKind::kBlockingIo ? Engine::Queue::kIo
                                                 : Engine::Queue::kCompute;
}

}  // namespace

void Executor::PrunePending() {
  size_t kept = 0;
  for (const Completion& c : pending_) {
    if (!c.done()) {
      pending_[kept++] = c;
      continue;
    }
    const Status st = c.Wait(std::chrono::milliseconds(0));
    if (!st.ok() && deferred_error_.ok()) deferred_error_ = st;
  }
  pending_.resize(kept);
}

StatusOr<Completion> Executor::StartForward(bool is_train) {
  PrunePending();
  for (auto& sp : steps_) {
    Step* s = sp.get();
    engine_->Push([this, s, is_train] { return RunForward(s, is_train); },
                  s->fwd_reads, s->fwd_writes, s->device, QueueOf(*s->op),
                  s->fwd_name);
  }
  trained_forward_ = is_train;
  Completion c = Barrier(forward_writes_, "forward pass");
  pending_.push_back(c);
  return c;
}

StatusOr<Completion> Executor::StartBackward(
    const std::vector<Tensor>& head_grads) {
  if (!trained_forward_) {
    return Status::FailedPrecondition(
        "Backward needs a Forward(is_train=true) before it");
  }
  PrunePending();
  std::vector<Engine::Var*> writes = backward_writes_;
  for (size_t k = 0; k < heads_.size(); ++k) {
    const Entry& e = entries_[heads_[k]];
    if (e.producer < 0 || !e.grad.defined() ||
        !steps_[e.producer]->needs.out_grad) {
      continue;
    }
    if (k >= head_grads.size() || !head_grads[k].defined()) {
      return Status::InvalidArgument(
          "Backward: output " + output_names_[k] +
          " does not come from a loss op; pass its gradient as head_grads[" +
          std::to_string(k) + "]");
    }
    if (head_grads[k].shape() != e.shape ||
        head_grads[k].dtype() != DType::kFloat32) {
      return Status::InvalidArgument(
          "Backward: head_grads[" + std::to_string(k) + "] is " +
          head_grads[k].shape().ToString() + " " +
          DTypeName(head_grads[k].dtype()) + " but output " +
          output_names_[k] + " is " + e.shape.ToString() + " float32");
    }
    Tensor dst = e.grad, src = head_grads[k];
    engine_->Push([dst, src]() mutable { return dst.CopyFrom(src); }, {},
                  {e.grad_var}, e.device, Engine::Queue::kCompute,
                  "head gradient " + output_names_[k]);
    writes.push_back(e.grad_var);
  }
  for (int s_index : backward_order_) {
    Step* s = steps_[s_index].get();
    engine_->Push([this, s] { return RunBackward(s); }, s->bwd_reads,
                  s->bwd_writes, s->device, QueueOf(*s->op), s->bwd_name);
  }
  Completion c = Barrier(writes, "backward pass");
  pending_.push_back(c);
  return c;
}

Status Executor::Wait() {
  Status first = deferred_error_;
  deferred_error_ = Status::OK();
  for (const Completion& c : pending_) {
    const Status st = c.Wait(timeout_);
    if (first.ok() && !st.ok()) first = st;
  }
  pending_.clear();
  // Reported here: later passes start clean.
  if (!first.ok() && first.code() != Status::Code::kDeadlineExceeded) ClearErrors();
  return first;
}

void Executor::ClearErrors() {
  for (auto* list : {&arg_vars_, &grad_vars_, &aux_vars_, &block_vars_}) {
    engine_->ClearErrors(*list);
  }
}

Status Executor::Forward(bool is_train) {
  KV_RETURN_IF_ERROR(StartForward(is_train).status());
  return Wait();
}

Status Executor::Backward(const std::vector<Tensor>& head_grads) {
  KV_RETURN_IF_ERROR(StartBackward(head_grads).status());
  return Wait();
}

// ---- SimpleBind.

namespace {

// The device of every variable (its group's, else its first reader's) and of
// every op's auxiliary states, in ListArguments/ListAuxiliaryStates order.
Status ArrayDevices(const Symbol& symbol, const ExecutorOptions& options,
                    std::vector<Device>* arg_devices,
                    std::vector<Device>* aux_devices) {
  KV_ASSIGN_OR_RETURN(std::vector<const graph::Node*> order,
                      graph::TopoSort(symbol.heads()));
  auto device_of = [&](const graph::Node& n) -> StatusOr<Device> {
    if (n.ctx_group.empty()) return options.device;
    auto it = options.group2ctx.find(n.ctx_group);
    if (it == options.group2ctx.end() && options.group2rank.count(n.ctx_group)) {
      return options.device;
    }
    if (it == options.group2ctx.end()) {
      return Status::InvalidArgument("SimpleBind: node " + n.name +
                                     " is in ctx_group \"" + n.ctx_group +
                                     "\" but group2ctx has no such group");
    }
    return it->second;
  };
  std::map<const graph::Node*, Device> chosen;
  for (const graph::Node* n : order) {
    if (n->is_variable()) continue;
    KV_ASSIGN_OR_RETURN(Device d, device_of(*n));
    for (size_t k = 0; k < n->op->ListAuxiliaryStates().size(); ++k) {
      aux_devices->push_back(d);
    }
    for (const graph::NodeEntry& in : n->inputs) {
      if (in.node->is_variable() && in.node->ctx_group.empty()) {
        chosen.emplace(in.node.get(), d);  // the first reader wins
      }
    }
  }
  for (const graph::Node* n : order) {
    if (!n->is_variable()) continue;
    if (!n->ctx_group.empty()) {
      KV_ASSIGN_OR_RETURN(Device d, device_of(*n));
      arg_devices->push_back(d);
      continue;
    }
    auto it = chosen.find(n);
    arg_devices->push_back(it == chosen.end() ? options.device : it->second);
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::unique_ptr<Executor>> Executor::SimpleBind(
    const Symbol& full, const ExecutorOptions& options,
    const std::map<std::string, Shape>& full_input_shapes,
    const std::map<std::string, GradReq>& full_grad_reqs) {
  Symbol symbol = full;
  std::map<std::string, Shape> input_shapes = full_input_shapes;
  std::map<std::string, GradReq> grad_reqs = full_grad_reqs;
  if (options.peer_link != nullptr) {
    const std::vector<std::string> all = full.ListArguments();
    for (const auto& [name, req] : full_grad_reqs) {
      if (std::find(all.begin(), all.end(), name) == all.end()) {
        return Status::InvalidArgument("SimpleBind: grad_reqs names \"" + name +
                                       "\", which is not an argument");
      }
    }
    KV_ASSIGN_OR_RETURN(
        symbol, PartitionByRank(full, full_input_shapes, options.group2rank,
                                options.peer_link->rank(), options.peer_link->size()));
    // Only this rank's arguments.
    const std::vector<std::string> local = symbol.ListArguments();
    auto is_local = [&](const std::string& n) {
      return std::find(local.begin(), local.end(), n) != local.end();
    };
    for (auto it = input_shapes.begin(); it != input_shapes.end();) {
      it = is_local(it->first) ? std::next(it) : input_shapes.erase(it);
    }
    for (auto it = grad_reqs.begin(); it != grad_reqs.end();) {
      it = is_local(it->first) ? std::next(it) : grad_reqs.erase(it);
    }
  }
  KV_ASSIGN_OR_RETURN(Symbol::Shapes shapes, symbol.InferShape(input_shapes));
  std::vector<Device> arg_devices, aux_devices;
  KV_RETURN_IF_ERROR(ArrayDevices(symbol, options, &arg_devices, &aux_devices));
  const std::vector<std::string> names = symbol.ListArguments();
  for (const auto& [name, req] : grad_reqs) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return Status::InvalidArgument("SimpleBind: grad_reqs names \"" + name +
                                     "\", which is not an argument");
    }
  }
  std::vector<Tensor> args, grads, aux;
  std::vector<GradReq> reqs;
  for (size_t i = 0; i < names.size(); ++i) {
    KV_RETURN_IF_ERROR(CheckDevice(arg_devices[i]));
    KV_ASSIGN_OR_RETURN(Tensor a, Tensor::CreateZeros(shapes.arguments[i],
                                                      DType::kFloat32,
                                                      arg_devices[i]));
    args.push_back(a);
    GradReq req = input_shapes.count(names[i]) ? GradReq::kNull : GradReq::kWrite;
    auto it = grad_reqs.find(names[i]);
    if (it != grad_reqs.end()) req = it->second;
    reqs.push_back(req);
    Tensor g;
    if (req != GradReq::kNull) {
      KV_ASSIGN_OR_RETURN(g, Tensor::CreateZeros(shapes.arguments[i],
                                                 DType::kFloat32,
                                                 arg_devices[i]));
    }
    grads.push_back(g);
  }
  for (size_t i = 0; i < shapes.aux.size(); ++i) {
    KV_ASSIGN_OR_RETURN(Tensor a, Tensor::CreateZeros(shapes.aux[i],
                                                      DType::kFloat32,
                                                      aux_devices[i]));
    aux.push_back(a);
  }
  return Bind(symbol, options, std::move(args), std::move(grads),
              std::move(reqs), std::move(aux));
}

}  // namespace kvtrain
