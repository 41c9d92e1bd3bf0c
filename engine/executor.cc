// Executor binding: the graph of steps (with cross-device copies), shape
// checks, which entries need gradients, the memory plan and allocation.
#include "engine/executor.h"

#include <algorithm>
#include <set>

#include "engine/executor_internal.h"

namespace kvtrain {

Executor::Executor() = default;

namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

Status CheckArray(const Tensor& t, const std::string& what) {
  if (!t.defined()) {
    return Status::InvalidArgument("Bind: " + what +
                                   " is missing (undefined array)");
  }
  if (t.dtype() != DType::kFloat32) {
    return Status::InvalidArgument("Bind: " + what + " is " +
                                   DTypeName(t.dtype()) + ", expected float32");
  }
  return Status::OK();
}

// Counts, presence, dtypes and gradient shapes of Bind's arrays; fills in
// "no gradients" when both gradient lists are empty.
Status CheckBindArrays(const std::vector<std::string>& arg_names,
                       const std::vector<std::string>& aux_names,
                       const std::vector<Tensor>& args,
                       std::vector<Tensor>* grads,
                       std::vector<GradReq>* grad_reqs,
                       const std::vector<Tensor>& aux) {
  const size_t n = arg_names.size();
  if (args.size() != n) {
    return Status::InvalidArgument(
        "Bind: " + std::to_string(args.size()) + " argument arrays for " +
        std::to_string(n) + " arguments (" + Join(arg_names) + ")");
  }
  if (grads->empty() && grad_reqs->empty()) {
    grads->resize(n);
    grad_reqs->assign(n, GradReq::kNull);
  }
  if (grads->size() != n || grad_reqs->size() != n) {
    return Status::InvalidArgument(
        "Bind: " + std::to_string(grads->size()) + " gradient arrays and " +
        std::to_string(grad_reqs->size()) + " requests for " +
        std::to_string(n) + " arguments");
  }
  for (size_t i = 0; i < n; ++i) {
    KV_RETURN_IF_ERROR(CheckArray(args[i], "argument " + arg_names[i]));
    if ((*grad_reqs)[i] == GradReq::kNull) continue;
    const std::string what = "gradient of " + arg_names[i];
    const Tensor& g = (*grads)[i];
    KV_RETURN_IF_ERROR(CheckArray(g, what));
    if (g.shape() != args[i].shape() || g.device() != args[i].device()) {
      return Status::InvalidArgument(
          "Bind: " + what + " is " + g.shape().ToString() + " on " +
          g.device().ToString() + " but the argument is " +
          args[i].shape().ToString() + " on " + args[i].device().ToString());
    }
  }
  if (aux.size() != aux_names.size()) {
    return Status::InvalidArgument(
        "Bind: " + std::to_string(aux.size()) + " auxiliary arrays for " +
        std::to_string(aux_names.size()) + " states (" + Join(aux_names) +
        ")");
  }
  for (size_t i = 0; i < aux.size(); ++i) {
    KV_RETURN_IF_ERROR(CheckArray(aux[i], "auxiliary state " + aux_names[i]));
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::unique_ptr<Executor>> Executor::Bind(
    const Symbol& symbol, const ExecutorOptions& options,
    std::vector<Tensor> args, std::vector<Tensor> grads,
    std::vector<GradReq> grad_reqs, std::vector<Tensor> aux) {
  KV_RETURN_IF_ERROR(symbol.status());
  std::unique_ptr<Executor> ex(new Executor);
  ex->arg_names_ = symbol.ListArguments();
  ex->aux_names_ = symbol.ListAuxiliaryStates();
  ex->output_names_ = symbol.ListOutputs();
  KV_RETURN_IF_ERROR(CheckBindArrays(ex->arg_names_, ex->aux_names_, args,
                                     &grads, &grad_reqs, aux));
  ex->args_ = std::move(args);
  ex->grads_ = std::move(grads);
  ex->grad_reqs_ = std::move(grad_reqs);
  ex->aux_ = std::move(aux);
  ex->timeout_ = options.timeout;
  ex->peer_link_ = options.peer_link;
  ex->peer_timeout_ = options.peer_timeout;
  KV_ASSIGN_OR_RETURN(ex->check_nan_,
                      GetBoolVar(options.env, env::kCheckNan, false));
  if (options.engine != nullptr) {
    ex->engine_ = options.engine;
  } else {
    Engine::Options eo;
    eo.env = options.env;
    KV_ASSIGN_OR_RETURN(ex->own_engine_, Engine::Create(eo));
    ex->engine_ = ex->own_engine_.get();
  }
  KV_RETURN_IF_ERROR(ex->BuildGraph(symbol, options));
  KV_RETURN_IF_ERROR(ex->InferShapes());
  ex->MarkGradients();
  KV_RETURN_IF_ERROR(ex->Allocate(options));
  ex->PrepareSteps();
  return ex;
}

StatusOr<Device> Executor::NodeDevice(const graph::Node& node,
                                      const ExecutorOptions& options) const {
  if (node.ctx_group.empty()) return options.device;
  auto it = options.group2ctx.find(node.ctx_group);
  // A group placed only on a rank runs on the default device there.
  if (it == options.group2ctx.end() && options.group2rank.count(node.ctx_group)) {
    return options.device;
  }
  if (it == options.group2ctx.end()) {
    std::vector<std::string> groups;
    for (const auto& [g, d] : options.group2ctx) groups.push_back(g);
    return Status::InvalidArgument(
        "Bind: node " + node.name + " is in ctx_group \"" + node.ctx_group +
        "\" but group2ctx has no such group (groups: " +
        (groups.empty() ? "none" : Join(groups)) + ")");
  }
  KV_RETURN_IF_ERROR(CheckDevice(it->second));
  return it->second;
}

Status Executor::BuildGraph(const Symbol& symbol,
                            const ExecutorOptions& options) {
  KV_RETURN_IF_ERROR(CheckDevice(options.device));
  KV_ASSIGN_OR_RETURN(std::vector<const graph::Node*> order,
                      graph::TopoSort(symbol.heads()));
  std::map<const graph::Node*, int> first_entry;
  int next_arg = 0, next_aux = 0;
  for (const graph::Node* node : order) {
    if (!node->is_variable()) {
      KV_RETURN_IF_ERROR(AddStep(*node, options, &first_entry, &next_aux));
      continue;
    }
    first_entry[node] = static_cast<int>(entries_.size());
    Entry e;
    e.name = node->name;
    e.arg = next_arg++;
    e.shape = args_[e.arg].shape();
    e.device = args_[e.arg].device();
    entries_.push_back(e);
  }
  for (const graph::NodeEntry& h : symbol.heads()) {
    const int id = first_entry[h.node.get()] + h.index;
    entries_[id].head = true;
    heads_.push_back(id);
  }
  return Status::OK();
}

Status Executor::AddStep(const graph::Node& node,
                         const ExecutorOptions& options,
                         std::map<const graph::Node*, int>* first_entry,
                         int* next_aux) {
  auto step = std::make_unique<Step>();
  KV_ASSIGN_OR_RETURN(step->device, NodeDevice(node, options));
  KV_ASSIGN_OR_RETURN(step->op,
                      CreateOperator(node.op_type, node.name, node.attrs));
  std::vector<std::string> input_names;
  for (const graph::NodeEntry& in : node.inputs) {
    input_names.push_back(in.node->OutputName(in.index));
  }
  step->op->set_input_names(input_names);
  // Copies for inputs on other devices become steps before this one.
  for (const graph::NodeEntry& in : node.inputs) {
    int id = (*first_entry)[in.node.get()] + in.index;
    if (entries_[id].device != step->device) id = CopyTo(id, step->device);
    step->inputs.push_back(id);
  }
  const int step_index = static_cast<int>(steps_.size());
  for (int pos = 0; pos < static_cast<int>(step->inputs.size()); ++pos) {
    entries_[step->inputs[pos]].consumers.emplace_back(step_index, pos);
  }
  // After the copies, which add entries of their own.
  (*first_entry)[&node] = static_cast<int>(entries_.size());
  const std::vector<std::string> outs = step->op->ListOutputs();
  for (size_t k = 0; k < outs.size(); ++k) {
    Entry e;
    e.name = node.name + "_" + outs[k];
    e.device = step->device;
    e.producer = step_index;
    e.output_index = static_cast<int>(k);
    step->outputs.push_back(static_cast<int>(entries_.size()));
    entries_.push_back(e);
  }
  for (size_t k = 0; k < step->op->ListAuxiliaryStates().size(); ++k) {
    step->aux.push_back((*next_aux)++);
  }
  step->needs = step->op->DeclareBackwardNeeds();
  steps_.push_back(std::move(step));
  return Status::OK();
}

int Executor::CopyTo(int entry, const Device& device) {
  auto it = copies_.find({entry, device});
  if (it != copies_.end()) return it->second;
  auto step = std::make_unique<Step>();
  const std::string name = entries_[entry].name + "_to_" + device.ToString();
  StatusOr<std::unique_ptr<Operator>> op =
      CreateOperator("_CrossDeviceCopy", name, {});
  CHECK(op.ok()) << op.status();
  step->op = std::move(op).value();
  step->op->set_input_names({entries_[entry].name});
  step->device = device;
  step->inputs = {entry};
  step->needs = step->op->DeclareBackwardNeeds();
  const int step_index = static_cast<int>(steps_.size());
  entries_[entry].consumers.emplace_back(step_index, 0);
  Entry e;
  e.name = name;
  e.device = device;
  e.producer = step_index;
  e.shape = entries_[entry].shape;
  step->outputs = {static_cast<int>(entries_.size())};
  entries_.push_back(e);
  steps_.push_back(std::move(step));
  copies_[{entry, device}] = step_index;
  return steps_.back()->outputs[0];
}

Status Executor::InferShapes() {
  for (auto& step : steps_) {
    std::vector<Shape> in;
    for (int id : step->inputs) in.push_back(entries_[id].shape);
    std::vector<Shape> out(step->outputs.size()), aux(step->aux.size());
    const std::vector<Shape> given = in;
    KV_RETURN_IF_ERROR(step->op->InferShape(&in, &out, &aux));
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] != given[i]) {
        return Status::InvalidArgument(
            step->op->Describe() + ": " + step->op->input_name(i) + " is " +
            given[i].ToString() + ", expected " + in[i].ToString());
      }
    }
    for (size_t k = 0; k < out.size(); ++k) entries_[step->outputs[k]].shape = out[k];
    for (size_t k = 0; k < aux.size(); ++k) {
      const int a = step->aux[k];
      if (aux_[a].shape() != aux[k] || aux_[a].device() != step->device) {
        return Status::InvalidArgument(
            "Bind: auxiliary state " + aux_names_[a] + " is " +
            aux_[a].shape().ToString() + " on " + aux_[a].device().ToString() +
            " but " + step->op->Describe() + " needs " + aux[k].ToString() +
            " on " + step->device.ToString());
      }
    }
  }
  return Status::OK();
}

void Executor::MarkGradients() {
  for (Entry& e : entries_) {
    if (e.arg >= 0) e.needs_grad = grad_reqs_[e.arg] != GradReq::kNull;
  }
  for (auto& step : steps_) {
    if (!step->op->differentiable()) continue;
    for (int id : step->inputs) step->backward |= entries_[id].needs_grad;
    // A peer's backward waits for this one (sends and receives).
    step->backward |= step->op->always_backward();
    if (!step->backward) continue;
    for (int k = 0; k < step->op->NumVisibleOutputs(); ++k) {
      entries_[step->outputs[k]].needs_grad = true;
    }
  }
  const int n = static_cast<int>(steps_.size());
  for (int s = n - 1; s >= 0; --s) {
    if (!steps_[s]->backward) continue;
    steps_[s]->backward_step = n + static_cast<int>(backward_order_.size());
    backward_order_.push_back(s);
  }
}

StatusOr<Tensor> Executor::Arg(const std::string& name) const {
  for (size_t i = 0; i < arg_names_.size(); ++i) {
    if (arg_names_[i] == name) return args_[i];
  }
  return Status::NotFound("no argument \"" + name + "\"; arguments: " +
                          Join(arg_names_));
}

StatusOr<Tensor> Executor::Grad(const std::string& name) const {
  for (size_t i = 0; i < arg_names_.size(); ++i) {
    if (arg_names_[i] != name) continue;
    if (grad_reqs_[i] == GradReq::kNull) {
      return Status::NotFound("argument \"" + name + "\" has no gradient "
                              "(grad_req null)");
    }
    return grads_[i];
  }
  return Status::NotFound("no argument \"" + name + "\"; arguments: " +
                          Join(arg_names_));
}

Engine::Var* Executor::output_var(int i) const { return entries_[heads_[i]].var; }

}  // namespace kvtrain
