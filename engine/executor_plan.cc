// Executor memory: buffer lifetimes over the forward and backward steps,
// in-place choices, allocation of the planned blocks, and the per-step
// argument bundles and engine dependencies.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "engine/executor.h"
#include "engine/executor_internal.h"

namespace kvtrain {
namespace {

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

int64_t Bytes(const Shape& s) {
  return std::max<int64_t>(1, s.NumElements()) * sizeof(float);
}

// A view of `block` with `shape`.
Tensor View(const Tensor& block, const Shape& shape) {
  StatusOr<Tensor> t = block.Slice(0, shape.NumElements());
  CHECK(t.ok()) << t.status();
  StatusOr<Tensor> v = t->Reshape(shape);
  CHECK(v.ok()) << v.status();
  return *v;
}

// Steps are numbered forward 0..S-1, then backward S.. in run order.
constexpr int kForever = 1 << 30;

}  // namespace

int Executor::LastUse(int id) const {
  const Entry& e = entries_[id];
  int last = e.producer;
  for (const auto& [c, pos] : e.consumers) {
    last = std::max(last, c);
    const Step& s = *steps_[c];
    if (s.backward && Contains(s.needs.inputs, pos)) {
      last = std::max(last, s.backward_step);
    }
  }
  if (e.producer >= 0) {
    const Step& p = *steps_[e.producer];
    if (p.backward && Contains(p.needs.outputs, e.output_index)) {
      last = std::max(last, p.backward_step);
    }
  }
  return last;
}

std::vector<BufferRequest> Executor::BufferRequests(
    std::vector<int>* data_req, std::vector<int>* grad_req) const {
  std::vector<BufferRequest> requests;
  data_req->assign(entries_.size(), -1);
  grad_req->assign(entries_.size(), -1);
  for (size_t id = 0; id < entries_.size(); ++id) {
    const Entry& e = entries_[id];
    if (e.producer < 0) continue;
    BufferRequest r;
    r.bytes = Bytes(e.shape);
    r.device = e.device;
    r.first_step = e.producer;
    r.last_step = LastUse(static_cast<int>(id));
    r.pinned = e.head;
    (*data_req)[id] = static_cast<int>(requests.size());
    requests.push_back(r);
  }
  for (size_t id = 0; id < entries_.size(); ++id) {
    const Entry& e = entries_[id];
    if (e.producer < 0 || !e.needs_grad) continue;
    int first = kForever, last = -1;
    for (const auto& [c, pos] : e.consumers) {
      if (!steps_[c]->backward) continue;
      first = std::min(first, steps_[c]->backward_step);
      last = std::max(last, steps_[c]->backward_step);
    }
    const Step& p = *steps_[e.producer];
    const bool read = p.backward && p.needs.out_grad;
    if (!read && last < 0) continue;  // nobody writes or reads it
    BufferRequest r;
    r.bytes = Bytes(e.shape);
    r.device = e.device;
    if ((e.head && read) || last < 0) {
      // A head gradient (filled by Backward) or a gradient nobody writes
      // (kept zero): dedicated.
      r.pinned = true;
      r.first_step = 0;
      r.last_step = kForever;
    } else {
      r.first_step = first;
      r.last_step = read ? p.backward_step : last;
    }
    (*grad_req)[id] = static_cast<int>(requests.size());
    requests.push_back(r);
  }
  return requests;
}

void Executor::AddInplace(std::vector<BufferRequest>* requests,
                          const std::vector<int>& data_req,
                          const std::vector<int>& grad_req) const {
  std::vector<bool> taken(requests->size(), false);
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = *steps_[s];
    for (const auto& [i, o] : step.op->ForwardInplace()) {
      const int in = step.inputs[i], out = step.outputs[o];
      const int rin = data_req[in], rout = data_req[out];
      if (rin < 0 || taken[rin] || entries_[in].head) continue;
      if (LastUse(in) != static_cast<int>(s)) continue;
      if ((*requests)[rin].bytes != (*requests)[rout].bytes) continue;
      (*requests)[rout].inplace_of = rin;
      taken[rin] = true;
    }
    if (!step.backward || !step.needs.out_grad) continue;
    for (const auto& [k, i] : step.op->BackwardInplace()) {
      const int gout = grad_req[step.outputs[k]];
      const int in = step.inputs[i];
      const int gin = grad_req[in];
      if (gout < 0 || gin < 0 || taken[gout]) continue;
      const BufferRequest& a = (*requests)[gout];
      const BufferRequest& b = (*requests)[gin];
      if (a.pinned || b.pinned || a.bytes != b.bytes) continue;
      // This step must be the gradient's first writer.
      if (b.first_step != step.backward_step) continue;
      (*requests)[gin].inplace_of = gout;
      taken[gout] = true;
    }
  }
}

Status Executor::Allocate(const ExecutorOptions& options) {
  for (size_t i = 0; i < args_.size(); ++i) {
    arg_vars_.push_back(engine_->NewVar(arg_names_[i]));
    grad_vars_.push_back(engine_->NewVar("gradient of " + arg_names_[i]));
  }
  for (const std::string& name : aux_names_) {
    aux_vars_.push_back(engine_->NewVar(name));
  }
  std::vector<int> data_req, grad_req;
  std::vector<BufferRequest> requests = BufferRequests(&data_req, &grad_req);
  if (options.plan_memory) AddInplace(&requests, data_req, grad_req);
  const MemoryPlan plan = PlanMemory(requests, options.plan_memory);
  for (size_t b = 0; b < plan.block_bytes.size(); ++b) {
    KV_ASSIGN_OR_RETURN(
        Tensor t, Tensor::CreateZeros({plan.block_bytes[b] / 4},
                                      DType::kFloat32, plan.block_device[b]));
    blocks_.push_back(t);
    block_vars_.push_back(engine_->NewVar("buffer " + std::to_string(b)));
  }
  for (size_t id = 0; id < entries_.size(); ++id) {
    Entry& e = entries_[id];
    if (e.arg >= 0) {
      e.value = args_[e.arg];
      e.var = arg_vars_[e.arg];
      if (grad_reqs_[e.arg] != GradReq::kNull) {
        e.grad = grads_[e.arg];
        e.grad_var = grad_vars_[e.arg];
      }
      continue;
    }
    const int block = plan.block_of[data_req[id]];
    e.value = View(blocks_[block], e.shape);
    e.var = block_vars_[block];
    if (grad_req[id] >= 0) {
      const int gblock = plan.block_of[grad_req[id]];
      e.grad = View(blocks_[gblock], e.shape);
      e.grad_var = block_vars_[gblock];
    }
  }
  std::map<Device, size_t> ws;
  for (const auto& step : steps_) {
    std::vector<Shape> in;
    for (int id : step->inputs) in.push_back(entries_[id].shape);
    ws[step->device] =
        std::max(ws[step->device], step->op->WorkspaceBytes(in, step->device));
  }
  planned_bytes_ = plan.TotalBytes();
  for (const auto& [device, bytes] : ws) {
    KV_ASSIGN_OR_RETURN(workspaces_[device],
                        Tensor::Create({static_cast<int64_t>(std::max<size_t>(bytes, 1))},
                                       DType::kUInt8, device));
    planned_bytes_ += bytes;
  }
  for (int id : heads_) outputs_.push_back(entries_[id].value);
  return Status::OK();
}

void Executor::PrepareSteps() {
  std::set<Engine::Var*> fwd_writes;
  for (auto& sp : steps_) {
    Step& s = *sp;
    s.ctx.device = *DeviceContext::Get(s.device);  // checked in BuildGraph
    s.fwd_name = s.op->name() + " forward";
    s.bwd_name = s.op->name() + " backward";
    const Tensor& ws = workspaces_[s.device];
    s.ctx.workspace = ws.raw_data();
    s.ctx.workspace_bytes = ws.nbytes();
    s.ctx.peer_link = peer_link_;
    s.ctx.peer_timeout = peer_timeout_;
    for (int id : s.inputs) {
      s.fwd.in.push_back(entries_[id].value);
      s.fwd_reads.push_back(entries_[id].var);
    }
    for (int id : s.outputs) {
      s.fwd.out.push_back(entries_[id].value);
      bool shared = false;
      for (int in : s.inputs) shared |= entries_[in].var == entries_[id].var;
      s.fwd.req.push_back(shared ? OpReq::kInplace : OpReq::kWrite);
      s.fwd_writes.push_back(entries_[id].var);
    }
    // Auxiliary states are read, and updated in training.
    for (int a : s.aux) {
      s.fwd.aux.push_back(aux_[a]);
      s.fwd_reads.push_back(aux_vars_[a]);
      s.fwd_writes.push_back(aux_vars_[a]);
    }
    fwd_writes.insert(s.fwd_writes.begin(), s.fwd_writes.end());
  }
  forward_writes_.assign(fwd_writes.begin(), fwd_writes.end());
  PrepareBackwardReqs();
}

void Executor::PrepareBackwardReqs() {
  std::vector<int> writes(entries_.size(), 0);
  for (int id : heads_) {
    const Entry& e = entries_[id];
    if (e.producer >= 0 && e.grad.defined() && steps_[e.producer]->needs.out_grad) {
      writes[id] = 1;  // Backward copies the head gradient in first
    }
  }
  std::set<Engine::Var*> bwd_writes;
  for (int s_index : backward_order_) {
    Step& s = *steps_[s_index];
    s.bwd.in = s.fwd.in;
    s.bwd.out = s.fwd.out;
    s.bwd.aux = s.fwd.aux;
    for (int k = 0; k < s.op->NumVisibleOutputs(); ++k) {
      const Entry& out = entries_[s.outputs[k]];
      s.bwd.out_grad.push_back(s.needs.out_grad ? out.grad : Tensor());
      if (s.needs.out_grad) s.bwd_reads.push_back(out.grad_var);
    }
    for (int i : s.needs.inputs) s.bwd_reads.push_back(entries_[s.inputs[i]].var);
    for (int k : s.needs.outputs) s.bwd_reads.push_back(entries_[s.outputs[k]].var);
    for (int a : s.aux) s.bwd_reads.push_back(aux_vars_[a]);
    for (int id : s.inputs) {
      const Entry& e = entries_[id];
      OpReq req = OpReq::kNull;
      if (e.needs_grad) {
        if (e.arg >= 0 && grad_reqs_[e.arg] == GradReq::kAdd) {
          req = OpReq::kAdd;
        } else if (writes[id]++ > 0) {
          req = OpReq::kAdd;
        } else {
          req = OpReq::kWrite;
          for (const Tensor& g : s.bwd.out_grad) {
            if (g.defined() && g.SharesMemoryWith(e.grad)) req = OpReq::kInplace;
          }
        }
        s.bwd_writes.push_back(e.grad_var);
      }
      s.bwd.in_grad.push_back(e.needs_grad ? e.grad : Tensor());
      s.bwd.req.push_back(req);
    }
    // A backward that writes nothing here (a _Recv sending its gradient to a
    // peer) claims its output gradients, so the pass's barrier waits for it.
    if (s.bwd_writes.empty()) {
      for (int k = 0; k < s.op->NumVisibleOutputs(); ++k) {
        Engine::Var* v = entries_[s.outputs[k]].grad_var;
        if (v != nullptr) s.bwd_writes.push_back(v);
      }
    }
    bwd_writes.insert(s.bwd_writes.begin(), s.bwd_writes.end());
  }
  backward_writes_.assign(bwd_writes.begin(), bwd_writes.end());
}

std::string Executor::DebugString() const {
  std::ostringstream os;
  os << "planned " << planned_bytes_ << " bytes in " << blocks_.size()
     << " blocks\n";
  for (const auto& s : steps_) {
    os << s->op->Describe() << " on " << s->device.ToString()
       << (s->backward ? " (+backward)" : "") << ":";
    for (int id : s->outputs) {
      const Entry& e = entries_[id];
      os << " " << e.name << e.shape.ToString();
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace kvtrain
