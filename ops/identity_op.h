// Pass-through ops, as MXNet's graphs use them:
//   identity (also _copy): output = data; the gradient passes through.
//   BlockGrad (also stop_gradient): output = data; no gradient flows back.
//   Cast: output = data in `dtype`; kvtrain's graphs compute in float32, so
//         dtype must be float32 (another is an error naming it).
//   input data (any shape); output of the same shape.
#ifndef KVTRAIN_OPS_IDENTITY_OP_H_
#define KVTRAIN_OPS_IDENTITY_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class IdentityOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateBlockGrad(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateCast(const OpSpec& spec);

  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override { return BackwardNeeds(); }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  explicit IdentityOp(bool pass_gradient) : pass_gradient_(pass_gradient) {}
  bool pass_gradient_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_IDENTITY_OP_H_
