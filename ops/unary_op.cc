// LeakyReLU, clip and arithmetic with a scalar: attributes, shapes and the
// CPU path.
#include "ops/unary_op.h"

#include <cmath>
#include <limits>

#include "ops/op_util.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {

StatusOr<std::unique_ptr<Operator>> UnaryOp::CreateLeakyRelu(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  int act = 0;
  KV_RETURN_IF_ERROR(r.Enum("act_type", {"leaky", "elu"}, &act, 0));
  double slope = 0.25;
  KV_RETURN_IF_ERROR(r.Float("slope", &slope, -1e6, 1e6, 0.25));
  KV_RETURN_IF_ERROR(r.Finish());
  UnaryParams p;
  p.kind = act == 0 ? UnaryKind::kLeaky : UnaryKind::kElu;
  p.a = static_cast<float>(slope);
  return std::unique_ptr<Operator>(new UnaryOp(p));
}

StatusOr<std::unique_ptr<Operator>> UnaryOp::CreateClip(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  const double none = std::numeric_limits<double>::quiet_NaN();
  double lo = none, hi = none;
  KV_RETURN_IF_ERROR(r.Float("a_min", &lo, -3e38, 3e38, none));
  KV_RETURN_IF_ERROR(r.Float("a_max", &hi, -3e38, 3e38, none));
  KV_RETURN_IF_ERROR(r.Finish());
  if (std::isnan(lo) || std::isnan(hi)) {
    return Status::InvalidArgument(spec.Describe() + ": missing attribute " +
                                   (std::isnan(lo) ? "a_min" : "a_max"));
  }
  if (lo > hi) {
    return Status::InvalidArgument(spec.Describe() + ": a_min " + std::to_string(lo) +
                                   " is above a_max " + std::to_string(hi));
  }
  UnaryParams p;
  p.kind = UnaryKind::kClip;
  p.a = static_cast<float>(lo);
  p.b = static_cast<float>(hi);
  return std::unique_ptr<Operator>(new UnaryOp(p));
}

StatusOr<std::unique_ptr<Operator>> UnaryOp::CreateScalar(UnaryKind kind, const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  const double none = std::numeric_limits<double>::quiet_NaN();
  double scalar = none;
  KV_RETURN_IF_ERROR(r.Float("scalar", &scalar, -3e38, 3e38, none));
  // MXNet 1.x writes is_int into a scalar op's JSON: accepted, not needed
  // (the graphs are float32).
  bool is_int = false;
  KV_RETURN_IF_ERROR(r.Bool("is_int", &is_int, false));
  KV_RETURN_IF_ERROR(r.Finish());
  if (std::isnan(scalar)) {
    return Status::InvalidArgument(spec.Describe() + ": missing attribute scalar");
  }
  if (kind == UnaryKind::kDiv && scalar == 0) {
    return Status::InvalidArgument(spec.Describe() + ": division by a scalar of 0");
  }
  UnaryParams p;
  p.kind = kind;
  p.a = static_cast<float>(scalar);
  return std::unique_ptr<Operator>(new UnaryOp(p));
}

Status UnaryOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                           std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = (*in)[0];
  return Status::OK();
}

BackwardNeeds UnaryOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0};
  return needs;
}

Status UnaryOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const float* x = op_util::Ptr(args->in[0]);
  float* y = op_util::Ptr(args->out[0]);
  const bool add = req == OpReq::kAdd;
  const UnaryParams p = p_;
  ParallelFor(args->in[0].size(), op_util::kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = UnaryApply(p, x[i]);
      y[i] = add ? y[i] + v : v;
    }
  });
  return Status::OK();
}

Status UnaryOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const float* x = op_util::Ptr(args->in[0]);
  const float* dy = op_util::Ptr(args->out_grad[0]);
  float* dx = op_util::Ptr(args->in_grad[0]);
  const bool add = req == OpReq::kAdd;
  const UnaryParams p = p_;
  ParallelFor(args->in[0].size(), op_util::kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float g = dy[i] * UnarySlope(p, x[i]);
      dx[i] = add ? dx[i] + g : g;
    }
  });
  return Status::OK();
}

Status UnaryOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::UnaryForward(p_, op_util::Ptr(args->in[0]), op_util::Ptr(args->out[0]),
                    args->in[0].size(), args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status UnaryOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::UnaryBackward(p_, op_util::Ptr(args->in[0]), op_util::Ptr(args->out_grad[0]),
                     op_util::Ptr(args->in_grad[0]), args->in[0].size(),
                     args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("LeakyReLU", UnaryOp::CreateLeakyRelu);
KV_REGISTER_OP("clip", UnaryOp::CreateClip);
KV_REGISTER_OP("_plus_scalar", UnaryOp::CreateScalarOf<UnaryKind::kPlus>);
KV_REGISTER_OP("_minus_scalar", UnaryOp::CreateScalarOf<UnaryKind::kMinus>);
KV_REGISTER_OP("_rminus_scalar", UnaryOp::CreateScalarOf<UnaryKind::kRMinus>);
KV_REGISTER_OP("_mul_scalar", UnaryOp::CreateScalarOf<UnaryKind::kMul>);
KV_REGISTER_OP("_div_scalar", UnaryOp::CreateScalarOf<UnaryKind::kDiv>);
KV_REGISTER_OP("_rdiv_scalar", UnaryOp::CreateScalarOf<UnaryKind::kRDiv>);

}  // namespace kvtrain
