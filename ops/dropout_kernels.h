// Dropout's mask hash (shared by CPU and GPU so both draw the same mask) and
// its GPU kernels (compiled by nvcc from dropout_op.cu).
#ifndef KVTRAIN_OPS_DROPOUT_KERNELS_H_
#define KVTRAIN_OPS_DROPOUT_KERNELS_H_

#include <cstdint>

#include "ops/host_device.h"

namespace kvtrain {

// A uniform number in [0, 1) for element i of the call with this `stream_id`
// (a per-op seed mixed with the call count): counter-based, so any thread on
// any device draws the same value.
KV_HOST_DEVICE inline float DropoutUniform(uint64_t stream_id, uint64_t i) {
  uint64_t z = stream_id + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

namespace gpu {

// mask[i] = keep ? 1 / (1 - p) : 0 with keep = uniform >= p; y (+)= x * mask.
void DropoutForward(const float* x, float* y, float* mask, int64_t n, float p,
                    uint64_t stream_id, bool add, void* stream);
// dx (+)= dy * mask.
void DropoutBackward(const float* dy, const float* mask, float* dx, int64_t n,
                     bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_DROPOUT_KERNELS_H_
