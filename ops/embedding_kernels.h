// GPU kernels of Embedding (compiled by nvcc from embedding_op.cu).
#ifndef KVTRAIN_OPS_EMBEDDING_KERNELS_H_
#define KVTRAIN_OPS_EMBEDDING_KERNELS_H_

#include <cstdint>

namespace kvtrain {
namespace gpu {

// The indices are floats; each is clamped to a row of the (rows x dim)
// table: negative or NaN -> 0, >= rows -> rows - 1, fractions truncated.

// out (n x dim) = weight[idx[i], :] for each of the n indices (out += ...
// when `add`), on `stream` (a cudaStream_t).
void EmbeddingForward(const float* idx, int64_t n, const float* weight,
                      int64_t rows, int64_t dim, float* out, bool add,
                      void* stream);
// dweight[idx[i], :] += dout[i, :] for each i, with atomicAdd: rows named
// more than once are summed in no fixed order (float results may differ in
// the last bits from run to run).
void EmbeddingBackward(const float* idx, int64_t n, const float* dout,
                       int64_t rows, int64_t dim, float* dweight, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_EMBEDDING_KERNELS_H_
