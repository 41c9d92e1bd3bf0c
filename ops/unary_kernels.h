// GPU kernels of the parameterised elementwise ops (compiled by nvcc from
// unary_op.cu): LeakyReLU's leaky and elu, and clip.
#ifndef KVTRAIN_OPS_UNARY_KERNELS_H_
#define KVTRAIN_OPS_UNARY_KERNELS_H_

#include <cstdint>

namespace kvtrain {

enum class UnaryKind : int { kLeaky = 0, kElu = 1, kClip = 2 };

// The op's numbers: slope (leaky, elu) or the bounds (clip).
struct UnaryParams {
  UnaryKind kind = UnaryKind::kLeaky;
  float a = 0.25f;  // slope, or clip's a_min
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
