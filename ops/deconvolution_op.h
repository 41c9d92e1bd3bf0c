// Deconvolution (2-D, NCHW; MXNet's): the transpose of Convolution, its
// forward being Convolution's gradient by the data.
//   inputs  data (N, C, H, W), weight (C, num_filter, kh, kw), bias
//           (num_filter) unless no_bias
//   output  (N, num_filter, (H - 1) sh - 2 ph + kh + ah, (W - 1) sw - 2 pw +
//           kw + aw)
//   attrs   kernel (required), num_filter (required), stride ((1, 1)), pad
//           ((0, 0)), adj ((0, 0); each < its stride: the output rows and
//           columns a strided convolution of it would not see), no_bias
//           (true, as MXNet's)
// Algorithm: per image, GEMM (weight^T x data) into the column layout of the
// equivalent convolution of the output, then col2im; backward is im2col of
// the output gradient and two GEMMs. On the CPU each thread takes a share of
// the batch with its own column buffer and partial weight gradient.
#ifndef KVTRAIN_OPS_DECONVOLUTION_OP_H_
#define KVTRAIN_OPS_DECONVOLUTION_OP_H_

#include "ops/convolution_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class DeconvolutionOp : public Operator {
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
  // The equivalent convolution (of the output, giving the data's size), the
  // batch, the data's channels, and how many threads share the batch.
  struct Plan {
    ConvGeometry geo;
    int batch = 0;
    int channels = 0;
    int slots = 1;
    // Floats per slot: the column block, and on the CPU the partial weight
    // and bias gradients.
    int64_t slot_floats = 0;
    // The column block's rows and columns; one data image's, one output
    // image's and one output plane's floats.
    int K = 0, P = 0;
    int64_t in_size = 0, out_size = 0, out_plane = 0;
  };
  Plan MakePlan(const Shape& data, const Device& device, int threads) const;
  // The plan for this call within the workspace the executor gave (an
  // error if even one slot does not fit).
  StatusOr<Plan> CallPlan(const OpContext& ctx, const Tensor& data) const;

  int64_t kernel_[2] = {0, 0};
  int64_t stride_[2] = {1, 1};
  int64_t pad_[2] = {0, 0};
  int64_t adj_[2] = {0, 0};
  int64_t num_filter_ = 0;
  bool no_bias_ = true;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_DECONVOLUTION_OP_H_
