// Operator checks and dispatch, and the op registry (attribute parsing:
// attr_reader.cc).
#include "ops/operator.h"

#include <cmath>
#include <mutex>

#include "ops/common_kernels.h"

namespace kvtrain {

std::string OpSpec::Describe() const { return name + " (" + type + ")"; }

std::string Operator::Describe() const { return name_ + " (" + type_ + ")"; }

Status Operator::Error(const std::string& msg) const {
  return Status::InvalidArgument(Describe() + ": " + msg);
}

void Operator::set_input_names(std::vector<std::string> names) {
  CHECK_EQ(names.size(), static_cast<size_t>(num_in_)) << Describe();
  input_names_ = std::move(names);
}

BackwardNeeds Operator::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  for (int i = 0; i < num_in_; ++i) needs.inputs.push_back(i);
  for (int i = 0; i < num_out_; ++i) needs.outputs.push_back(i);
  return needs;
}

Status Operator::BackwardCpu(const OpContext&, BackwardArgs*) {
  return Error("has no gradient");
}

Status Operator::ForwardGpu(const OpContext&, ForwardArgs*) {
  return Error("has no GPU implementation");
}

Status Operator::BackwardGpu(const OpContext&, BackwardArgs*) {
  return Error("has no GPU implementation of its gradient");
}

namespace {

const char* kNoCuda =
    "GPU tensors given but kvtrain was built without CUDA (rebuild with "
    "--config=cuda)";

}  // namespace

Status Operator::Forward(const OpContext& ctx, ForwardArgs* args) {
  KV_RETURN_IF_ERROR(CheckForward(ctx, *args));
  if (ctx.device->device().is_cpu()) return ForwardCpu(ctx, args);
  if (!BuiltWithCuda()) return Error(kNoCuda);
  return ForwardGpu(ctx, args);
}

Status Operator::Backward(const OpContext& ctx, BackwardArgs* args) {
  if (!differentiable()) return Error("has no gradient");
  KV_RETURN_IF_ERROR(CheckBackward(ctx, *args));
  if (ctx.device->device().is_cpu()) return BackwardCpu(ctx, args);
  if (!BuiltWithCuda()) return Error(kNoCuda);
  return BackwardGpu(ctx, args);
}

Status Operator::CheckTensor(const Tensor& t, const Device& device,
                             const Shape* want, const char* role, int index,
                             const std::string& what) const {
  const std::string label = std::string(role) + " " + std::to_string(index) +
                            " (" + what + ")";
  if (!t.defined()) return Error(label + " is undefined");
  if (t.dtype() != DType::kFloat32) {
    return Error(label + " is " + DTypeName(t.dtype()) +
                 "; operators take float32");
  }
  if (!crosses_devices() && t.device() != device) {
    return Error(label + " is on " + t.device().ToString() +
                 " but the op runs on " + device.ToString());
  }
  if (want != nullptr && t.shape() != *want) {
    return Error(label + " is " + t.shape().ToString() + ", expected " +
                 want->ToString());
  }
  return Status::OK();
}

Status Operator::ExpectedShapes(const std::vector<Tensor>& in,
                                const std::vector<Shape>** out,
                                const std::vector<Shape>** aux) {
  bool same = cache_valid_ && cached_in_.size() == in.size();
  for (size_t i = 0; same && i < in.size(); ++i) {
    same = cached_in_[i] == in[i].shape();
  }
  if (!same) {
    cache_valid_ = false;
    std::vector<Shape> in_shapes;
    for (const Tensor& t : in) in_shapes.push_back(t.shape());
    std::vector<Shape> out_shapes(num_out_), aux_shapes(num_aux_);
    std::vector<Shape> given = in_shapes;
    KV_RETURN_IF_ERROR(InferShape(&in_shapes, &out_shapes, &aux_shapes));
    if (in_shapes != given) {
      return Error("input shapes " + ShapesToString(given) +
                   " are inconsistent; expected " +
                   ShapesToString(in_shapes));
    }
    cached_in_ = std::move(given);
    cached_out_ = std::move(out_shapes);
    cached_aux_ = std::move(aux_shapes);
    cache_valid_ = true;
  }
  *out = &cached_out_;
  *aux = &cached_aux_;
  return Status::OK();
}

Status Operator::CheckForward(const OpContext& ctx, const ForwardArgs& args) {
  if (static_cast<int>(args.in.size()) != num_in_ ||
      static_cast<int>(args.out.size()) != num_out_ ||
      static_cast<int>(args.aux.size()) != num_aux_ ||
      args.req.size() != args.out.size()) {
    return Error("forward got " + std::to_string(args.in.size()) +
                 " inputs, " + std::to_string(args.out.size()) +
                 " outputs, " + std::to_string(args.aux.size()) +
                 " auxiliary states and " + std::to_string(args.req.size()) +
                 " write requests; expected " + std::to_string(num_in_) +
                 ", " + std::to_string(num_out_) + ", " +
                 std::to_string(num_aux_) + " and " + std::to_string(num_out_));
  }
  const Device& dev = ctx.device->device();
  for (int i = 0; i < num_in_; ++i) {
    KV_RETURN_IF_ERROR(
        CheckTensor(args.in[i], dev, nullptr, "input", i, input_names_[i]));
  }
  const std::vector<Shape>* out_shapes = nullptr;
  const std::vector<Shape>* aux_shapes = nullptr;
  KV_RETURN_IF_ERROR(ExpectedShapes(args.in, &out_shapes, &aux_shapes));
  for (int i = 0; i < num_out_; ++i) {
    if (args.req[i] == OpReq::kNull) continue;
    KV_RETURN_IF_ERROR(CheckTensor(args.out[i], dev, &(*out_shapes)[i],
                                   "output", i, output_names_[i]));
  }
  for (int i = 0; i < num_aux_; ++i) {
    KV_RETURN_IF_ERROR(CheckTensor(args.aux[i], dev, &(*aux_shapes)[i],
                                   "auxiliary state", i, aux_names_[i]));
  }
  return Status::OK();
}

Status Operator::CheckBackward(const OpContext& ctx,
                               const BackwardArgs& args) {
  if (static_cast<int>(args.in.size()) != num_in_ ||
      static_cast<int>(args.out.size()) != num_out_ ||
      static_cast<int>(args.aux.size()) != num_aux_ ||
      static_cast<int>(args.out_grad.size()) != NumVisibleOutputs() ||
      static_cast<int>(args.in_grad.size()) != num_in_ ||
      args.req.size() != args.in_grad.size()) {
    return Error("backward got the wrong number of tensors: " +
                 std::to_string(args.out_grad.size()) + " output gradients, " +
                 std::to_string(args.in.size()) + " inputs, " +
                 std::to_string(args.out.size()) + " outputs, " +
                 std::to_string(args.in_grad.size()) + " input gradients");
  }
  const Device& dev = ctx.device->device();
  for (int i = 0; i < num_in_; ++i) {
    KV_RETURN_IF_ERROR(
        CheckTensor(args.in[i], dev, nullptr, "input", i, input_names_[i]));
  }
  const std::vector<Shape>* out_shapes = nullptr;
  const std::vector<Shape>* aux_shapes = nullptr;
  KV_RETURN_IF_ERROR(ExpectedShapes(args.in, &out_shapes, &aux_shapes));
  for (int i : needs_.outputs) {
    KV_RETURN_IF_ERROR(CheckTensor(args.out[i], dev, &(*out_shapes)[i],
                                   "output", i, output_names_[i]));
  }
  if (needs_.out_grad) {
    for (int i = 0; i < NumVisibleOutputs(); ++i) {
      KV_RETURN_IF_ERROR(CheckTensor(args.out_grad[i], dev, &(*out_shapes)[i],
                                     "output gradient", i, output_names_[i]));
    }
  }
  for (int i = 0; i < num_in_; ++i) {
    if (args.req[i] == OpReq::kNull) continue;
    KV_RETURN_IF_ERROR(CheckTensor(args.in_grad[i], dev, &cached_in_[i],
                                   "input gradient", i, input_names_[i]));
  }
  for (int i = 0; i < num_aux_; ++i) {
    KV_RETURN_IF_ERROR(CheckTensor(args.aux[i], dev, &(*aux_shapes)[i],
                                   "auxiliary state", i, aux_names_[i]));
  }
  return Status::OK();
}

// ---- Registry.

namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, OperatorFactory> factories;
};

Registry& GetRegistry() {
  static Registry* r = new Registry;
  return *r;
}

}  // namespace

bool RegisterOperator(const std::string& type, OperatorFactory factory) {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  CHECK(r.factories.emplace(type, std::move(factory)).second)
      << "operator " << type << " registered twice";
  return true;
}

std::vector<std::string> RegisteredOperators() {
  Registry& r = GetRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

StatusOr<OpDoc> DescribeOperator(const std::string& type) {
  std::vector<AttrDoc> attrs;
  AttrReader::recorder_ = &attrs;
  StatusOr<std::unique_ptr<Operator>> op = CreateOperator(type, "describe", {});
  AttrReader::recorder_ = nullptr;
  if (!op.ok() && op.status().code() == Status::Code::kNotFound) return op.status();
  OpDoc doc;
  doc.type = type;
  doc.attrs = std::move(attrs);
  if (op.ok()) {
    doc.arguments = (*op)->ListArguments();
    doc.outputs = (*op)->ListOutputs();
    doc.aux = (*op)->ListAuxiliaryStates();
  }
  return doc;
}

StatusOr<std::unique_ptr<Operator>> CreateOperator(const std::string& type,
                                                   const std::string& name,
                                                   const OpAttrs& attrs) {
  OperatorFactory factory;
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(type);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string& n : RegisteredOperators()) {
      if (n.rfind("_", 0) == 0) continue;  // internal ops
      known += (known.empty() ? "" : ", ") + n;
    }
    return Status::NotFound("unknown operator \"" + type + "\" (for " + name +
                            "); known operators: " + known);
  }
  if (name.empty()) {
    return Status::InvalidArgument("an operator of type " + type +
                                   " needs a name");
  }
  OpSpec spec{type, name, attrs};
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Operator> op, factory(spec));
  op->type_ = type;
  op->name_ = name;
  op->attrs_ = attrs;
  const std::vector<std::string> args = op->ListArguments();
  op->num_in_ = static_cast<int>(args.size());
  op->output_names_ = op->ListOutputs();
  op->num_out_ = static_cast<int>(op->output_names_.size());
  op->aux_names_ = op->ListAuxiliaryStates();
  op->num_aux_ = static_cast<int>(op->aux_names_.size());
  for (const std::string& a : args) op->input_names_.push_back(name + "_" + a);
  for (std::string& o : op->output_names_) o = name + "_" + o;
  for (std::string& a : op->aux_names_) a = name + "_" + a;
  op->needs_ = op->DeclareBackwardNeeds();
  return op;
}

// ---- Helpers.

std::string ShapesToString(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& sh : shapes) s += (s.empty() ? "" : ", ") + sh.ToString();
  return s;
}

Status CheckFinite(const Tensor& t, const std::string& what) {
  if (!t.defined() || t.dtype() != DType::kFloat32) return Status::OK();
  int64_t bad = 0;
  if (t.device().is_cpu()) {
    const float* p = t.data<float>();
    for (int64_t i = 0; i < t.size(); ++i) bad += !std::isfinite(p[i]);
  } else {
#ifdef KVTRAIN_CUDA
    KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(t.device()));
    bad = gpu::CountNonFinite(t.data<float>(), t.size(), ctx->stream());
#else
    return CheckDevice(t.device());
#endif
  }
  if (bad == 0) return Status::OK();
  return Status::InvalidArgument(what + " has " + std::to_string(bad) +
                                 " NaN/Inf values (of " +
                                 std::to_string(t.size()) + ")");
}

}  // namespace kvtrain
