// _CrossDeviceCopy: synchronous device-to-device copies.
#include "ops/copy_op.h"

#include "tensor/blas.h"

namespace kvtrain {

StatusOr<std::unique_ptr<Operator>> CrossDeviceCopyOp::Create(
    const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new CrossDeviceCopyOp);
}

Status CrossDeviceCopyOp::InferShape(std::vector<Shape>* in,
                                     std::vector<Shape>* out,
                                     std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = (*in)[0];
  return Status::OK();
}

Status CrossDeviceCopyOp::Move(const Tensor& src, Tensor* dst,
                               OpReq req) const {
  if (req == OpReq::kNull) return Status::OK();
  if (req != OpReq::kAdd) return dst->CopyFrom(src);
  KV_ASSIGN_OR_RETURN(Tensor tmp, src.CopyTo(dst->device()));
  return blas::Axpy(1.0f, tmp, dst);
}

Status CrossDeviceCopyOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  return Move(args->in[0], &args->out[0], args->req[0]);
}

Status CrossDeviceCopyOp::BackwardCpu(const OpContext& ctx,
                                      BackwardArgs* args) {
  return Move(args->out_grad[0], &args->in_grad[0], args->req[0]);
}

Status CrossDeviceCopyOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status CrossDeviceCopyOp::BackwardGpu(const OpContext& ctx,
                                      BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("_CrossDeviceCopy", CrossDeviceCopyOp::Create);

}  // namespace kvtrain
