// SoftmaxOutput: softmax forward; its Backward is the cross-entropy gradient
// against integer class labels (no head gradient needed: a loss op).
//   inputs  data (N, C) (more dimensions are flattened into C), label (N)
//   output  the class probabilities, shaped like data
//   attrs   grad_scale (1), normalization (null, batch, valid; default null:
//           the gradient is not divided by the batch size), use_ignore
//           (false), ignore_label (-1: rows with this label get no gradient),
//           cudnn_off (true: GPUs run the kernel of softmax_output_op.cu;
//           false: the softmax from cuDNN)
// A label outside [0, C) is an error naming the op.
#ifndef KVTRAIN_OPS_SOFTMAX_OUTPUT_OP_H_
#define KVTRAIN_OPS_SOFTMAX_OUTPUT_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class SoftmaxOutputOp : public Operator {
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
  enum class Norm { kNull = 0, kBatch = 1, kValid = 2 };
  // The gradient's scale given the batch and the count of valid rows.
  float Scale(int64_t rows, int64_t valid) const;
  Status BadLabels(int64_t bad, int64_t classes) const;

  float grad_scale_ = 1.0f;
  Norm norm_ = Norm::kNull;
  bool use_ignore_ = false;
  float ignore_label_ = -1.0f;
  bool cudnn_off_ = true;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_SOFTMAX_OUTPUT_OP_H_
