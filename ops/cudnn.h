// cuDNN for the convolutional operators: one handle per GPU (on the device
// context's stream), owning descriptor wrappers, and the checked call. The
// ops keep their own kernels as the reference path (attribute cudnn_off).
// Private to ops/.
#ifndef KVTRAIN_OPS_CUDNN_H_
#define KVTRAIN_OPS_CUDNN_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "tensor/device.h"

#ifdef KVTRAIN_CUDA
#include <cudnn.h>
#endif

namespace kvtrain {
namespace cudnn {

// "9.19.0" for the cuDNN library loaded at run time, or why there is none
// ("built without CUDA").
std::string Version();

#ifdef KVTRAIN_CUDA

// The handle for `ctx`'s GPU, created on first use and bound to its stream;
// null when cuDNN cannot be used there (the reason is logged once). Callers
// then take the reference kernels. Thread-safe to get; like the cuBLAS
// handle, its use is ordered by whoever owns the device's stream.
cudnnHandle_t Handle(const DeviceContext* ctx);

// Logs "cuDNN error <name> in <expr> at <file>:<line>" and aborts.
[[noreturn]] void Fatal(cudnnStatus_t status, const char* expr,
                        const char* file, int line);

#define KV_CUDNN_CHECK(expr)                                         \
  do {                                                               \
    const cudnnStatus_t kv_dnn_st_ = (expr);                         \
    if (kv_dnn_st_ != CUDNN_STATUS_SUCCESS) {                        \
      ::kvtrain::cudnn::Fatal(kv_dnn_st_, #expr, __FILE__, __LINE__); \
    }                                                                \
  } while (0)

// float32 NCHW tensor descriptor. Dimensions must fit in int (callers check
// with FitsInt first).
class TensorDesc {
 public:
  TensorDesc();
  ~TensorDesc();
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  void Set(int64_t n, int64_t c, int64_t h, int64_t w);
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDesc {
 public:
  FilterDesc();
  ~FilterDesc();
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  void Set(int64_t k, int64_t c, int64_t h, int64_t w);
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

// 2-D cross-correlation (what every framework calls convolution) in float32
// with plain FP32 math: no TF32, so results stay within float rounding of
// the reference kernels, as the cuBLAS handle is set up.
class ConvDesc {
 public:
  ConvDesc();
  ~ConvDesc();
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  void Set(int ph, int pw, int sh, int sw);
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

class PoolDesc {
 public:
  PoolDesc();
  ~PoolDesc();
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
  void Set(cudnnPoolingMode_t mode, int kh, int kw, int ph, int pw, int sh,
           int sw);
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

class ActDesc {
 public:
  ActDesc();
  ~ActDesc();
  ActDesc(const ActDesc&) = delete;
  ActDesc& operator=(const ActDesc&) = delete;
  void Set(cudnnActivationMode_t mode);
  cudnnActivationDescriptor_t get() const { return desc_; }

 private:
  cudnnActivationDescriptor_t desc_ = nullptr;
};

// alpha/beta scalars as cuDNN takes them: beta 1 adds to the destination
// (OpReq::kAdd), 0 overwrites it.
extern const float kOne;
extern const float kZero;
inline const float* Beta(bool add) { return add ? &kOne : &kZero; }

#endif  // KVTRAIN_CUDA

// True when every value fits cuDNN's int dimensions.
bool FitsInt(std::initializer_list<int64_t> dims);

}  // namespace cudnn
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_CUDNN_H_
