// FullyConnected: output = data * weight^T + bias.
//   inputs  data (N, ...) flattened to (N, K) (or (..., K) with flatten=false),
//           weight (num_hidden, K), bias (num_hidden) unless no_bias
//   output  (N, num_hidden) (or (..., num_hidden))
//   attrs   num_hidden (required), no_bias (false), flatten (true)
// All math is GEMMs through tensor/blas.h, so there is no .cu file: on
// GPUs the bias is a rank-1 GEMM against a ones vector in the workspace.
#ifndef KVTRAIN_OPS_FULLY_CONNECTED_OP_H_
#define KVTRAIN_OPS_FULLY_CONNECTED_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class FullyConnectedOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override;
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;
  size_t WorkspaceBytes(const std::vector<Shape>& in_shapes,
                        const Device& device) const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  // Rows and features of the data as a matrix.
  void Dims(const Tensor& data, int* rows, int* features) const;
  void Gemms(const OpContext& ctx, ForwardArgs* args);
  void BackwardGemms(const OpContext& ctx, BackwardArgs* args);

  int64_t num_hidden_ = 0;
  bool no_bias_ = false;
  bool flatten_ = true;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_FULLY_CONNECTED_OP_H_
