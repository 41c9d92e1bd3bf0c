// Local response normalisation across channels: the per-element formulas
// the CPU loop (lrn_op.cc) and the GPU kernels (lrn_op.cu) share.
#ifndef KVTRAIN_OPS_LRN_KERNELS_H_
#define KVTRAIN_OPS_LRN_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace kvtrain {

// data is (batch, channels, inner): element (b, c, p) at (b * channels + c)
// * inner + p. Channel c's window is [c - n/2, c - n/2 + n - 1], clipped.
struct LrnGeometry {
  int64_t batch = 0, channels = 0, inner = 0;
  int64_t nsize = 1;
  float alpha = 1e-4f, beta = 0.75f, knorm = 2.0f;
};

// knorm + alpha / n * the sum of squares over element i's channel window.
KV_HOST_DEVICE inline float LrnScale(const LrnGeometry& g, const float* x, int64_t i) {
  const int64_t c = (i / g.inner) % g.channels;
  const int64_t base = i - c * g.inner;
  int64_t lo = c - g.nsize / 2, hi = lo + g.nsize - 1;
  lo = lo < 0 ? 0 : lo;
  hi = hi >= g.channels ? g.channels - 1 : hi;
  float sum = 0.0f;
  for (int64_t j = lo; j <= hi; ++j) {
    const float v = x[base + j * g.inner];
    sum += v * v;
  }
  return g.knorm + g.alpha / static_cast<float>(g.nsize) * sum;
}

// d input at i: dy_i s_i^-beta minus 2 beta alpha / n x_i times the sum,
// over the channels j whose window holds i's channel, of dy_j x_j
// s_j^(-beta-1).
KV_HOST_DEVICE inline float LrnInputGrad(const LrnGeometry& g, const float* x, const float* s,
                                         const float* dy, int64_t i) {
  const int64_t c = (i / g.inner) % g.channels;
  const int64_t base = i - c * g.inner;
  int64_t lo = c - (g.nsize - 1 - g.nsize / 2), hi = c + g.nsize / 2;
  lo = lo < 0 ? 0 : lo;
  hi = hi >= g.channels ? g.channels - 1 : hi;
  float acc = 0.0f;
  for (int64_t j = lo; j <= hi; ++j) {
    const int64_t k = base + j * g.inner;
    acc += dy[k] * x[k] * powf(s[k], -g.beta - 1.0f);
  }
  return dy[i] * powf(s[i], -g.beta) -
         2.0f * g.beta * g.alpha / static_cast<float>(g.nsize) * x[i] * acc;
}

namespace gpu {

// out = x * scale^-beta, scale kept for Backward (add: out += instead).
void LrnForward(const LrnGeometry& g, const float* x, float* scale, float* out, bool add,
                void* stream);
// dx (+)= the input gradient.
void LrnBackward(const LrnGeometry& g, const float* x, const float* scale, const float* dy,
                 float* dx, bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_LRN_KERNELS_H_
