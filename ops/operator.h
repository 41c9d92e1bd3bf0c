// Operators: the base class every op derives from, the tensors one call runs
// with, attribute parsing, and the registry that creates ops by name. This is
// the public header of //ops:ops; the ops themselves are private and are
// reached only through CreateOperator("FullyConnected", ...).
#ifndef KVTRAIN_OPS_OPERATOR_H_
#define KVTRAIN_OPS_OPERATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/peer_link.h"
#include "base/status.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace kvtrain {

// How an op writes one output (or, in Backward, one input gradient).
enum class OpReq : uint8_t {
  kNull,     // leave it alone
  kWrite,    // overwrite
  kInplace,  // overwrite; the destination shares memory with an input
  kAdd,      // add to what is there
};

// Where the engine runs an op.
enum class ExecKind : uint8_t {
  kCompute,     // on the compute worker of its device, one op at a time
  kBlockingIo,  // on an I/O thread: it may block (e.g. on the network)
};

// Attributes as text, the way graphs store them: {"num_hidden": "128"}.
using OpAttrs = std::map<std::string, std::string>;

// Per-call context.
struct OpContext {
  // Training (dropout active, batch statistics) or inference.
  bool is_train = false;
  // The device every tensor of the call lives on (its stream and cuBLAS
  // handle on GPUs). Never null.
  const DeviceContext* device = nullptr;
  // Scratch memory on that device of at least WorkspaceBytes() bytes; its
  // contents do not survive the call.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Model parallelism across processes: the link the _Send/_Recv ops talk
  // through (null when the whole graph runs in this process) and how long
  // one of their receives may wait.
  PeerLink* peer_link = nullptr;
  std::chrono::milliseconds peer_timeout = std::chrono::minutes(2);
};

// The tensors of one Forward call, in ListArguments() / ListOutputs() /
// ListAuxiliaryStates() order. `req` has one entry per output.
struct ForwardArgs {
  std::vector<Tensor> in;
  std::vector<Tensor> out;
  std::vector<Tensor> aux;
  std::vector<OpReq> req;
};

// The tensors of one Backward call. `out_grad` has one entry per visible
// output (undefined for loss ops, which need none); `in`, `out` and `aux` are
// the forward call's tensors (all defined, with their shapes; only the ones
// the op declares in DeclareBackwardNeeds() are guaranteed to still hold
// their forward values); `in_grad` and `req` have one entry per input.
struct BackwardArgs {
  std::vector<Tensor> out_grad;
  std::vector<Tensor> in;
  std::vector<Tensor> out;
  std::vector<Tensor> aux;
  std::vector<Tensor> in_grad;
  std::vector<OpReq> req;
};

// What Backward reads besides out_grad (memory planning frees the rest).
struct BackwardNeeds {
  std::vector<int> inputs;   // indices into ListArguments()
  std::vector<int> outputs;  // indices into ListOutputs()
  bool out_grad = true;      // false for loss ops
};

// An operator instance: its attributes are parsed and checked when it is
// created. Forward/Backward check the tensors (count, dtype, device, shape)
// and return errors that name the op, then run ForwardCpu/ForwardGpu by the
// tensors' device. Not thread-safe: one instance runs one call at a time
// (the engine guarantees it); distinct instances are independent.
class Operator {
 public:
  virtual ~Operator() = default;

  const std::string& type() const { return type_; }
  const std::string& name() const { return name_; }
  // The attributes as given (for saving graphs).
  const OpAttrs& attrs() const { return attrs_; }
  // "fc1 (FullyConnected)", the prefix of every error of this op.
  std::string Describe() const;

  // Names of the graph entries feeding each input, for error messages;
  // defaults to "<name>_<argument>".
  void set_input_names(std::vector<std::string> names);
  const std::string& input_name(int i) const { return input_names_[i]; }

  // ---- Graph-facing properties.
  virtual std::vector<std::string> ListArguments() const { return {"data"}; }
  virtual std::vector<std::string> ListOutputs() const { return {"output"}; }
  virtual std::vector<std::string> ListAuxiliaryStates() const { return {}; }
  // Outputs the graph sees; the rest are kept for Backward (e.g. a dropout
  // mask). Hidden outputs come last.
  virtual int NumVisibleOutputs() const {
    return static_cast<int>(ListOutputs().size());
  }

  // Fills unknown input shapes (ndim 0; e.g. weights from the data shape) and
  // all output and auxiliary shapes. Errors name the op and both shapes.
  virtual Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                            std::vector<Shape>* aux) const = 0;

  virtual BackwardNeeds DeclareBackwardNeeds() const;
  // Pairs (input, output) whose memory the output may take over in Forward;
  // the op then sees OpReq::kInplace for that output.
  virtual std::vector<std::pair<int, int>> ForwardInplace() const {
    return {};
  }
  // Pairs (output gradient, input gradient) that may share memory.
  virtual std::vector<std::pair<int, int>> BackwardInplace() const {
    return {};
  }
  // Scratch bytes a call needs on `device` for these input shapes.
  virtual size_t WorkspaceBytes(const std::vector<Shape>& in_shapes,
                                const Device& device) const {
    return 0;
  }
  // Ops that may block (sends and receives between processes) say
  // kBlockingIo. Every node of a bound graph runs in every pass (none is
  // pruned), so ops with side effects need nothing more.
  virtual ExecKind exec_kind() const { return ExecKind::kCompute; }
  // True when inputs and outputs may live on different devices (copies).
  virtual bool crosses_devices() const { return false; }
  // False for ops without a gradient (update kernels); Backward then fails.
  virtual bool differentiable() const { return true; }
  // True for ops whose Backward has a side effect another process waits
  // for (sending or receiving a gradient): the executor runs it in every
  // backward pass, even where no input needs a gradient.
  virtual bool always_backward() const { return false; }

  // ---- Checked entry points.
  Status Forward(const OpContext& ctx, ForwardArgs* args);
  Status Backward(const OpContext& ctx, BackwardArgs* args);

 protected:
  Operator() = default;

  // Error helpers: "fc1 (FullyConnected): <msg>".
  Status Error(const std::string& msg) const;

  virtual Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) = 0;
  virtual Status BackwardCpu(const OpContext& ctx, BackwardArgs* args);
  // Default: "<op>: no GPU implementation" (or "built without CUDA").
  virtual Status ForwardGpu(const OpContext& ctx, ForwardArgs* args);
  virtual Status BackwardGpu(const OpContext& ctx, BackwardArgs* args);

 private:
  friend StatusOr<std::unique_ptr<Operator>> CreateOperator(
      const std::string& type, const std::string& name, const OpAttrs& attrs);

  Status CheckForward(const OpContext& ctx, const ForwardArgs& args);
  Status CheckBackward(const OpContext& ctx, const BackwardArgs& args);
  // Shapes the forward tensors must have, from the input shapes; cached for
  // the last input shapes seen.
  Status ExpectedShapes(const std::vector<Tensor>& in,
                        const std::vector<Shape>** out,
                        const std::vector<Shape>** aux);
  Status CheckTensor(const Tensor& t, const Device& device,
                     const Shape* want, const char* role, int index,
                     const std::string& what) const;

  // Set by CreateOperator.
  std::string type_;
  std::string name_;
  OpAttrs attrs_;
  int num_in_ = 0, num_out_ = 0, num_aux_ = 0;
  std::vector<std::string> input_names_, output_names_, aux_names_;
  BackwardNeeds needs_;
  // Cache for ExpectedShapes.
  std::vector<Shape> cached_in_, cached_out_, cached_aux_;
  bool cache_valid_ = false;
};

// What an op accepts, for documentation (the Python front-end's docstrings):
// read from its factory by DescribeOperator, so it always matches what the
// op parses.
struct AttrDoc {
  std::string key;
  std::string kind;      // "int >= 1", "float", "bool", "one of a, b", ...
  std::string fallback;  // the default as text; empty when required
  bool required = false;
};
struct OpDoc {
  std::string type;
  std::vector<std::string> arguments;  // inputs, ListArguments() order
  std::vector<std::string> outputs;
  std::vector<std::string> aux;
  std::vector<AttrDoc> attrs;  // in the order the factory reads them
};
// ---- Attribute parsing, for op factories.
// Reads typed attributes, remembers which keys were asked for, and reports
// unknown keys with the list of accepted ones:
//   `fc1 (FullyConnected): unknown attribute "num_hiden"; accepted:
//   flatten, no_bias, num_hidden`.
class AttrReader {
 public:
  AttrReader(std::string op_desc, const OpAttrs& attrs)
      : desc_(std::move(op_desc)), attrs_(attrs) {}

  // Each returns an error naming the op, the key, the value and what was
  // expected. Required keys have no default.
  Status Int(const std::string& key, int64_t* out, int64_t min, int64_t max);
  Status Int(const std::string& key, int64_t* out, int64_t min, int64_t max,
             int64_t fallback);
  Status Float(const std::string& key, double* out, double min, double max,
               double fallback);
  Status Bool(const std::string& key, bool* out, bool fallback);
  // One of `choices`; *out is its index.
  Status Enum(const std::string& key, const std::vector<std::string>& choices,
              int* out, int fallback);
  // "(5, 5)" or "5,5" or "5": `n` positive integers (a single number is
  // repeated); *present says whether the key was given.
  Status Tuple(const std::string& key, int n, int64_t min,
               std::vector<int64_t>* out, bool* present);
  // "(2, -1, 0)": any number of integers (each >= min).
  Status IntList(const std::string& key, int64_t min, std::vector<int64_t>* out,
                 bool* present);
  // Errors for keys nobody asked for.
  Status Finish() const;

 private:
  const std::string* Find(const std::string& key);

  // Describe mode (DescribeOperator): every read is recorded, and required
  // keys read as placeholders so the factory goes on to the next ones.
  void Record(const std::string& key, std::string kind, std::string fallback,
              bool required);
  // True when the attributes lack `key`, which then counts as asked for
  // (the caller answers its fallback, or in describe mode a placeholder).
  bool Absent(const std::string& key);
  friend StatusOr<OpDoc> DescribeOperator(const std::string& type);
  static thread_local std::vector<AttrDoc>* recorder_;

  std::string desc_;
  const OpAttrs& attrs_;
  std::vector<std::string> asked_;
};

// ---- Registry.
// What a factory gets: the op's type, its name in the graph, its attributes.
struct OpSpec {
  std::string type;
  std::string name;
  OpAttrs attrs;
  // "fc1 (FullyConnected)".
  std::string Describe() const;
};

using OperatorFactory =
    std::function<StatusOr<std::unique_ptr<Operator>>(const OpSpec& spec)>;

// Registers `type` (at static-initialisation time, via KV_REGISTER_OP).
// Registering a name twice is a programmer bug (CHECK).
bool RegisterOperator(const std::string& type, OperatorFactory factory);

// Creates an op; an unknown type is an error listing the known ones.
StatusOr<std::unique_ptr<Operator>> CreateOperator(const std::string& type,
                                                   const std::string& name,
                                                   const OpAttrs& attrs);
// Sorted names of every registered op.
std::vector<std::string> RegisteredOperators();
// Describes a registered op (OpDoc above); an unknown type is the same
// error as CreateOperator's.
StatusOr<OpDoc> DescribeOperator(const std::string& type);

// ---- Helpers shared by ops and their callers.
// "(10, 64)" list for messages: "(2, 3), (3)".
std::string ShapesToString(const std::vector<Shape>& shapes);
// Ok when every element of a float32 tensor is finite; otherwise an error
// counting the NaN/Inf elements, prefixed with `what`.
Status CheckFinite(const Tensor& t, const std::string& what);

}  // namespace kvtrain

// KV_REGISTER_OP("FullyConnected", FullyConnectedOp::Create) registers a
// factory `StatusOr<std::unique_ptr<Operator>> (const OpSpec&)`.
#define KV_REGISTER_OP(type, factory)                               \
  static const bool KV_STATUS_CONCAT(kv_registered_op_, __LINE__) = \
      ::kvtrain::RegisterOperator(type, factory)

#endif  // KVTRAIN_OPS_OPERATOR_H_
