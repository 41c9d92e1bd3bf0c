// Dropout: in training, zeroes each element with probability p and scales
// the rest by 1 / (1 - p); in inference, the identity.
//   input  data; outputs output (same shape) and a hidden mask kept for
//          Backward
//   attrs  p (0.5, in [0, 1)), seed (0)
// The mask comes from a counter-based hash of (seed, op name, call count,
// element index): deterministic for a given seed and the same on CPU and GPU.
#ifndef KVTRAIN_OPS_DROPOUT_OP_H_
#define KVTRAIN_OPS_DROPOUT_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class DropoutOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListOutputs() const override {
    return {"output", "mask"};
  }
  int NumVisibleOutputs() const override { return 1; }
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
  // The hash stream of the next training call.
  uint64_t NextStream();

  float p_ = 0.5f;
  uint64_t seed_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_DROPOUT_OP_H_
