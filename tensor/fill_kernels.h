// GPU fill kernels (compiled by nvcc from fill_kernels.cu).
#ifndef KVTRAIN_TENSOR_FILL_KERNELS_H_
#define KVTRAIN_TENSOR_FILL_KERNELS_H_

#include <cstdint>

namespace kvtrain {
namespace gpu {

// Sets n elements of `elem_bytes` (1, 4 or 8) each to the bit pattern of
// `pattern`, on `stream` (a cudaStream_t).
void FillPattern(void* data, int64_t n, int elem_bytes, uint64_t pattern,
                 void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_FILL_KERNELS_H_
