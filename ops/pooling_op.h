// Pooling (2-D, NCHW): max or average over windows.
//   input  data (N, C, H, W)
//   output (N, C, (H + 2 ph - kh) / sh + 1, (W + 2 pw - kw) / sw + 1)
//   attrs  pool_type (max, avg; default max), kernel (required unless
//          global_pool), stride ((1, 1)), pad ((0, 0)), global_pool (false:
//          true pools each whole plane to 1x1), cudnn_off (true: GPUs run
//          the kernels of pooling_op.cu; false: cuDNN)
// Average pooling divides by the full window (padding counts as zeros). The
// max gradient goes to the first maximal element of each window.
#ifndef KVTRAIN_OPS_POOLING_OP_H_
#define KVTRAIN_OPS_POOLING_OP_H_

#include "ops/operator.h"
#include "ops/pooling_kernels.h"

namespace kvtrain {

class PoolingOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  PoolGeometry Geometry(const Shape& data) const;

  PoolType type_ = PoolType::kMax;
  int64_t kernel_[2] = {0, 0};
  int64_t stride_[2] = {1, 1};
  int64_t pad_[2] = {0, 0};
  bool global_ = false;
  bool cudnn_off_ = true;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_POOLING_OP_H_
