// Operator checks and dispatch, attribute parsing and the op registry.
#include "ops/operator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>

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

// ---- AttrReader.

const std::string* AttrReader::Find(const std::string& key) {
  asked_.push_back(key);
  auto it = attrs_.find(key);
  return it == attrs_.end() ? nullptr : &it->second;
}

namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

bool ParseInt64(const std::string& text, int64_t* out) {
  const std::string s = Trim(text);
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || errno != 0) return false;
  *out = v;
  return true;
}

}  // namespace

thread_local std::vector<AttrDoc>* AttrReader::recorder_ = nullptr;

void AttrReader::Record(const std::string& key, std::string kind,
                        std::string fallback, bool required) {
  for (const AttrDoc& d : *recorder_) {
    if (d.key == key) return;
  }
  recorder_->push_back({key, std::move(kind), std::move(fallback), required});
}

namespace {

std::string RangeText(int64_t min, int64_t max) {
  std::string out = "int";
  if (min > std::numeric_limits<int64_t>::min() / 2) out += " >= " + std::to_string(min);
  if (max < std::numeric_limits<int64_t>::max() / 2) out += ", <= " + std::to_string(max);
  return out;
}

}  // namespace

Status AttrReader::Int(const std::string& key, int64_t* out, int64_t min,
                       int64_t max) {
  if (recorder_ != nullptr) {
    Record(key, RangeText(min, max), "", true);
    if (attrs_.count(key) == 0) {
      asked_.push_back(key);
      *out = std::max<int64_t>(min, std::min<int64_t>(max, 1));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  if (v == nullptr) {
    return Status::InvalidArgument(desc_ + ": missing attribute " + key);
  }
  int64_t x = 0;
  if (!ParseInt64(*v, &x) || x < min || x > max) {
    return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                   "\": expected an integer in [" +
                                   std::to_string(min) + ", " +
                                   std::to_string(max) + "]");
  }
  *out = x;
  return Status::OK();
}

Status AttrReader::Int(const std::string& key, int64_t* out, int64_t min,
                       int64_t max, int64_t fallback) {
  if (recorder_ != nullptr) Record(key, RangeText(min, max), std::to_string(fallback), false);
  if (attrs_.count(key) == 0) {
    asked_.push_back(key);
    *out = fallback;
    return Status::OK();
  }
  return Int(key, out, min, max);
}

Status AttrReader::Float(const std::string& key, double* out, double min,
                         double max, double fallback) {
  if (recorder_ != nullptr) {
    // A fallback outside [min, max] marks a required value.
    const bool required = !(fallback >= min && fallback <= max);
    std::ostringstream f;
    if (!required) f << fallback;
    Record(key, "float", f.str(), required);
    if (required && attrs_.count(key) == 0) {
      asked_.push_back(key);
      *out = std::min(max, std::max(min, 1.0));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  const std::string s = Trim(*v);
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(x) ||
      x < min || x > max) {
    std::ostringstream os;
    os << desc_ << ": attribute " << key << "=\"" << *v
       << "\": expected a number in [" << min << ", " << max << "]";
    return Status::InvalidArgument(os.str());
  }
  *out = x;
  return Status::OK();
}

Status AttrReader::Bool(const std::string& key, bool* out, bool fallback) {
  if (recorder_ != nullptr) Record(key, "bool", fallback ? "true" : "false", false);
  const std::string* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  const std::string s = Trim(*v);
  if (s == "1" || s == "true" || s == "True") {
    *out = true;
  } else if (s == "0" || s == "false" || s == "False") {
    *out = false;
  } else {
    return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                   "\": expected true or false");
  }
  return Status::OK();
}

Status AttrReader::Enum(const std::string& key,
                        const std::vector<std::string>& choices, int* out,
                        int fallback) {
  if (recorder_ != nullptr) {
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
    const bool required = fallback < 0 || fallback >= static_cast<int>(choices.size());
    Record(key, "one of " + list, required ? "" : choices[fallback], required);
    if (required && attrs_.count(key) == 0) {
      asked_.push_back(key);
      *out = 0;
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return Status::OK();
  }
  const std::string s = Trim(*v);
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i] == s) {
      *out = static_cast<int>(i);
      return Status::OK();
    }
  }
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
  return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                 "\": expected one of " + list);
}

namespace {

// "(5, 5)", "5,5", "(5,)" -> integers >= min; false on anything else.
bool ParseIntList(const std::string& text, int64_t min,
                  std::vector<int64_t>* out) {
  std::string s = Trim(text);
  if (!s.empty() && s.front() == '(' && s.back() == ')') {
    s = s.substr(1, s.size() - 2);
  }
  out->clear();
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int64_t x = 0;
    if (Trim(part).empty() && ss.eof() && !out->empty()) break;  // "(5,)"
    if (!ParseInt64(part, &x) || x < min) return false;
    out->push_back(x);
  }
  return !out->empty();
}

}  // namespace

Status AttrReader::IntList(const std::string& key, int64_t min,
                           std::vector<int64_t>* out, bool* present) {
  if (recorder_ != nullptr) {
    Record(key, "list of ints >= " + std::to_string(min), "", false);
    if (attrs_.count(key) == 0) {
      asked_.push_back(key);
      *present = true;
      out->assign(1, std::max<int64_t>(min, 1));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  *present = v != nullptr;
  if (v == nullptr) return Status::OK();
  if (!ParseIntList(*v, min, out)) {
    return Status::InvalidArgument(desc_ + ": attribute " + key + "=\"" + *v +
                                   "\": expected a list of integers >= " +
                                   std::to_string(min) + ", e.g. (2, 3)");
  }
  return Status::OK();
}

Status AttrReader::Tuple(const std::string& key, int n, int64_t min,
                         std::vector<int64_t>* out, bool* present) {
  if (recorder_ != nullptr) {
    Record(key, "tuple of " + std::to_string(n) + " ints >= " + std::to_string(min), "", false);
    if (attrs_.count(key) == 0) {
      // A placeholder, so that the factory reads on (it decides whether
      // the key is required; the docs say "optional" for every tuple).
      asked_.push_back(key);
      *present = true;
      out->assign(n, std::max<int64_t>(min, 0));
      return Status::OK();
    }
  }
  const std::string* v = Find(key);
  *present = v != nullptr;
  if (v == nullptr) return Status::OK();
  std::vector<int64_t> vals;
  const bool ok = ParseIntList(*v, min, &vals);
  if (vals.size() == 1 && n > 1) vals.assign(n, vals[0]);
  if (!ok || static_cast<int>(vals.size()) != n) {
    return Status::InvalidArgument(
        desc_ + ": attribute " + key + "=\"" + *v + "\": expected " +
        std::to_string(n) + " integers >= " + std::to_string(min) +
        ", e.g. (" + std::to_string(std::max<int64_t>(min, 2)) +
        (n == 2 ? ", " + std::to_string(std::max<int64_t>(min, 2)) : "") +
        ")");
  }
  *out = std::move(vals);
  return Status::OK();
}

Status AttrReader::Finish() const {
  for (const auto& [key, value] : attrs_) {
    if (std::find(asked_.begin(), asked_.end(), key) != asked_.end()) continue;
    std::vector<std::string> accepted = asked_;
    std::sort(accepted.begin(), accepted.end());
    accepted.erase(std::unique(accepted.begin(), accepted.end()),
                   accepted.end());
    std::string list;
    for (const std::string& a : accepted) list += (list.empty() ? "" : ", ") + a;
    return Status::InvalidArgument(desc_ + ": unknown attribute \"" + key +
                                   "\"; accepted: " +
                                   (list.empty() ? "none" : list));
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
