// Dropout: shape inference and the CPU path.
#include "ops/dropout_op.h"

#include <functional>

#include "ops/dropout_kernels.h"
#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {

using op_util::Ptr;

StatusOr<std::unique_ptr<Operator>> DropoutOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<DropoutOp>(new DropoutOp);
  AttrReader r(spec.Describe(), spec.attrs);
  double p = 0.5;
  int64_t seed = 0;
  KV_RETURN_IF_ERROR(r.Float("p", &p, 0, 0.999999, 0.5));
  KV_RETURN_IF_ERROR(r.Int("seed", &seed, 0, INT64_MAX, 0));
  KV_RETURN_IF_ERROR(r.Finish());
  op->p_ = static_cast<float>(p);
  // Distinct ops with the same seed still draw different masks.
  op->seed_ = static_cast<uint64_t>(seed) * 0x2545F4914F6CDD1Dull ^
              std::hash<std::string>()(spec.name);
  return std::unique_ptr<Operator>(std::move(op));
}

Status DropoutOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                             std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = (*in)[0];
  (*out)[1] = (*in)[0];
  return Status::OK();
}

BackwardNeeds DropoutOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.outputs = {1};
  return needs;
}

uint64_t DropoutOp::NextStream() {
  return seed_ + (++calls_) * 0xD1B54A32D192ED03ull;
}

Status DropoutOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  const int64_t n = args->in[0].size();
  if (!ctx.is_train) {
    op_util::CopyReq(ctx, req, Ptr(args->in[0]), Ptr(args->out[0]), n);
    return Status::OK();
  }
  const uint64_t stream = NextStream();
  const float* x = Ptr(args->in[0]);
  float* y = Ptr(args->out[0]);
  float* mask = Ptr(args->out[1]);
  const float p = p_, scale = 1.0f / (1.0f - p_);
  ParallelFor(n, op_util::kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      mask[i] = DropoutUniform(stream, i) >= p ? scale : 0.0f;
    }
    if (req == OpReq::kNull) return;
    for (int64_t i = b; i < e; ++i) {
      y[i] = (req == OpReq::kAdd ? y[i] : 0.0f) + x[i] * mask[i];
    }
  });
  return Status::OK();
}

Status DropoutOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const float* dy = Ptr(args->out_grad[0]);
  const float* mask = Ptr(args->out[1]);
  float* dx = Ptr(args->in_grad[0]);
  ParallelFor(args->in[0].size(), op_util::kElementwiseGrain,
                    [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      dx[i] = (req == OpReq::kAdd ? dx[i] : 0.0f) + dy[i] * mask[i];
    }
  });
  return Status::OK();
}

Status DropoutOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const int64_t n = args->in[0].size();
  if (!ctx.is_train) {
    op_util::CopyReq(ctx, args->req[0], Ptr(args->in[0]), Ptr(args->out[0]),
                     n);
    return Status::OK();
  }
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::DropoutForward(Ptr(args->in[0]), Ptr(args->out[0]), Ptr(args->out[1]),
                      n, p_, NextStream(), args->req[0] == OpReq::kAdd,
                      ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status DropoutOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::DropoutBackward(Ptr(args->out_grad[0]), Ptr(args->out[1]),
                       Ptr(args->in_grad[0]), args->in[0].size(),
                       args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("Dropout", DropoutOp::Create);

}  // namespace kvtrain
