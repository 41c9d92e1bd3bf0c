// Flatten and Reshape: the same elements under another shape.
//   Flatten: (N, d1, d2, ...) -> (N, d1 * d2 * ...)
//   Reshape: attr shape (required), e.g. (0, -1): 0 copies the input's
//            dimension at that position, -1 (at most once) takes what is left
// Both run in place when the executor lets them (then Forward is free).
#ifndef KVTRAIN_OPS_RESHAPE_OP_H_
#define KVTRAIN_OPS_RESHAPE_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class ReshapeOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> CreateFlatten(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateReshape(const OpSpec& spec);

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
  bool flatten_ = true;
  std::vector<int64_t> target_;  // Reshape's shape attribute
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_RESHAPE_OP_H_
