// Pooling GPU kernels: one thread per output (forward) or per input element
// (backward, which scans the windows covering it; no atomics).
#include "ops/pooling_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

// The window of output (oy, ox), clipped to the input.
struct Window {
  int y0, y1, x0, x1;
};

__device__ Window WindowOf(const PoolGeometry& g, int oy, int ox) {
  Window win;
  const int ys = oy * g.sh - g.ph, xs = ox * g.sw - g.pw;
  win.y0 = max(ys, 0);
  win.y1 = min(ys + g.kh, g.h);
  win.x0 = max(xs, 0);
  win.x1 = min(xs + g.kw, g.w);
  return win;
}

__global__ void ForwardKernel(PoolType type, PoolGeometry g, int64_t planes,
                              const float* in, float* out, bool add) {
  const int64_t total = planes * g.oh * g.ow;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (g.oh * g.ow);
    const int oy = static_cast<int>((i / g.ow) % g.oh);
    const int ox = static_cast<int>(i % g.ow);
    const float* src = in + plane * g.h * g.w;
    const Window win = WindowOf(g, oy, ox);
    float v = type == PoolType::kMax ? -INFINITY : 0.0f;
    for (int y = win.y0; y < win.y1; ++y) {
      for (int x = win.x0; x < win.x1; ++x) {
        const float s = src[y * g.w + x];
        v = type == PoolType::kMax ? fmaxf(v, s) : v + s;
      }
    }
    if (type == PoolType::kAvg) v /= static_cast<float>(g.kh * g.kw);
    if (win.y0 >= win.y1 || win.x0 >= win.x1) v = 0.0f;
    out[i] = add ? out[i] + v : v;
  }
}

__global__ void BackwardKernel(PoolType type, PoolGeometry g, int64_t planes,
                               const float* in, const float* out,
                               const float* dout, float* din, bool add) {
  const int64_t total = planes * g.h * g.w;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (g.h * g.w);
    const int y = static_cast<int>((i / g.w) % g.h);
    const int x = static_cast<int>(i % g.w);
    const float* src = in + plane * g.h * g.w;
    const int64_t obase = plane * g.oh * g.ow;
    // Outputs whose window covers (y, x).
    const int oy0 = max(0, (y + g.ph - g.kh + g.sh) / g.sh);
    const int oy1 = min(g.oh - 1, (y + g.ph) / g.sh);
    const int ox0 = max(0, (x + g.pw - g.kw + g.sw) / g.sw);
    const int ox1 = min(g.ow - 1, (x + g.pw) / g.sw);
    float sum = 0.0f;
    for (int oy = oy0; oy <= oy1; ++oy) {
      for (int ox = ox0; ox <= ox1; ++ox) {
        const int64_t o = obase + oy * g.ow + ox;
        if (type == PoolType::kAvg) {
          sum += dout[o] / static_cast<float>(g.kh * g.kw);
          continue;
        }
        // Is (y, x) the first maximal element of this window?
        const Window win = WindowOf(g, oy, ox);
        int first = -1;
        for (int wy = win.y0; wy < win.y1 && first < 0; ++wy) {
          for (int wx = win.x0; wx < win.x1; ++wx) {
            if (src[wy * g.w + wx] == out[o]) {
              first = wy * g.w + wx;
              break;
            }
          }
        }
        if (first == y * g.w + x) sum += dout[o];
      }
    }
    din[i] = add ? din[i] + sum : sum;
  }
}

}  // namespace

void PoolForward(PoolType type, const PoolGeometry& geo, int64_t planes,
                 const float* in, float* out, bool add, void* stream) {
  ForwardKernel<<<Blocks(planes * geo.oh * geo.ow), 256, 0,
                  static_cast<cudaStream_t>(stream)>>>(type, geo, planes, in,
                                                       out, add);
  KV_CUDA_LAUNCH_CHECK();
}

void PoolBackward(PoolType type, const PoolGeometry& geo, int64_t planes,
                  const float* in, const float* out, const float* dout,
                  float* din, bool add, void* stream) {
  BackwardKernel<<<Blocks(planes * geo.h * geo.w), 256, 0,
                   static_cast<cudaStream_t>(stream)>>>(type, geo, planes, in,
                                                        out, dout, din, add);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
