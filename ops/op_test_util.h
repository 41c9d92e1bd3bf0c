// Test helpers for operators: run one op on a device with host-side inputs,
// check its analytic gradient against central differences, and compare a
// GPU run with the CPU run.
#ifndef KVTRAIN_OPS_OP_TEST_UTIL_H_
#define KVTRAIN_OPS_OP_TEST_UTIL_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/operator.h"

namespace kvtrain {
namespace op_test {

using Values = std::vector<float>;

// n values uniform in [lo, hi), deterministic in `seed`.
Values Random(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

// One op with all its tensors allocated on one device.
class OpRunner {
 public:
  // Creates the op, infers the missing input shapes, and allocates inputs
  // (filled with Random values), outputs and auxiliary states (zeros).
  static StatusOr<std::unique_ptr<OpRunner>> Create(
      const std::string& type, const OpAttrs& attrs,
      const std::vector<Shape>& in_shapes, const Device& device);

  Operator* op() { return op_.get(); }
  const std::vector<Shape>& in_shapes() const { return in_shapes_; }
  const std::vector<Shape>& out_shapes() const { return out_shapes_; }
  int num_visible_outputs() const { return op_->NumVisibleOutputs(); }

  void SetInput(int i, const Values& v);
  Values Input(int i) const { return args_.in[i].ToVector(); }
  void SetAux(int i, const Values& v);
  Values Aux(int i) const { return args_.aux[i].ToVector(); }
  Values Output(int i) const { return args_.out[i].ToVector(); }

  Status Forward(bool is_train, OpReq req = OpReq::kWrite);
  // Runs Backward with the given output gradients (one per visible output;
  // ignored by loss ops). `grads` holds one vector per input: their initial
  // values matter for kAdd; they receive the results.
  Status Backward(const std::vector<Values>& out_grads,
                  const std::vector<OpReq>& reqs, std::vector<Values>* grads);

 private:
  OpRunner() = default;

  std::unique_ptr<Operator> op_;
  Device device_;
  std::vector<Shape> in_shapes_, out_shapes_;
  ForwardArgs args_;
  Tensor workspace_;
};

// The objective a gradient check differentiates: by default the weighted
// sum of the visible outputs with fixed random weights (then Backward gets
// those weights as output gradients); loss ops pass their own loss of the
// outputs and inputs.
using Objective = std::function<double(const std::vector<Values>& outputs,
                                       const std::vector<Values>& inputs)>;

struct GradCheckOptions {
  // Inputs whose gradients are checked (others, e.g. labels, are kept).
  std::vector<int> inputs;
  // At most this many elements per input are perturbed (chosen evenly).
  int max_elements = 64;
  double eps = 1e-3;
  double atol = 2e-3;
  double rtol = 2e-2;
  // Null: the weighted output sum.
  Objective loss;
  // Forward in training mode.
  bool is_train = true;
};

// Options checking the gradients of `inputs`.
inline GradCheckOptions ForInputs(std::vector<int> inputs) {
  GradCheckOptions o;
  o.inputs = std::move(inputs);
  return o;
}

// Checks the analytic gradient of `runner`'s op at its current inputs (gtest
// EXPECTs), and that kAdd adds the same gradient onto existing values.
void CheckGradient(OpRunner* runner, const GradCheckOptions& options);

// Runs the op on the CPU and on `device` with the same inputs, and expects
// equal outputs (forward, training mode) and input gradients. For the GPU
// builds of the op tests.
void ExpectSameOnDevice(const std::string& type, const OpAttrs& attrs,
                        const std::vector<Shape>& in_shapes,
                        const std::vector<Values>& inputs,
                        const Device& device, float tol = 1e-4f);

// Runs the op on `device` twice with the same inputs: with cudnn_off=false
// (cuDNN on GPUs) and with cudnn_off=true (kvtrain's own kernels, the
// reference).
// Expects equal outputs, hidden ones included, auxiliary states after the
// forward in `is_train` mode, and input gradients, with kWrite and then kAdd
// requests (forward and backward).
void ExpectCudnnMatchesReference(const std::string& type, const OpAttrs& attrs,
                                 const std::vector<Shape>& in_shapes,
                                 const std::vector<Values>& inputs,
                                 const Device& device, float tol = 1e-4f,
                                 bool is_train = true);

// Expects every element of got to be within atol + rtol * |want|.
void ExpectNear(const Values& got, const std::vector<double>& want,
                double atol, double rtol, const std::string& what);

}  // namespace op_test
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_OP_TEST_UTIL_H_
