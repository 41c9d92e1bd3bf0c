// Elementwise binary GPU kernel.
#include "ops/elemwise_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__global__ void BinaryKernel(BinaryKind kind, const float* a, const float* b,
                             float* out, int64_t n, bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = kind == BinaryKind::kAdd   ? a[i] + b[i]
                    : kind == BinaryKind::kSub ? a[i] - b[i]
                                               : a[i] * b[i];
    out[i] = add ? out[i] + v : v;
  }
}

}  // namespace

void Binary(BinaryKind kind, const float* a, const float* b, float* out,
            int64_t n, bool add, void* stream) {
  if (n == 0) return;
  const int64_t want = (n + 255) / 256;
  const int blocks = static_cast<int>(want < 4096 ? want : 4096);
  BinaryKernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      kind, a, b, out, n, add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
