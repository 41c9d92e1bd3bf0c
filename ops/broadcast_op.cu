// Broadcasting binary GPU kernels: one thread per output element; the
// backward pass adds each element's share into the input with atomicAdd.
#include "ops/broadcast_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__device__ void Offsets(const BroadcastGeometry& g, int64_t i, int64_t* l,
                        int64_t* r) {
  *l = 0;
  *r = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t c = i % g.dims[d];
    i /= g.dims[d];
    *l += c * g.lhs_stride[d];
    *r += c * g.rhs_stride[d];
  }
}

__global__ void ForwardKernel(BroadcastKind kind, BroadcastGeometry g,
                              const float* lhs, const float* rhs, float* out,
                              bool add) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < g.size; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t l, r;
    Offsets(g, i, &l, &r);
    const float v = BroadcastApply(kind, lhs[l], rhs[r]);
    out[i] = add ? out[i] + v : v;
  }
}

__global__ void BackwardKernel(BroadcastKind kind, BroadcastGeometry g,
                               int which, const float* lhs, const float* rhs,
                               const float* dy, float* dx) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < g.size; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t l, r;
    Offsets(g, i, &l, &r);
    const float p = lhs != nullptr
                        ? BroadcastPartial(kind, which, lhs[l], rhs[r])
                        : BroadcastPartial(kind, which, 0.0f, 1.0f);
    atomicAdd(dx + (which == 0 ? l : r), dy[i] * p);
  }
}

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

}  // namespace

void BroadcastForward(BroadcastKind kind, const BroadcastGeometry& g,
                      const float* lhs, const float* rhs, float* out, bool add,
                      void* stream) {
  if (g.size == 0) return;
  ForwardKernel<<<Blocks(g.size), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      kind, g, lhs, rhs, out, add);
  KV_CUDA_LAUNCH_CHECK();
}

void BroadcastBackward(BroadcastKind kind, const BroadcastGeometry& g,
                       int which, const float* lhs, const float* rhs,
                       const float* dy, float* d_input, void* stream) {
  if (g.size == 0) return;
  BackwardKernel<<<Blocks(g.size), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      kind, g, which, lhs, rhs, dy, d_input);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
