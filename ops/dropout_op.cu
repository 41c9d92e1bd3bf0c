// Dropout GPU kernels.
#include "ops/dropout_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

__global__ void ForwardKernel(const float* x, float* y, float* mask, int64_t n,
                              float p, uint64_t stream_id, bool add) {
  const float scale = 1.0f / (1.0f - p);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float m = DropoutUniform(stream_id, i) >= p ? scale : 0.0f;
    mask[i] = m;
    y[i] = add ? y[i] + x[i] * m : x[i] * m;
  }
}

__global__ void BackwardKernel(const float* dy, const float* mask, float* dx,
                               int64_t n, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = dy[i] * mask[i];
    dx[i] = add ? dx[i] + g : g;
  }
}

}  // namespace

void DropoutForward(const float* x, float* y, float* mask, int64_t n, float p,
                    uint64_t stream_id, bool add, void* stream) {
  if (n == 0) return;
  ForwardKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      x, y, mask, n, p, stream_id, add);
  KV_CUDA_LAUNCH_CHECK();
}

void DropoutBackward(const float* dy, const float* mask, float* dx, int64_t n,
                     bool add, void* stream) {
  if (n == 0) return;
  BackwardKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      dy, mask, dx, n, add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
