// SumOn, Broadcast.
#include "kvstore/device_sum.h"

#include "tensor/blas.h"

namespace kvtrain {
namespace kv {

StatusOr<Tensor> SumOn(const std::vector<Tensor>& values, const Device& device) {
  KV_ASSIGN_OR_RETURN(Tensor sum, values[0].CopyTo(device));
  Tensor staged;
  for (size_t i = 1; i < values.size(); ++i) {
    const Tensor* v = &values[i];
    if (v->device() != device) {
      if (!staged.defined()) {
        KV_ASSIGN_OR_RETURN(staged, Tensor::Create(sum.shape(), DType::kFloat32, device));
      }
      KV_RETURN_IF_ERROR(staged.CopyFrom(*v));
      v = &staged;
    }
    KV_RETURN_IF_ERROR(blas::Axpy(1.0f, *v, &sum));
  }
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(device));
  KV_RETURN_IF_ERROR(ctx->Synchronize());
  return sum;
}

Status Broadcast(const Tensor& src, const std::vector<Tensor>& outs) {
  for (Tensor out : outs) KV_RETURN_IF_ERROR(out.CopyFrom(src));
  return Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
