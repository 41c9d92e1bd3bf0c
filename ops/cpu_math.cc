// Branch-free exp/tanh/sigmoid loops the compiler vectorises; target_clones
// builds each for AVX-512, AVX2 and the baseline and dispatches at load time.
// `#pragma GCC ivdep`: in-place calls (y == x) carry no dependence between
// iterations, so the vector loop must not fall back to scalar on overlap.
#include "ops/cpu_math.h"

#include <cmath>
#include <cstring>

namespace kvtrain {
namespace cpu_math {
namespace {

// exp(v): v = k ln2 + r with |r| <= ln2/2, exp(r) by its Taylor series to
// r^7 (relative error below 2e-8 on that range), scaled by 2^k through the
// exponent bits.
__attribute__((always_inline)) inline float ExpScalar(float v) {
  v = v < -87.0f ? -87.0f : (v > 88.0f ? 88.0f : v);
  // Round to nearest (the default mode); vectorises where floor() does not.
  const float k = std::nearbyint(v * 1.44269504089f);
  // ln2 split in two so r keeps its low bits.
  float r = v - k * 0.693359375f;
  r = r + k * 2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

}  // namespace

KV_MULTI_ISA void Exp(const float* x, float* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = ExpScalar(x[i]);
}

KV_MULTI_ISA void Tanh(const float* x, float* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float a = std::fabs(v);
    // Near zero the odd series avoids the cancellation in e^2a - 1.
    const float a2 = a * a;
    const float series =
        a * (1.0f + a2 * (-1.0f / 3 + a2 * (2.0f / 15 + a2 * (-17.0f / 315))));
    const float e = ExpScalar(2.0f * (a > 9.0f ? 9.0f : a));
    const float big = (e - 1.0f) / (e + 1.0f);
    const float t = a < 0.125f ? series : big;
    y[i] = v < 0 ? -t : t;
  }
}

KV_MULTI_ISA void Sigmoid(const float* x, float* y, int64_t n) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + ExpScalar(-x[i]));
}

}  // namespace cpu_math
}  // namespace kvtrain
