// LinearRegressionOutput: the identity forward; Backward is the squared-error
// gradient (no head gradient needed: a loss op):
//   d data = grad_scale / num_output * (output - label)
// with num_output the elements per row.
//   inputs  data (N, ...), label (same number of elements as data)
//   output  data's values, shaped like data
//   attrs   grad_scale (1)
#ifndef KVTRAIN_OPS_REGRESSION_OUTPUT_OP_H_
#define KVTRAIN_OPS_REGRESSION_OUTPUT_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class LinearRegressionOutputOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override {
    return {"data", "label"};
  }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;
  std::vector<std::pair<int, int>> ForwardInplace() const override {
    return {{0, 0}};
  }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  float grad_scale_ = 1.0f;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_REGRESSION_OUTPUT_OP_H_
