// GPU kernels of the broadcasting binary ops (compiled by nvcc from
// broadcast_op.cu).
#ifndef KVTRAIN_OPS_BROADCAST_KERNELS_H_
#define KVTRAIN_OPS_BROADCAST_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace kvtrain {

// kLeft is broadcast_to / broadcast_axis: the output repeats lhs (there is
// no rhs). The comparisons give 1 or 0 and pass no gradient, as MXNet's.
enum class BroadcastKind : int {
  kAdd = 0,
  kSub = 1,
  kMul = 2,
  kDiv = 3,
  kMaximum = 4,
  kMinimum = 5,
  kPower = 6,
  kEqual = 7,
  kNotEqual = 8,
  kGreater = 9,
  kGreaterEqual = 10,
  kLesser = 11,
  kLesserEqual = 12,
  kLeft = 13,
};

// Whether the gradient of `kind` reads the inputs' values.
KV_HOST_DEVICE inline bool BroadcastGradientReads(BroadcastKind kind) {
  return kind == BroadcastKind::kMul || kind == BroadcastKind::kDiv ||
         kind == BroadcastKind::kMaximum || kind == BroadcastKind::kMinimum ||
         kind == BroadcastKind::kPower;
}

// a <kind> b, and its partial derivative by a (which 0) or b (which 1):
// the CPU and GPU paths share them.
KV_HOST_DEVICE inline float BroadcastApply(BroadcastKind kind, float a,
                                           float b) {
  switch (kind) {
    case BroadcastKind::kAdd:
      return a + b;
    case BroadcastKind::kSub:
      return a - b;
    case BroadcastKind::kMul:
      return a * b;
    case BroadcastKind::kDiv:
      return a / b;
    case BroadcastKind::kMaximum:
      return a > b ? a : b;
    case BroadcastKind::kMinimum:
      return a < b ? a : b;
    case BroadcastKind::kPower:
      return powf(a, b);
    case BroadcastKind::kEqual:
      return a == b ? 1.0f : 0.0f;
    case BroadcastKind::kNotEqual:
      return a != b ? 1.0f : 0.0f;
    case BroadcastKind::kGreater:
      return a > b ? 1.0f : 0.0f;
    case BroadcastKind::kGreaterEqual:
      return a >= b ? 1.0f : 0.0f;
    case BroadcastKind::kLesser:
      return a < b ? 1.0f : 0.0f;
    case BroadcastKind::kLesserEqual:
      return a <= b ? 1.0f : 0.0f;
    default:
      return a;
  }
}

// maximum's gradient goes to lhs where a >= b, else to rhs (minimum: where
// a <= b), as MXNet's; the power's by b is a^b ln a.
KV_HOST_DEVICE inline float BroadcastPartial(BroadcastKind kind, int which,
                                             float a, float b) {
  switch (kind) {
    case BroadcastKind::kAdd:
      return 1.0f;
    case BroadcastKind::kSub:
      return which == 0 ? 1.0f : -1.0f;
    case BroadcastKind::kMul:
      return which == 0 ? b : a;
    case BroadcastKind::kDiv:
      return which == 0 ? 1.0f / b : -a / (b * b);
    case BroadcastKind::kMaximum:
      return (which == 0) == (a >= b) ? 1.0f : 0.0f;
    case BroadcastKind::kMinimum:
      return (which == 0) == (a <= b) ? 1.0f : 0.0f;
    case BroadcastKind::kPower:
      return which == 0 ? b * powf(a, b - 1.0f) : powf(a, b) * logf(a);
    case BroadcastKind::kLeft:
      return which == 0 ? 1.0f : 0.0f;
    default:
      return 0.0f;
  }
}

// The output's shape and, per output dimension, each input's stride (0
// along a dimension the input has as 1): output element i reads lhs and
// rhs at the sums of its coordinates times these strides.
struct BroadcastGeometry {
  static constexpr int kMaxDims = 8;
  int ndim = 0;
  int64_t dims[kMaxDims] = {};
  int64_t lhs_stride[kMaxDims] = {};
  int64_t rhs_stride[kMaxDims] = {};
  int64_t size = 0;  // output elements
};

namespace gpu {

// out (+)= lhs <kind> rhs, broadcast.
void BroadcastForward(BroadcastKind kind, const BroadcastGeometry& g,
                      const float* lhs, const float* rhs, float* out, bool add,
                      void* stream);
// Adds to d_input (which == 0: lhs, 1: rhs) the output gradient dy times
// the partial derivative, summed over the dimensions it was broadcast
// along (d_input zeroed before by the caller where the request writes).
void BroadcastBackward(BroadcastKind kind, const BroadcastGeometry& g,
                       int which, const float* lhs, const float* rhs,
                       const float* dy, float* d_input, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_BROADCAST_KERNELS_H_
