// GPU kernels of the parameterised elementwise ops (compiled by nvcc from
// unary_op.cu): LeakyReLU's leaky and elu, clip, and arithmetic with a
// scalar.
#ifndef KVTRAIN_OPS_UNARY_KERNELS_H_
#define KVTRAIN_OPS_UNARY_KERNELS_H_

#include <cstdint>

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

namespace gpu {

// y = f(x) (y += f(x) when `add`).
void UnaryForward(UnaryParams p, const float* x, float* y, int64_t n, bool add, void* stream);
// dx = dy * f'(x) (dx += ... when `add`).
void UnaryBackward(UnaryParams p, const float* x, const float* dy, float* dx, int64_t n,
                   bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_UNARY_KERNELS_H_
