// Convolution through cuDNN: for each input shape, the descriptors and the
// fastest deterministic forward, backward-data and backward-filter
// algorithms that fit the workspace limit, chosen once by timing them
// (cudnnFind*) and cached. ConvolutionOp takes this path on GPUs unless
// cudnn_off is set; its im2col kernels stay the reference.
#ifndef KVTRAIN_OPS_CONVOLUTION_CUDNN_H_
#define KVTRAIN_OPS_CONVOLUTION_CUDNN_H_

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "ops/operator.h"

namespace kvtrain {

struct ConvParams {
  int64_t kernel[2] = {0, 0};
  int64_t stride[2] = {1, 1};
  int64_t pad[2] = {0, 0};
  int64_t num_filter = 0;
  bool no_bias = false;
  // Most scratch memory one algorithm may use (MXNet's `workspace`, in MB).
  size_t workspace_limit = size_t{1024} << 20;
};

// Thread-safe: plans are created under a mutex and never change afterwards.
class ConvCudnn {
 public:
  explicit ConvCudnn(const ConvParams& params);
  ~ConvCudnn();

  // True when cuDNN runs calls with this input shape on ctx's GPU; then
  // *bytes is the workspace they need. The first call for a shape times the
  // algorithms. False without CUDA, without a usable cuDNN, or for shapes
  // cuDNN refuses (the caller then runs its own kernels).
  bool Ready(const DeviceContext* ctx, const Shape& data, size_t* bytes);

  // Both need Ready() for the call's shape and ctx.workspace_bytes >= bytes.
  Status Forward(const OpContext& ctx, ForwardArgs* args);
  Status Backward(const OpContext& ctx, BackwardArgs* args);

 private:
  struct Plan;
  Plan* Get(const DeviceContext* ctx, const Shape& data);

  const ConvParams params_;
  std::mutex mu_;
  // By (GPU id, input shape); null where cuDNN cannot run the shape.
  std::map<std::pair<int, std::vector<int64_t>>, std::unique_ptr<Plan>> plans_
      GUARDED_BY(mu_);
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_CONVOLUTION_CUDNN_H_
