// BatchNorm over axis 1: y = gamma * (x - mean) / sqrt(var + eps) + beta with
// per-channel batch statistics in training and the moving averages in
// inference (or always, with use_global_stats).
//   inputs   data (N, C, ...), gamma (C), beta (C)
//   outputs  output; hidden mean and invstd (the statistics used, for
//            Backward)
//   aux      moving_mean (C), moving_var (C): updated in training as
//            moving = momentum * moving + (1 - momentum) * batch
//   attrs    eps (1e-3), momentum (0.9), fix_gamma (true: gamma is taken as
//            1 and gets a zero gradient), use_global_stats (false), cudnn_off
//            (true: GPUs run the kernels of batch_norm_op.cu; false: cuDNN
//            for batch statistics, where eps >= 1e-5)
#ifndef KVTRAIN_OPS_BATCH_NORM_OP_H_
#define KVTRAIN_OPS_BATCH_NORM_OP_H_

#include "ops/batch_norm_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class BatchNormOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override {
    return {"data", "gamma", "beta"};
  }
  std::vector<std::string> ListOutputs() const override {
    return {"output", "mean", "invstd"};
  }
  std::vector<std::string> ListAuxiliaryStates() const override {
    return {"moving_mean", "moving_var"};
  }
  int NumVisibleOutputs() const override { return 1; }
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
  static BatchNormDims Dims(const Tensor& data);
  // Batch statistics when training without use_global_stats.
  bool BatchStats(const OpContext& ctx) const {
    return ctx.is_train && !use_global_stats_;
  }
  // cuDNN's handle (as void*) when it runs a call with batch statistics on
  // `data`, else null.
  void* CudnnHandle(const OpContext& ctx, const Tensor& data) const;

  float eps_ = 1e-3f;
  float momentum_ = 0.9f;
  bool fix_gamma_ = true;
  bool use_global_stats_ = false;
  bool cudnn_off_ = true;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_BATCH_NORM_OP_H_
