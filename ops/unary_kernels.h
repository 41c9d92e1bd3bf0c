// GPU kernels of the parameterised elementwise ops (compiled by nvcc from
// unary_op.cu): LeakyReLU's leaky and elu, clip, and arithmetic with a
// scalar.
#ifndef KVTRAIN_OPS_UNARY_KERNELS_H_
#define KVTRAIN_OPS_UNARY_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace kvtrain {

enum class UnaryKind : int {
  kLeaky = 0,
  kElu = 1,
  kClip = 2,
  kPlus = 3,    // x + a
  kMinus = 4,   // x - a
  kRMinus = 5,  // a - x
  kMul = 6,     // x * a
  kDiv = 7,     // x / a
  kRDiv = 8,    // a / x
};

// The op's numbers: slope (leaky, elu), the bounds (clip) or the scalar.
struct UnaryParams {
  UnaryKind kind = UnaryKind::kLeaky;
  float a = 0.25f;  // slope, clip's a_min or the scalar
  float b = 0.0f;   // clip's a_max
};

// f(x) and f'(x): the CPU and GPU paths share them.
KV_HOST_DEVICE inline float UnaryApply(const UnaryParams& p, float x) {
  switch (p.kind) {
    case UnaryKind::kLeaky:
      return x > 0.0f ? x : p.a * x;
    case UnaryKind::kElu:
      return x > 0.0f ? x : p.a * expm1f(x);
    case UnaryKind::kClip:
      return fminf(fmaxf(x, p.a), p.b);
    case UnaryKind::kPlus:
      return x + p.a;
    case UnaryKind::kMinus:
      return x - p.a;
    case UnaryKind::kRMinus:
      return p.a - x;
    case UnaryKind::kMul:
      return x * p.a;
    case UnaryKind::kDiv:
      return x / p.a;
    default:
      return p.a / x;
  }
}

KV_HOST_DEVICE inline float UnarySlope(const UnaryParams& p, float x) {
  switch (p.kind) {
    case UnaryKind::kLeaky:
      return x > 0.0f ? 1.0f : p.a;
    case UnaryKind::kElu:
      return x > 0.0f ? 1.0f : p.a * expf(x);
    case UnaryKind::kClip:
      return x >= p.a && x <= p.b ? 1.0f : 0.0f;
    case UnaryKind::kPlus:
    case UnaryKind::kMinus:
      return 1.0f;
    case UnaryKind::kRMinus:
      return -1.0f;
    case UnaryKind::kMul:
      return p.a;
    case UnaryKind::kDiv:
      return 1.0f / p.a;
    default:
      return -p.a / (x * x);
  }
}

namespace gpu {

// y = f(x) (y += f(x) when `add`).
void UnaryForward(UnaryParams p, const float* x, float* y, int64_t n, bool add,
                  void* stream);
// dx = dy * f'(x) (dx += ... when `add`).
void UnaryBackward(UnaryParams p, const float* x, const float* dy, float* dx,
                   int64_t n, bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_UNARY_KERNELS_H_
