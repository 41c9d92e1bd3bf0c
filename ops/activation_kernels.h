// GPU kernels of Activation (compiled by nvcc from activation_op.cu).
#ifndef KVTRAIN_OPS_ACTIVATION_KERNELS_H_
#define KVTRAIN_OPS_ACTIVATION_KERNELS_H_

#include <cstdint>

namespace kvtrain {

// The activation functions, in the order of the act_type attribute.
enum class ActType : int { kRelu = 0, kSigmoid = 1, kTanh = 2, kSoftrelu = 3 };

namespace gpu {

// y = f(x) (or y += f(x) when `add`), on `stream` (a cudaStream_t).
void ActivationForward(ActType act, const float* x, float* y, int64_t n,
                       bool add, void* stream);
// dx = dy * f'(x), written from the output y = f(x) (dx += ... when `add`).
void ActivationBackward(ActType act, const float* y, const float* dy,
                        float* dx, int64_t n, bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_ACTIVATION_KERNELS_H_
