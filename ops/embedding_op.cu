// Embedding GPU kernels: a grid-stride gather and an atomicAdd scatter.
#include "ops/embedding_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

// The row an index names, clamped into [0, rows). rows <= 2^24 (the op's
// limit), so float(rows) is exact.
__device__ int64_t Row(float v, int64_t rows) {
  if (!(v > 0.0f)) return 0;  // negative, zero or NaN
  if (v >= static_cast<float>(rows)) return rows - 1;
  return static_cast<int64_t>(v);
}

__global__ void GatherKernel(const float* idx, int64_t n, const float* weight,
                             int64_t rows, int64_t dim, float* out, bool add) {
  const int64_t total = n * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < total; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / dim;
    const float v = weight[Row(idx[i], rows) * dim + (e - i * dim)];
    out[e] = add ? out[e] + v : v;
  }
}

__global__ void ScatterKernel(const float* idx, int64_t n, const float* dout,
                              int64_t rows, int64_t dim, float* dweight) {
  const int64_t total = n * dim;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       e < total; e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / dim;
    atomicAdd(dweight + Row(idx[i], rows) * dim + (e - i * dim), dout[e]);
  }
}

int Blocks(int64_t n, int threads) {
  const int64_t want = (n + threads - 1) / threads;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void EmbeddingForward(const float* idx, int64_t n, const float* weight,
                      int64_t rows, int64_t dim, float* out, bool add,
                      void* stream) {
  if (n == 0 || dim == 0) return;
  GatherKernel<<<Blocks(n * dim, 256), 256, 0,
                 static_cast<cudaStream_t>(stream)>>>(idx, n, weight, rows, dim,
                                                      out, add);
  KV_CUDA_LAUNCH_CHECK();
}

void EmbeddingBackward(const float* idx, int64_t n, const float* dout,
                       int64_t rows, int64_t dim, float* dweight,
                       void* stream) {
  if (n == 0 || dim == 0) return;
  ScatterKernel<<<Blocks(n * dim, 256), 256, 0,
                  static_cast<cudaStream_t>(stream)>>>(idx, n, dout, rows, dim,
                                                       dweight);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
