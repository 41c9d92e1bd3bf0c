// GPU kernels of the elementwise binary ops (nvcc, elemwise_op.cu).
#ifndef KVTRAIN_OPS_ELEMWISE_KERNELS_H_
#define KVTRAIN_OPS_ELEMWISE_KERNELS_H_

#include <cstdint>

namespace kvtrain {

enum class BinaryKind : int { kAdd = 0, kSub = 1, kMul = 2 };

namespace gpu {

// out (+)= a <kind> b over n elements, on `stream` (a cudaStream_t).
void Binary(BinaryKind kind, const float* a, const float* b, float* out,
            int64_t n, bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_ELEMWISE_KERNELS_H_
