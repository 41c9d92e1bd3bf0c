// identity, BlockGrad and Cast: copies on the op's device (the tensor
// library's copy and axpy run on either device).
#include "ops/identity_op.h"

#include "tensor/blas.h"

namespace kvtrain {
namespace {

// dst (op)= src on one device.
Status Pass(const Tensor& src, Tensor* dst, OpReq req) {
  if (req == OpReq::kNull) return Status::OK();
  if (req == OpReq::kAdd) return blas::Axpy(1.0f, src, dst);
  if (src.data<float>() == dst->data<float>()) return Status::OK();
  return dst->CopyFrom(src);
}

}  // namespace

StatusOr<std::unique_ptr<Operator>> IdentityOp::Create(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new IdentityOp(/*pass_gradient=*/true));
}

StatusOr<std::unique_ptr<Operator>> IdentityOp::CreateBlockGrad(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new IdentityOp(/*pass_gradient=*/false));
}

StatusOr<std::unique_ptr<Operator>> IdentityOp::CreateCast(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  int dtype = -1;
  KV_RETURN_IF_ERROR(r.Enum("dtype", {"float32"}, &dtype, -1));
  if (dtype < 0) {
    return Status::InvalidArgument(spec.Describe() +
                                   ": missing attribute dtype (kvtrain computes float32)");
  }
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new IdentityOp(/*pass_gradient=*/true));
}

Status IdentityOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                              std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = (*in)[0];
  return Status::OK();
}

Status IdentityOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  return Pass(args->in[0], &args->out[0], args->req[0]);
}

Status IdentityOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  if (pass_gradient_) return Pass(args->out_grad[0], &args->in_grad[0], args->req[0]);
  // BlockGrad: the input's gradient is zero (adding zero changes nothing).
  if (args->req[0] == OpReq::kWrite || args->req[0] == OpReq::kInplace) {
    return args->in_grad[0].Fill(0.0);
  }
  return Status::OK();
}

Status IdentityOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status IdentityOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("identity", IdentityOp::Create);
KV_REGISTER_OP("_copy", IdentityOp::Create);
KV_REGISTER_OP("BlockGrad", IdentityOp::CreateBlockGrad);
KV_REGISTER_OP("stop_gradient", IdentityOp::CreateBlockGrad);
KV_REGISTER_OP("Cast", IdentityOp::CreateCast);

}  // namespace kvtrain
