// Parameterised elementwise ops, as MXNet's:
//   LeakyReLU: act_type leaky (x > 0 ? x : slope x) or elu
//              (x > 0 ? x : slope (e^x - 1)); slope (0.25). MXNet's prelu,
//              rrelu, selu and gelu are errors naming them.
//   clip: min(max(x, a_min), a_max); a_min and a_max required; the gradient
//         passes where a_min <= x <= a_max.
//   _plus_scalar, _minus_scalar, _rminus_scalar, _mul_scalar, _div_scalar,
//   _rdiv_scalar: x + s, x - s, s - x, x * s, x / s, s / x with the
//         attribute scalar (required; MXNet's is_int is accepted); what
//         MXNet's symbol arithmetic with a number makes.
//   input data (any shape); output of the same shape. Backward reads the
//   input.
#ifndef KVTRAIN_OPS_UNARY_OP_H_
#define KVTRAIN_OPS_UNARY_OP_H_

#include "ops/operator.h"
#include "ops/unary_kernels.h"

namespace kvtrain {

class UnaryOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> CreateLeakyRelu(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateClip(const OpSpec& spec);
  template <UnaryKind kKind>
  static StatusOr<std::unique_ptr<Operator>> CreateScalarOf(const OpSpec& spec) {
    return CreateScalar(kKind, spec);
  }

  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  static StatusOr<std::unique_ptr<Operator>> CreateScalar(UnaryKind kind, const OpSpec& spec);
  explicit UnaryOp(UnaryParams p) : p_(p) {}
  UnaryParams p_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_UNARY_OP_H_
