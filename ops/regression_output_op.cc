// LinearRegressionOutput: copies forward, an axpy-built gradient backward
// (no kernels of its own, so the same code runs on either device).
#include "ops/regression_output_op.h"

#include "ops/op_util.h"

namespace kvtrain {

using op_util::Ptr;

StatusOr<std::unique_ptr<Operator>> LinearRegressionOutputOp::Create(
    const OpSpec& spec) {
  auto op =
      std::unique_ptr<LinearRegressionOutputOp>(new LinearRegressionOutputOp);
  AttrReader r(spec.Describe(), spec.attrs);
  double scale = 1;
  KV_RETURN_IF_ERROR(r.Float("grad_scale", &scale, -1e30, 1e30, 1));
  KV_RETURN_IF_ERROR(r.Finish());
  op->grad_scale_ = static_cast<float>(scale);
  return std::unique_ptr<Operator>(std::move(op));
}

Status LinearRegressionOutputOp::InferShape(std::vector<Shape>* in,
                                            std::vector<Shape>* out,
                                            std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  Shape& label = (*in)[1];
  if (label.ndim() == 0) label = d;
  if (label.NumElements() != d.NumElements() || label[0] != d[0]) {
    return Error(input_name(1) + " is " + label.ToString() + " but " +
                 input_name(0) + " is " + d.ToString() +
                 "; they need the same rows and element count");
  }
  (*out)[0] = d;
  return Status::OK();
}

BackwardNeeds LinearRegressionOutputOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {1};
  needs.outputs = {0};
  needs.out_grad = false;
  return needs;
}

Status LinearRegressionOutputOp::ForwardCpu(const OpContext& ctx,
                                            ForwardArgs* args) {
  op_util::CopyReq(ctx, args->req[0], Ptr(args->in[0]), Ptr(args->out[0]),
                   args->in[0].size());
  return Status::OK();
}

Status LinearRegressionOutputOp::BackwardCpu(const OpContext& ctx,
                                             BackwardArgs* args) {
  const int64_t n = args->out[0].size();
  op_util::ZeroReq(ctx, args->req[1], Ptr(args->in_grad[1]), n);
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const int64_t per_row = n / args->out[0].dim(0);
  const float s = grad_scale_ / static_cast<float>(per_row);
  float* dx = Ptr(args->in_grad[0]);
  // dx (+)= s * out - s * label.
  if (req != OpReq::kAdd) {
    op_util::CopyReq(ctx, OpReq::kWrite, Ptr(args->out[0]), dx, n);
    op_util::Scale(ctx, s, dx, n);
  } else {
    op_util::Axpy(ctx, s, Ptr(args->out[0]), dx, n);
  }
  op_util::Axpy(ctx, -s, Ptr(args->in[1]), dx, n);
  return Status::OK();
}

Status LinearRegressionOutputOp::ForwardGpu(const OpContext& ctx,
                                            ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status LinearRegressionOutputOp::BackwardGpu(const OpContext& ctx,
                                             BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("LinearRegressionOutput", LinearRegressionOutputOp::Create);

}  // namespace kvtrain
