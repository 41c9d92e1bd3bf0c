// cuDNN handles per GPU and the descriptor wrappers (see cudnn.h). The
// legacy (non-graph) cuDNN API is deprecated in cuDNN 9 but complete for
// these ops; its deprecation warnings are silenced for this file's users by
// the BUILD rule.
#include "ops/cudnn.h"

#include <climits>
#include <map>
#include <memory>
#include <mutex>

#include <glog/logging.h>

namespace kvtrain {
namespace cudnn {

bool FitsInt(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d < 0 || d > INT_MAX) return false;
  }
  return true;
}

#ifndef KVTRAIN_CUDA

std::string Version() { return "built without CUDA"; }

#else

const float kOne = 1.0f;
const float kZero = 0.0f;

std::string Version() {
  const size_t v = cudnnGetVersion();
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
         "." + std::to_string(v % 100);
}

void Fatal(cudnnStatus_t status, const char* expr, const char* file,
           int line) {
  LOG(FATAL) << "cuDNN error " << cudnnGetErrorString(status) << " in "
             << expr << " at " << file << ":" << line;
  abort();
}

cudnnHandle_t Handle(const DeviceContext* ctx) {
  static std::mutex mu;
  // One entry per GPU; null where creating the handle failed.
  static auto* handles = new std::map<int, cudnnHandle_t>;
  std::lock_guard<std::mutex> lock(mu);
  const int id = ctx->device().id;
  auto it = handles->find(id);
  if (it != handles->end()) return it->second;
  cudnnHandle_t handle = nullptr;
  const cudnnStatus_t st = cudnnCreate(&handle);
  if (st != CUDNN_STATUS_SUCCESS) {
    LOG(WARNING) << "cuDNN cannot be used on " << ctx->device().ToString()
                 << " (" << cudnnGetErrorString(st)
                 << "); the convolutional ops use kvtrain's own kernels";
    handle = nullptr;
  } else {
    KV_CUDNN_CHECK(
        cudnnSetStream(handle, static_cast<cudaStream_t>(ctx->stream())));
    VLOG(1) << "cuDNN " << Version() << " on " << ctx->device().ToString();
  }
  handles->emplace(id, handle);
  return handle;
}

TensorDesc::TensorDesc() { KV_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
TensorDesc::~TensorDesc() { cudnnDestroyTensorDescriptor(desc_); }
void TensorDesc::Set(int64_t n, int64_t c, int64_t h, int64_t w) {
  KV_CUDNN_CHECK(cudnnSetTensor4dDescriptor(
      desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(n),
      static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
}

FilterDesc::FilterDesc() { KV_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_)); }
FilterDesc::~FilterDesc() { cudnnDestroyFilterDescriptor(desc_); }
void FilterDesc::Set(int64_t k, int64_t c, int64_t h, int64_t w) {
  KV_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
      desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(k),
      static_cast<int>(c), static_cast<int>(h), static_cast<int>(w)));
}

ConvDesc::ConvDesc() {
  KV_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_));
}
ConvDesc::~ConvDesc() { cudnnDestroyConvolutionDescriptor(desc_); }
void ConvDesc::Set(int ph, int pw, int sh, int sw) {
  KV_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      desc_, ph, pw, sh, sw, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  KV_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, CUDNN_FMA_MATH));
}

PoolDesc::PoolDesc() { KV_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&desc_)); }
PoolDesc::~PoolDesc() { cudnnDestroyPoolingDescriptor(desc_); }
void PoolDesc::Set(cudnnPoolingMode_t mode, int kh, int kw, int ph, int pw,
                   int sh, int sw) {
  KV_CUDNN_CHECK(cudnnSetPooling2dDescriptor(desc_, mode, CUDNN_PROPAGATE_NAN,
                                             kh, kw, ph, pw, sh, sw));
}

ActDesc::ActDesc() { KV_CUDNN_CHECK(cudnnCreateActivationDescriptor(&desc_)); }
ActDesc::~ActDesc() { cudnnDestroyActivationDescriptor(desc_); }
void ActDesc::Set(cudnnActivationMode_t mode) {
  KV_CUDNN_CHECK(
      cudnnSetActivationDescriptor(desc_, mode, CUDNN_PROPAGATE_NAN, 0.0));
}

#endif  // KVTRAIN_CUDA

}  // namespace cudnn
}  // namespace kvtrain
