// Activation GPU kernels: one grid-stride elementwise kernel per direction.
#include "ops/activation_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__device__ float Apply(ActType act, float x) {
  switch (act) {
    case ActType::kRelu:
      return x < 0.0f ? 0.0f : x;  // NaN stays NaN
    case ActType::kSigmoid:
      return 1.0f / (1.0f + expf(-x));
    case ActType::kTanh:
      return tanhf(x);
    default:
      return x > 20.0f ? x : log1pf(expf(x));
  }
}

// f'(x) written in terms of y = f(x).
__device__ float Slope(ActType act, float y) {
  switch (act) {
    case ActType::kRelu:
      return y > 0.0f ? 1.0f : 0.0f;
    case ActType::kSigmoid:
      return y * (1.0f - y);
    case ActType::kTanh:
      return 1.0f - y * y;
    default:
      return -expm1f(-y);
  }
}

__global__ void ForwardKernel(ActType act, const float* x, float* y, int64_t n,
                              bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = Apply(act, x[i]);
    y[i] = add ? y[i] + v : v;
  }
}

__global__ void BackwardKernel(ActType act, const float* y, const float* dy,
                               float* dx, int64_t n, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = dy[i] * Slope(act, y[i]);
    dx[i] = add ? dx[i] + g : g;
  }
}

int Blocks(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void ActivationForward(ActType act, const float* x, float* y, int64_t n,
                       bool add, void* stream) {
  if (n == 0) return;
  ForwardKernel<<<Blocks(n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      act, x, y, n, add);
  KV_CUDA_LAUNCH_CHECK();
}

void ActivationBackward(ActType act, const float* y, const float* dy,
                        float* dx, int64_t n, bool add, void* stream) {
  if (n == 0) return;
  BackwardKernel<<<Blocks(n, 256), 256, 0,
                   static_cast<cudaStream_t>(stream)>>>(act, y, dy, dx, n,
                                                        add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
