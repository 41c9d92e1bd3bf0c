// Shared GPU kernels: the NaN/Inf count used by KVTRAIN_CHECK_NAN.
#include "ops/common_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__global__ void CountNonFiniteKernel(const float* x, int64_t n,
                                     unsigned long long* count) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    local += !isfinite(x[i]);
  }
  if (local) atomicAdd(count, local);
}

}  // namespace

int64_t CountNonFinite(const float* x, int64_t n, void* stream) {
  if (n == 0) return 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  unsigned long long* dev_count = nullptr;
  KV_CUDA_CHECK(cudaMallocAsync(&dev_count, sizeof(*dev_count), s));
  KV_CUDA_CHECK(cudaMemsetAsync(dev_count, 0, sizeof(*dev_count), s));
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 1024 ? want : 1024);
  CountNonFiniteKernel<<<blocks, threads, 0, s>>>(x, n, dev_count);
  KV_CUDA_LAUNCH_CHECK();
  unsigned long long host = 0;
  KV_CUDA_CHECK(cudaMemcpyAsync(&host, dev_count, sizeof(host),
                                cudaMemcpyDeviceToHost, s));
  KV_CUDA_CHECK(cudaFreeAsync(dev_count, s));
  KV_CUDA_CHECK(cudaStreamSynchronize(s));
  return static_cast<int64_t>(host);
}

}  // namespace gpu
}  // namespace kvtrain
