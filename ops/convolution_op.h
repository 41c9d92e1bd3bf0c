// Convolution (2-D, NCHW): out[n, f] = sum_c weight[f, c] * data[n, c] + bias[f].
//   inputs  data (N, C, H, W), weight (num_filter, C, kh, kw),
//           bias (num_filter) unless no_bias
//   output  (N, num_filter, (H + 2 ph - kh) / sh + 1, (W + 2 pw - kw) / sw + 1)
//   attrs   kernel (required, "(kh, kw)"), num_filter (required),
//           stride ((1, 1)), pad ((0, 0)), no_bias (false), cudnn_off
//           (true; false: GPUs use cuDNN), workspace (1024: MB of scratch
//           one cuDNN algorithm may use)
// Algorithm: im2col + one GEMM per group of images (the group sized so its
// column matrix stays in cache), bias fused into the scatter back to NCHW.
// On the CPU each thread of the pool takes a contiguous share of the batch
// with its own workspace and a single-threaded GEMM. With cudnn_off=false,
// GPUs use cuDNN instead, with the algorithms timed once per input shape
// (convolution_cudnn.h); it is not the default because it measured no
// faster (docs/operators.md).
#ifndef KVTRAIN_OPS_CONVOLUTION_OP_H_
#define KVTRAIN_OPS_CONVOLUTION_OP_H_

#include <memory>

#include "ops/convolution_cudnn.h"
#include "ops/convolution_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class ConvolutionOp : public Operator {
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
  // How one call splits its work: `slots` independent workers (CPU threads;
  // 1 on GPUs), each handling groups of `group` images with `slot_floats`
  // floats of workspace.
  struct Plan {
    ConvGeometry geo;
    int batch = 0;
    int filters = 0;
    int slots = 1;
    int group = 1;
    int64_t slot_floats = 0;
  };
  Plan MakePlan(const Shape& data, const Device& device, int threads) const;
  // The plan for this call, limited to the workspace the executor gave.
  Plan CallPlan(const OpContext& ctx, const Tensor& data) const;
  void BackwardSlotCpu(const Plan& plan, const BackwardArgs& args, int slot,
                       float* ws, const OpContext& ctx) const;

  // The cuDNN path for this call, if it runs it (*bytes: its workspace).
  bool UseCudnn(const DeviceContext* ctx, const Shape& data,
                size_t* bytes) const;

  int64_t kernel_[2] = {0, 0};
  int64_t stride_[2] = {1, 1};
  int64_t pad_[2] = {0, 0};
  int64_t num_filter_ = 0;
  bool no_bias_ = false;
  // Null unless cudnn_off=false.
  std::unique_ptr<ConvCudnn> cudnn_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_CONVOLUTION_OP_H_
