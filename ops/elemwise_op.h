// Elementwise binary ops on two inputs of the same shape:
//   elemwise_add (lhs + rhs), elemwise_sub (lhs - rhs), elemwise_mul
//   (lhs * rhs); inputs lhs, rhs; output of their shape; no attributes.
// add and sub may run in place over lhs; mul keeps both inputs for Backward.
#ifndef KVTRAIN_OPS_ELEMWISE_OP_H_
#define KVTRAIN_OPS_ELEMWISE_OP_H_

#include "ops/elemwise_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class ElemwiseOp : public Operator {
 public:
  template <BinaryKind kKind>
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec) {
    return CreateFor(kKind, spec);
  }

  std::vector<std::string> ListArguments() const override {
    return {"lhs", "rhs"};
  }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;
  std::vector<std::pair<int, int>> ForwardInplace() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  static StatusOr<std::unique_ptr<Operator>> CreateFor(BinaryKind kind,
                                                       const OpSpec& spec);
  BinaryKind kind_ = BinaryKind::kAdd;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_ELEMWISE_OP_H_
