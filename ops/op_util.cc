// Operator helpers: copies, zeroing and scaling on the op's device.
#include "ops/op_util.h"

#include <cstring>

#include "tensor/blas.h"

#ifdef KVTRAIN_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda_check.h"
#endif

namespace kvtrain {
namespace op_util {

Status Assign(const std::string& desc, const std::string& name, Shape* shape,
              const Shape& want) {
  if (shape->ndim() == 0) {
    *shape = want;
    return Status::OK();
  }
  if (*shape != want) {
    return Status::InvalidArgument(desc + ": " + name + " is " +
                                   shape->ToString() + ", expected " +
                                   want.ToString());
  }
  return Status::OK();
}

void CopyReq(const OpContext& ctx, OpReq req, const float* src, float* dst,
             int64_t n) {
  if (req == OpReq::kNull || n == 0) return;
  if (req == OpReq::kAdd) {
    Axpy(ctx, 1.0f, src, dst, n);
    return;
  }
  if (dst == src) return;
  if (ctx.device->device().is_cpu()) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
#ifdef KVTRAIN_CUDA
  KV_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float),
                                cudaMemcpyDeviceToDevice,
                                KV_CUDA_STREAM(ctx.device)));
#endif
}

void ZeroReq(const OpContext& ctx, OpReq req, float* dst, int64_t n) {
  if (req == OpReq::kNull || req == OpReq::kAdd || n == 0) return;
  if (ctx.device->device().is_cpu()) {
    std::memset(dst, 0, n * sizeof(float));
    return;
  }
#ifdef KVTRAIN_CUDA
  KV_CUDA_CHECK(
      cudaMemsetAsync(dst, 0, n * sizeof(float), KV_CUDA_STREAM(ctx.device)));
#endif
}

void Axpy(const OpContext& ctx, float alpha, const float* src, float* dst,
          int64_t n) {
  blas::Axpy(ctx.device, n, alpha, src, dst);
}

void Scale(const OpContext& ctx, float alpha, float* x, int64_t n) {
  blas::Scal(ctx.device, n, alpha, x);
}

}  // namespace op_util
}  // namespace kvtrain
