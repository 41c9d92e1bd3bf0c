// GPU kernels shared by operators and the executor (compiled by nvcc from
// common_kernels.cu). Plain pointers only, so nvcc needs no other header.
#ifndef KVTRAIN_OPS_COMMON_KERNELS_H_
#define KVTRAIN_OPS_COMMON_KERNELS_H_

#include <cstdint>

namespace kvtrain {
namespace gpu {

// Number of NaN/Inf elements among x[0, n); waits for the result on
// `stream` (a cudaStream_t).
int64_t CountNonFinite(const float* x, int64_t n, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_COMMON_KERNELS_H_
