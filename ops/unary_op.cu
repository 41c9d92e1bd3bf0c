// LeakyReLU, clip and scalar arithmetic GPU kernels: one grid-stride elementwise kernel per
// direction.
#include "ops/unary_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__global__ void ForwardKernel(UnaryParams p, const float* x, float* y, int64_t n, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = UnaryApply(p, x[i]);
    y[i] = add ? y[i] + v : v;
  }
}

__global__ void BackwardKernel(UnaryParams p, const float* x, const float* dy, float* dx,
                               int64_t n, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = dy[i] * UnarySlope(p, x[i]);
    dx[i] = add ? dx[i] + g : g;
  }
}

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void UnaryForward(UnaryParams p, const float* x, float* y, int64_t n, bool add, void* stream) {
  if (n == 0) return;
  ForwardKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, x, y, n, add);
  KV_CUDA_LAUNCH_CHECK();
}

void UnaryBackward(UnaryParams p, const float* x, const float* dy, float* dx, int64_t n,
                   bool add, void* stream) {
  if (n == 0) return;
  BackwardKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, x, dy, dx, n,
                                                                           add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
