// SoftmaxOutput GPU kernels: one thread per row (class counts are small).
#include "ops/softmax_output_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

__global__ void SoftmaxKernel(const float* x, int64_t rows, int64_t classes,
                              float* prob) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       r < rows; r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float* in = x + r * classes;
    float* out = prob + r * classes;
    float m = in[0];
    for (int64_t c = 1; c < classes; ++c) m = fmaxf(m, in[c]);
    float sum = 0.0f;
    for (int64_t c = 0; c < classes; ++c) {
      out[c] = expf(in[c] - m);
      sum += out[c];
    }
    for (int64_t c = 0; c < classes; ++c) out[c] /= sum;
  }
}

__global__ void GradKernel(const float* prob, const float* label, int64_t rows,
                           int64_t classes, float scale, bool use_ignore,
                           float ignore_label, float* dx, bool add) {
  const int64_t total = rows * classes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / classes, c = i % classes;
    const float l = label[r];
    float g = 0.0f;
    if (!(use_ignore && l == ignore_label)) {
      g = scale * (prob[i] - (static_cast<int64_t>(l) == c ? 1.0f : 0.0f));
    }
    dx[i] = add ? dx[i] + g : g;
  }
}

__global__ void CountKernel(const float* label, int64_t rows, int64_t classes,
                            bool use_ignore, float ignore_label,
                            unsigned long long* counts) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       r < rows; r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float l = label[r];
    if (use_ignore && l == ignore_label) continue;
    atomicAdd(&counts[0], 1ull);
    if (!(l >= 0.0f && l < static_cast<float>(classes))) {
      atomicAdd(&counts[1], 1ull);
    }
  }
}

}  // namespace

void SoftmaxRows(const float* x, int64_t rows, int64_t classes, float* prob,
                 void* stream) {
  SoftmaxKernel<<<Blocks(rows), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      x, rows, classes, prob);
  KV_CUDA_LAUNCH_CHECK();
}

void SoftmaxGrad(const float* prob, const float* label, int64_t rows,
                 int64_t classes, float scale, bool use_ignore,
                 float ignore_label, float* dx, bool add, void* stream) {
  GradKernel<<<Blocks(rows * classes), 256, 0,
               static_cast<cudaStream_t>(stream)>>>(
      prob, label, rows, classes, scale, use_ignore, ignore_label, dx, add);
  KV_CUDA_LAUNCH_CHECK();
}

void CountLabels(const float* label, int64_t rows, int64_t classes,
                 bool use_ignore, float ignore_label, int64_t* valid,
                 int64_t* bad, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  unsigned long long* counts = nullptr;
  KV_CUDA_CHECK(cudaMallocAsync(&counts, 2 * sizeof(*counts), s));
  KV_CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * sizeof(*counts), s));
  CountKernel<<<Blocks(rows), 256, 0, s>>>(label, rows, classes, use_ignore,
                                           ignore_label, counts);
  KV_CUDA_LAUNCH_CHECK();
  unsigned long long host[2] = {0, 0};
  KV_CUDA_CHECK(cudaMemcpyAsync(host, counts, sizeof(host),
                                cudaMemcpyDeviceToHost, s));
  KV_CUDA_CHECK(cudaFreeAsync(counts, s));
  KV_CUDA_CHECK(cudaStreamSynchronize(s));
  *valid = static_cast<int64_t>(host[0]);
  *bad = static_cast<int64_t>(host[1]);
}

}  // namespace gpu
}  // namespace kvtrain
