// Pooling's geometry and GPU kernels (compiled by nvcc from pooling_op.cu).
#ifndef KVTRAIN_OPS_POOLING_KERNELS_H_
#define KVTRAIN_OPS_POOLING_KERNELS_H_

#include <cstdint>

namespace kvtrain {

enum class PoolType : int { kMax = 0, kAvg = 1 };

// One (batch, channel) plane. Windows are clipped to the input; average
// pooling divides by the full window size (padding counts as zeros).
struct PoolGeometry {
  int h = 0, w = 0;
  int kh = 0, kw = 0;
  int sh = 1, sw = 1;
  int ph = 0, pw = 0;
  int oh = 0, ow = 0;
};

namespace gpu {

// out (planes x oh x ow) = (or +=) pool(in (planes x h x w)).
void PoolForward(PoolType type, const PoolGeometry& geo, int64_t planes,
                 const float* in, float* out, bool add, void* stream);
// din = (or +=) the gradient; max pooling sends each window's gradient to
// its first maximal input, found by comparing `in` against `out`.
void PoolBackward(PoolType type, const PoolGeometry& geo, int64_t planes,
                  const float* in, const float* out, const float* dout,
                  float* din, bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_POOLING_KERNELS_H_
