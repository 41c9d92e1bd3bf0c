// Activation: elementwise relu, sigmoid, tanh or softrelu (log(1 + e^x)).
//   input data (any shape); output of the same shape
//   attrs act_type (required: relu, sigmoid, tanh, softrelu), cudnn_off
//         (true: GPUs run the kernels of activation_op.cu, measured faster;
//         false: cuDNN for relu, sigmoid and tanh)
// Forward may run in place; the gradient is computed from the output alone,
// so the input can be freed (or overwritten) after Forward.
#ifndef KVTRAIN_OPS_ACTIVATION_OP_H_
#define KVTRAIN_OPS_ACTIVATION_OP_H_

#include "ops/activation_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class ActivationOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;
  std::vector<std::pair<int, int>> ForwardInplace() const override {
    return {{0, 0}};
  }
  std::vector<std::pair<int, int>> BackwardInplace() const override {
    return {{0, 0}};
  }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  ActType act_ = ActType::kRelu;
  bool cudnn_off_ = true;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_ACTIVATION_OP_H_
