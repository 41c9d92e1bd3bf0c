// Convolution through cuDNN (see convolution_cudnn.h).
#include "ops/convolution_cudnn.h"

#include <algorithm>

#include <glog/logging.h>

#include "ops/convolution_kernels.h"
#include "ops/cudnn.h"
#include "ops/op_util.h"

#ifdef KVTRAIN_CUDA
#include "tensor/cuda_check.h"
#endif

namespace kvtrain {

#ifdef KVTRAIN_CUDA

struct ConvCudnn::Plan {
  // wt: the filter's shape as a tensor (for adding gradients).
  cudnn::TensorDesc x, y, wt;
  cudnn::FilterDesc w;
  cudnn::ConvDesc conv;
  cudnnHandle_t handle = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t bytes = 0;
};

namespace {

// The fastest result (cuDNN sorts them by time) that ran, fits `limit` and,
// where asked, gives the same bits on every run; -1 if none does.
// Algorithms whose float32 results stray from the reference by far more
// than rounding: Winograd without fusion (seen off by 4% in a backward-data
// element of a 5x5 convolution on an H200).
bool Inexact(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool Inexact(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool Inexact(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// The fastest result (cuDNN sorts them by time) that ran in plain FP32
// math, is not Inexact, fits `limit`, and gives the same bits on every run;
// -1 if none does.
template <typename Perf>
int Pick(const Perf* perf, int n, size_t limit) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > limit ||
        perf[i].mathType != CUDNN_FMA_MATH || Inexact(perf[i].algo) ||
        perf[i].determinism != CUDNN_DETERMINISTIC) {
      continue;
    }
    return i;
  }
  return -1;
}

// Calls run(out) with out = dst when the request overwrites it. For kAdd,
// out is a scratch array added to dst afterwards: the calls always get
// beta = 0, which every algorithm honours.
template <typename Run>
void WriteOrAdd(cudnnHandle_t h, cudnnTensorDescriptor_t desc, float* dst,
                int64_t count, bool add, void* stream, Run run) {
  if (!add) {
    run(dst);
    return;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* tmp = nullptr;
  KV_CUDA_CHECK(cudaMallocAsync(&tmp, count * sizeof(float), s));
  run(tmp);
  KV_CUDNN_CHECK(cudnnAddTensor(h, &cudnn::kOne, desc, tmp, &cudnn::kOne,
                                desc, dst));
  KV_CUDA_CHECK(cudaFreeAsync(tmp, s));
}

}  // namespace

ConvCudnn::ConvCudnn(const ConvParams& params) : params_(params) {}
ConvCudnn::~ConvCudnn() = default;

ConvCudnn::Plan* ConvCudnn::Get(const DeviceContext* ctx, const Shape& data) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_pair(ctx->device().id, data.dims());
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();
  std::unique_ptr<Plan> plan;
  cudnnHandle_t handle = cudnn::Handle(ctx);
  const ConvParams& p = params_;
  const int64_t oh = (data[2] + 2 * p.pad[0] - p.kernel[0]) / p.stride[0] + 1;
  const int64_t ow = (data[3] + 2 * p.pad[1] - p.kernel[1]) / p.stride[1] + 1;
  if (handle != nullptr && data.ndim() == 4 &&
      cudnn::FitsInt({data[0], data[1], data[2], data[3], p.num_filter,
                      data.NumElements(), data[0] * p.num_filter * oh * ow})) {
    plan.reset(new Plan);
    plan->handle = handle;
    plan->x.Set(data[0], data[1], data[2], data[3]);
    plan->w.Set(p.num_filter, data[1], p.kernel[0], p.kernel[1]);
    plan->conv.Set(static_cast<int>(p.pad[0]), static_cast<int>(p.pad[1]),
                   static_cast<int>(p.stride[0]), static_cast<int>(p.stride[1]));
    plan->y.Set(data[0], p.num_filter, oh, ow);
    plan->wt.Set(p.num_filter, data[1], p.kernel[0], p.kernel[1]);
    cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n_fwd = 0, n_data = 0, n_filter = 0;
    KV_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(
        handle, plan->x.get(), plan->w.get(), plan->conv.get(), plan->y.get(),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n_fwd, fwd));
    KV_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(
        handle, plan->w.get(), plan->y.get(), plan->conv.get(), plan->x.get(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n_data, bwd_data));
    KV_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
        handle, plan->x.get(), plan->y.get(), plan->conv.get(), plan->w.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n_filter, bwd_filter));
    const size_t limit = p.workspace_limit;
    const int f = Pick(fwd, n_fwd, limit);
    const int d = Pick(bwd_data, n_data, limit);
    const int g = Pick(bwd_filter, n_filter, limit);
    if (f < 0 || d < 0 || g < 0) {
      LOG(WARNING) << "Convolution " << data.ToString()
                   << ": cuDNN has no exact, deterministic FP32 algorithm within "
                   << (limit >> 20) << " MB of workspace; using im2col";
      plan.reset();
    } else {
      plan->fwd = fwd[f].algo;
      plan->bwd_data = bwd_data[d].algo;
      plan->bwd_filter = bwd_filter[g].algo;
      plan->bytes = std::max({fwd[f].memory, bwd_data[d].memory,
                              bwd_filter[g].memory});
      VLOG(1) << "Convolution " << data.ToString() << " on cuDNN: fwd algo "
              << fwd[f].algo << " (" << fwd[f].time << " ms), bwd data "
              << bwd_data[d].algo << " (" << bwd_data[d].time
              << " ms), bwd filter " << bwd_filter[g].algo << " ("
              << bwd_filter[g].time << " ms), " << plan->bytes
              << " bytes of workspace";
    }
  }
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

bool ConvCudnn::Ready(const DeviceContext* ctx, const Shape& data,
                      size_t* bytes) {
  if (!ctx->device().is_gpu()) return false;
  const Plan* plan = Get(ctx, data);
  if (plan == nullptr) return false;
  *bytes = plan->bytes;
  return true;
}

Status ConvCudnn::Forward(const OpContext& ctx, ForwardArgs* args) {
  using op_util::Ptr;
  const Plan* plan = Get(ctx.device, args->in[0].shape());
  CHECK(plan != nullptr) << "ConvCudnn::Forward without Ready()";
  WriteOrAdd(plan->handle, plan->y.get(), Ptr(args->out[0]),
             args->out[0].size(), args->req[0] == OpReq::kAdd,
             ctx.device->stream(), [&](float* y) {
               KV_CUDNN_CHECK(cudnnConvolutionForward(
                   plan->handle, &cudnn::kOne, plan->x.get(), Ptr(args->in[0]),
                   plan->w.get(), Ptr(args->in[1]), plan->conv.get(),
                   plan->fwd, ctx.workspace, plan->bytes, &cudnn::kZero,
                   plan->y.get(), y));
               // kvtrain's kernel: one launch, where cudnnAddTensor costs
               // the host several times that.
               if (params_.no_bias) return;
               const Shape& out = args->out[0].shape();
               gpu::AddBias(Ptr(args->in[2]), static_cast<int>(out[0]),
                            static_cast<int>(out[1]), out[2] * out[3], y,
                            ctx.device->stream());
             });
  return Status::OK();
}

Status ConvCudnn::Backward(const OpContext& ctx, BackwardArgs* args) {
  using op_util::Ptr;
  const Plan* plan = Get(ctx.device, args->in[0].shape());
  CHECK(plan != nullptr) << "ConvCudnn::Backward without Ready()";
  const std::vector<OpReq>& req = args->req;
  const float* dy = Ptr(args->out_grad[0]);
  void* stream = ctx.device->stream();
  if (!params_.no_bias && req[2] != OpReq::kNull) {
    const Shape& out = args->out_grad[0].shape();
    gpu::BiasGrad(dy, static_cast<int>(out[0]), static_cast<int>(out[1]),
                  out[2] * out[3], Ptr(args->in_grad[2]),
                  req[2] == OpReq::kAdd, stream);
  }
  if (req[1] != OpReq::kNull) {
    WriteOrAdd(plan->handle, plan->wt.get(), Ptr(args->in_grad[1]),
               args->in_grad[1].size(), req[1] == OpReq::kAdd, stream,
               [&](float* dw) {
                 KV_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
                     plan->handle, &cudnn::kOne, plan->x.get(),
                     Ptr(args->in[0]), plan->y.get(), dy, plan->conv.get(),
                     plan->bwd_filter, ctx.workspace, plan->bytes,
                     &cudnn::kZero, plan->w.get(), dw));
               });
  }
  if (req[0] != OpReq::kNull) {
    WriteOrAdd(plan->handle, plan->x.get(), Ptr(args->in_grad[0]),
               args->in_grad[0].size(), req[0] == OpReq::kAdd, stream,
               [&](float* dx) {
                 KV_CUDNN_CHECK(cudnnConvolutionBackwardData(
                     plan->handle, &cudnn::kOne, plan->w.get(),
                     Ptr(args->in[1]), plan->y.get(), dy, plan->conv.get(),
                     plan->bwd_data, ctx.workspace, plan->bytes,
                     &cudnn::kZero, plan->x.get(), dx));
               });
  }
  return Status::OK();
}

#else  // !KVTRAIN_CUDA

struct ConvCudnn::Plan {};
ConvCudnn::ConvCudnn(const ConvParams& params) : params_(params) {}
ConvCudnn::~ConvCudnn() = default;
ConvCudnn::Plan* ConvCudnn::Get(const DeviceContext*, const Shape&) {
  return nullptr;
}
bool ConvCudnn::Ready(const DeviceContext*, const Shape&, size_t*) {
  return false;
}
Status ConvCudnn::Forward(const OpContext&, ForwardArgs*) {
  return Status::Internal("cuDNN: kvtrain was built without CUDA");
}
Status ConvCudnn::Backward(const OpContext&, BackwardArgs*) {
  return Status::Internal("cuDNN: kvtrain was built without CUDA");
}

#endif  // KVTRAIN_CUDA

}  // namespace kvtrain
