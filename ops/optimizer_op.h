// Optimizer update ops: one step of an update rule as an operator, so graphs
// (and anything that runs ops) can apply updates on any device.
//   sgd_update      inputs weight, grad;               no state
//   sgd_mom_update  inputs weight, grad; aux momentum
//   nag_mom_update  inputs weight, grad; aux momentum
//   adam_update     inputs weight, grad; aux mean, var
//   adagrad_update  inputs weight, grad; aux history
//   output  the updated weight (in place over `weight` when the executor
//           allows it); the aux states are updated in place
//   attrs   lr (required), wd (0), rescale_grad (1), clip_gradient (-1: off),
//           momentum (0), beta1 (0.9), beta2 (0.999), epsilon (1e-8;
//           1e-7 for adagrad)
// Formulas: proto/optimizer.proto. The ops have no gradient.
#ifndef KVTRAIN_OPS_OPTIMIZER_OP_H_
#define KVTRAIN_OPS_OPTIMIZER_OP_H_

#include "ops/operator.h"
#include "ops/optimizer_kernels.h"

namespace kvtrain {

// Runs one update on tensors of any single device: `states` holds
// NumUpdateStates(rule) tensors shaped like `weight`. Errors name `what`.
// On a GPU the update is queued on the device's stream.
Status ApplyUpdate(UpdateRule rule, const UpdateParams& params,
                   const Tensor& weight, const Tensor& grad,
                   const std::vector<Tensor>& states, const std::string& what);

class UpdateOp : public Operator {
 public:
  // One factory per rule.
  template <UpdateRule kRule>
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec) {
    return CreateFor(kRule, spec);
  }

  std::vector<std::string> ListArguments() const override {
    return {"weight", "grad"};
  }
  std::vector<std::string> ListAuxiliaryStates() const override;
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  std::vector<std::pair<int, int>> ForwardInplace() const override {
    return {{0, 0}};
  }
  bool differentiable() const override { return false; }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;

 private:
  static StatusOr<std::unique_ptr<Operator>> CreateFor(UpdateRule rule,
                                                       const OpSpec& spec);

  UpdateRule rule_ = UpdateRule::kSgd;
  UpdateParams params_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_OPTIMIZER_OP_H_
