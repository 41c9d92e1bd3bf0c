// Checked CUDA and cuBLAS calls. Every call prints the error string and
// file:line when it fails. Include only from GPU code (needs CUDA headers);
// .cu files may include it too.
#ifndef KVTRAIN_TENSOR_CUDA_CHECK_H_
#define KVTRAIN_TENSOR_CUDA_CHECK_H_

#ifdef KVTRAIN_CUDA

#include <cuda_runtime.h>

namespace kvtrain {

// Logs "CUDA error <what> in <expr> at <file>:<line>" and aborts. Used where
// a failure means the device is in an unknown state (a failed kernel, copy or
// sync); recoverable failures (allocation) return a Status instead.
[[noreturn]] void CudaFatal(const char* what, const char* expr,
                            const char* file, int line);

// The cuBLAS status name, e.g. "CUBLAS_STATUS_INVALID_VALUE".
const char* CublasStatusName(int status);

}  // namespace kvtrain

#define KV_CUDA_CHECK(expr)                                                \
  do {                                                                     \
    const cudaError_t kv_err_ = (expr);                                    \
    if (kv_err_ != cudaSuccess) {                                          \
      ::kvtrain::CudaFatal(cudaGetErrorString(kv_err_), #expr, __FILE__,   \
                           __LINE__);                                      \
    }                                                                      \
  } while (0)

// After a kernel launch: reports launch-configuration errors at the launch.
#define KV_CUDA_LAUNCH_CHECK() KV_CUDA_CHECK(cudaGetLastError())

#define KV_CUBLAS_CHECK(expr)                                              \
  do {                                                                     \
    const int kv_st_ = static_cast<int>(expr);                             \
    if (kv_st_ != 0) {                                                     \
      ::kvtrain::CudaFatal(::kvtrain::CublasStatusName(kv_st_), #expr,     \
                           __FILE__, __LINE__);                            \
    }                                                                      \
  } while (0)

#define KV_CUDA_STREAM(ctx) static_cast<cudaStream_t>((ctx)->stream())

#endif  // KVTRAIN_CUDA
#endif  // KVTRAIN_TENSOR_CUDA_CHECK_H_
