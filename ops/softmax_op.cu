// softmax and log_softmax GPU kernels: one thread per row of the last axis.
#include "ops/softmax_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__global__ void ForwardKernel(const float* x, float* y, int64_t rows, int64_t width,
                              float inv_t, bool log, bool add) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* xr = x + r * width;
    float* yr = y + r * width;
    float m = xr[0];
    for (int64_t j = 1; j < width; ++j) m = fmaxf(m, xr[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < width; ++j) sum += expf((xr[j] - m) * inv_t);
    const float inv = 1.0f / sum;
    const float log_sum = logf(sum);
    for (int64_t j = 0; j < width; ++j) {
      const float v = log ? (xr[j] - m) * inv_t - log_sum : expf((xr[j] - m) * inv_t) * inv;
      yr[j] = add ? yr[j] + v : v;
    }
  }
}

__global__ void BackwardKernel(const float* y, const float* dy, float* dx, int64_t rows,
                               int64_t width, float inv_t, bool log, bool add) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* yr = y + r * width;
    const float* gr = dy + r * width;
    float* dr = dx + r * width;
    float dot = 0.0f;
    for (int64_t j = 0; j < width; ++j) dot += log ? gr[j] : gr[j] * yr[j];
    for (int64_t j = 0; j < width; ++j) {
      const float g = log ? (gr[j] - expf(yr[j]) * dot) * inv_t : yr[j] * (gr[j] - dot) * inv_t;
      dr[j] = add ? dr[j] + g : g;
    }
  }
}

int Blocks(int64_t n) {
  const int64_t want = (n + 127) / 128;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void SoftmaxForward(const float* x, float* y, int64_t rows, int64_t width, float temperature,
                    bool log, bool add, void* stream) {
  if (rows == 0 || width == 0) return;
  ForwardKernel<<<Blocks(rows), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      x, y, rows, width, 1.0f / temperature, log, add);
  KV_CUDA_LAUNCH_CHECK();
}

void SoftmaxBackward(const float* y, const float* dy, float* dx, int64_t rows, int64_t width,
                     float temperature, bool log, bool add, void* stream) {
  if (rows == 0 || width == 0) return;
  BackwardKernel<<<Blocks(rows), 128, 0, static_cast<cudaStream_t>(stream)>>>(
      y, dy, dx, rows, width, 1.0f / temperature, log, add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
