// Fills device memory with a repeated 1-, 4- or 8-byte pattern.
#include "tensor/cuda_check.h"
#include "tensor/fill_kernels.h"

namespace kvtrain {
namespace gpu {
namespace {

template <typename T>
__global__ void FillKernel(T* data, int64_t n, T value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
}

template <typename T>
void Launch(void* data, int64_t n, T value, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = 256;
  const int64_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
  FillKernel<T><<<blocks, threads, 0, stream>>>(static_cast<T*>(data), n, value);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace

void FillPattern(void* data, int64_t n, int elem_bytes, uint64_t pattern,
                 void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (elem_bytes) {
    case 1:
      Launch<uint8_t>(data, n, static_cast<uint8_t>(pattern), s);
      break;
    case 4:
      Launch<uint32_t>(data, n, static_cast<uint32_t>(pattern), s);
      break;
    default:
      Launch<uint64_t>(data, n, pattern, s);
      break;
  }
}

}  // namespace gpu
}  // namespace kvtrain
