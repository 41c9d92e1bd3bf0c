// LRN GPU kernels: one thread per element; the scale is written in a first
// pass (the gradient reads it at neighbouring channels).
#include "ops/lrn_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__global__ void ScaleKernel(LrnGeometry g, int64_t n, const float* x, float* scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    scale[i] = LrnScale(g, x, i);
  }
}

__global__ void OutputKernel(LrnGeometry g, int64_t n, const float* x, const float* scale,
                             float* out, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i] * powf(scale[i], -g.beta);
    out[i] = add ? out[i] + v : v;
  }
}

__global__ void GradKernel(LrnGeometry g, int64_t n, const float* x, const float* scale,
                           const float* dy, float* dx, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = LrnInputGrad(g, x, scale, dy, i);
    dx[i] = add ? dx[i] + v : v;
  }
}

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void LrnForward(const LrnGeometry& g, const float* x, float* scale, float* out, bool add,
                void* stream) {
  const int64_t n = g.batch * g.channels * g.inner;
  if (n == 0) return;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ScaleKernel<<<Blocks(n), 256, 0, s>>>(g, n, x, scale);
  KV_CUDA_LAUNCH_CHECK();
  if (out == nullptr) return;
  OutputKernel<<<Blocks(n), 256, 0, s>>>(g, n, x, scale, out, add);
  KV_CUDA_LAUNCH_CHECK();
}

void LrnBackward(const LrnGeometry& g, const float* x, const float* scale, const float* dy,
                 float* dx, bool add, void* stream) {
  const int64_t n = g.batch * g.channels * g.inner;
  if (n == 0) return;
  GradKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(g, n, x, scale, dy, dx,
                                                                        add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
