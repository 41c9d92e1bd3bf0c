// BatchNorm GPU kernels: one block per channel for the reductions.
#include "ops/batch_norm_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

constexpr int kThreads = 256;

// Sum of `v` over the block (every thread gets it).
__device__ float BlockSum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

// Element j of channel c: batch j / s, position j % s.
__device__ int64_t Index(const BatchNormDims& d, int64_t c, int64_t j) {
  return ((j / d.s) * d.c + c) * d.s + j % d.s;
}

__global__ void StatsKernel(BatchNormDims d, const float* x, float* mean,
                            float* var) {
  __shared__ float shared[kThreads];
  const int64_t c = blockIdx.x, m = d.n * d.s;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) sum += x[Index(d, c, j)];
  const float mu = BlockSum(sum, shared) / m;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const float v = x[Index(d, c, j)] - mu;
    sq += v * v;
  }
  const float variance = BlockSum(sq, shared) / m;
  if (threadIdx.x == 0) {
    mean[c] = mu;
    var[c] = variance;
  }
}

__global__ void FinishKernel(int64_t channels, const float* var, float eps,
                             float momentum, const float* mean, float* invstd,
                             float* moving_mean, float* moving_var) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       c < channels; c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = var[c];  // var may alias invstd
    invstd[c] = rsqrtf(v + eps);
    if (momentum >= 0.0f) {
      moving_mean[c] = momentum * moving_mean[c] + (1.0f - momentum) * mean[c];
      moving_var[c] = momentum * moving_var[c] + (1.0f - momentum) * v;
    }
  }
}

__global__ void UpdateMovingKernel(int64_t channels, const float* mean,
                                   const float* invstd, float eps,
                                   float momentum, float* moving_mean,
                                   float* moving_var) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       c < channels; c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = fmaxf(1.0f / (invstd[c] * invstd[c]) - eps, 0.0f);
    moving_mean[c] = momentum * moving_mean[c] + (1.0f - momentum) * mean[c];
    moving_var[c] = momentum * moving_var[c] + (1.0f - momentum) * v;
  }
}

__global__ void ForwardKernel(BatchNormDims d, const float* x,
                              const float* mean, const float* invstd,
                              const float* gamma, const float* beta, float* y,
                              bool add) {
  const int64_t total = d.n * d.c * d.s;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / d.s) % d.c;
    const float g = gamma ? gamma[c] : 1.0f;
    const float v = g * (x[i] - mean[c]) * invstd[c] + beta[c];
    y[i] = add ? y[i] + v : v;
  }
}

__global__ void BackwardKernel(BatchNormDims d, const float* x,
                               const float* dy, const float* mean,
                               const float* invstd, const float* gamma,
                               bool batch_stats, float* dgamma, float* dbeta,
                               float* dx, bool add_dx) {
  __shared__ float shared[kThreads];
  const int64_t c = blockIdx.x, m = d.n * d.s;
  float sdy = 0.0f, sdyx = 0.0f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const int64_t i = Index(d, c, j);
    sdy += dy[i];
    sdyx += dy[i] * (x[i] - mean[c]) * invstd[c];
  }
  const float db = BlockSum(sdy, shared);
  const float dg = BlockSum(sdyx, shared);
  if (threadIdx.x == 0) {
    if (dbeta) dbeta[c] = db;
    if (dgamma) dgamma[c] = dg;
  }
  if (dx == nullptr) return;
  const float g = gamma ? gamma[c] : 1.0f;
  for (int64_t j = threadIdx.x; j < m; j += blockDim.x) {
    const int64_t i = Index(d, c, j);
    float v = dy[i];
    if (batch_stats) v -= (db + (x[i] - mean[c]) * invstd[c] * dg) / m;
    v *= g * invstd[c];
    dx[i] = add_dx ? dx[i] + v : v;
  }
}

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void BatchNormStats(const BatchNormDims& d, const float* x, float* mean,
                    float* var, void* stream) {
  StatsKernel<<<static_cast<int>(d.c), kThreads, 0,
                static_cast<cudaStream_t>(stream)>>>(d, x, mean, var);
  KV_CUDA_LAUNCH_CHECK();
}

void BatchNormFinishStats(int64_t c, const float* var, float eps,
                          float momentum, const float* mean, float* invstd,
                          float* moving_mean, float* moving_var,
                          void* stream) {
  FinishKernel<<<Blocks(c), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      c, var, eps, momentum, mean, invstd, moving_mean, moving_var);
  KV_CUDA_LAUNCH_CHECK();
}

void BatchNormUpdateMoving(int64_t c, const float* mean, const float* invstd,
                           float eps, float momentum, float* moving_mean,
                           float* moving_var, void* stream) {
  UpdateMovingKernel<<<Blocks(c), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      c, mean, invstd, eps, momentum, moving_mean, moving_var);
  KV_CUDA_LAUNCH_CHECK();
}

void BatchNormForward(const BatchNormDims& d, const float* x,
                      const float* mean, const float* invstd,
                      const float* gamma, const float* beta, float* y,
                      bool add, void* stream) {
  ForwardKernel<<<Blocks(d.n * d.c * d.s), 256, 0,
                  static_cast<cudaStream_t>(stream)>>>(d, x, mean, invstd,
                                                       gamma, beta, y, add);
  KV_CUDA_LAUNCH_CHECK();
}

void BatchNormBackward(const BatchNormDims& d, const float* x,
                       const float* dy, const float* mean,
                       const float* invstd, const float* gamma,
                       bool batch_stats, float* dgamma, float* dbeta,
                       float* dx, bool add_dx, void* stream) {
  BackwardKernel<<<static_cast<int>(d.c), kThreads, 0,
                   static_cast<cudaStream_t>(stream)>>>(
      d, x, dy, mean, invstd, gamma, batch_stats, dgamma, dbeta, dx, add_dx);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
