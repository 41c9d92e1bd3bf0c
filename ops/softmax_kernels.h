// GPU kernels of softmax (compiled by nvcc from softmax_op.cu): rows of
// `width` values, one thread per row.
#ifndef KVTRAIN_OPS_SOFTMAX_KERNELS_H_
#define KVTRAIN_OPS_SOFTMAX_KERNELS_H_

#include <cstdint>

namespace kvtrain {
namespace gpu {

// y = softmax(x / temperature) along each row, or its log with `log`
// (y += ... when `add`).
void SoftmaxForward(const float* x, float* y, int64_t rows, int64_t width, float temperature,
                    bool log, bool add, void* stream);
// dx = y * (dy - sum(dy * y)) / temperature along each row, with `log`
// (dy - exp(y) * sum(dy)) / temperature (dx += ...).
void SoftmaxBackward(const float* y, const float* dy, float* dx, int64_t rows, int64_t width,
                     float temperature, bool log, bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_SOFTMAX_KERNELS_H_
