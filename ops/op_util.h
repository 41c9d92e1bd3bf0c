// Helpers shared by operator implementations: shape checks with op-named
// errors, write-request handling, and device-agnostic copy/zero/scale that
// run on the op's CUDA stream on GPUs. Private to ops/.
#ifndef KVTRAIN_OPS_OP_UTIL_H_
#define KVTRAIN_OPS_OP_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "ops/operator.h"

namespace kvtrain {
namespace op_util {

// beta for a GEMM writing with `req`: 1 adds, 0 overwrites.
inline float Beta(OpReq req) { return req == OpReq::kAdd ? 1.0f : 0.0f; }

// Fills (*shape) with `want` when unknown (ndim 0); otherwise it must equal
// `want`: "<desc>: <name> is (3, 4), expected (3, 5)".
Status Assign(const std::string& desc, const std::string& name, Shape* shape,
              const Shape& want);

// dst (n floats) op= src according to req (kNull: nothing; kWrite/kInplace:
// copy unless dst == src; kAdd: add). On ctx's device.
void CopyReq(const OpContext& ctx, OpReq req, const float* src, float* dst,
             int64_t n);
// dst = 0 unless req is kNull or kAdd.
void ZeroReq(const OpContext& ctx, OpReq req, float* dst, int64_t n);
// dst += alpha * src on ctx's device.
void Axpy(const OpContext& ctx, float alpha, const float* src, float* dst,
          int64_t n);
// x *= alpha on ctx's device.
void Scale(const OpContext& ctx, float alpha, float* x, int64_t n);

// Null for an undefined tensor (e.g. the gradient of an input with kNull).
inline float* Ptr(const Tensor& t) {
  return t.defined() ? t.data<float>() : nullptr;
}

// Elements per ParallelFor chunk for simple elementwise CPU loops: below
// this a loop runs on one thread.
constexpr int64_t kElementwiseGrain = 1 << 15;

}  // namespace op_util
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_OP_UTIL_H_
