// LRN: attributes, shapes and the CPU path (the formulas in lrn_kernels.h).
#include "ops/lrn_op.h"

#include <cmath>

#include "ops/op_util.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace {

using op_util::Ptr;

// Elements per chunk when a pass is split across CPU threads.
constexpr int64_t kLrnGrain = 1 << 14;

}  // namespace

StatusOr<std::unique_ptr<Operator>> LrnOp::Create(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  auto op = std::unique_ptr<LrnOp>(new LrnOp);
  int64_t nsize = 0;
  double alpha, beta, knorm;
  KV_RETURN_IF_ERROR(r.Int("nsize", &nsize, 1, 1 << 16));
  KV_RETURN_IF_ERROR(r.Float("alpha", &alpha, 0, 1e9, 1e-4));
  KV_RETURN_IF_ERROR(r.Float("beta", &beta, 0, 1e9, 0.75));
  KV_RETURN_IF_ERROR(r.Float("knorm", &knorm, 1e-12, 1e9, 2));
  KV_RETURN_IF_ERROR(r.Finish());
  op->params_.nsize = nsize;
  op->params_.alpha = static_cast<float>(alpha);
  op->params_.beta = static_cast<float>(beta);
  op->params_.knorm = static_cast<float>(knorm);
  return std::unique_ptr<Operator>(std::move(op));
}

Status LrnOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                         std::vector<Shape>* aux) const {
  const Shape& data = (*in)[0];
  if (data.ndim() == 0) return Error("the shape of " + input_name(0) + " is unknown");
  if (data.ndim() < 2) {
    return Error(input_name(0) + " is " + data.ToString() +
                 "; LRN needs (batch, channels, ...)");
  }
  (*out)[0] = data;
  (*out)[1] = data;
  return Status::OK();
}

BackwardNeeds LrnOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0};
  needs.outputs = {1};
  return needs;
}

LrnGeometry LrnOp::Geometry(const Shape& data) const {
  LrnGeometry g = params_;
  g.batch = data[0];
  g.channels = data[1];
  g.inner = data.Product(2, data.ndim());
  return g;
}

Status LrnOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const LrnGeometry g = Geometry(args->in[0].shape());
  const float* x = Ptr(args->in[0]);
  float* y = Ptr(args->out[0]);
  float* s = Ptr(args->out[1]);
  const OpReq req = args->req[0];
  const int64_t n = args->in[0].size();
  ParallelFor(n, kLrnGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) s[i] = LrnScale(g, x, i);
    if (req == OpReq::kNull) return;
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i] * std::pow(s[i], -g.beta);
      y[i] = req == OpReq::kAdd ? y[i] + v : v;
    }
  });
  return Status::OK();
}

Status LrnOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const LrnGeometry g = Geometry(args->in[0].shape());
  const float* x = Ptr(args->in[0]);
  const float* s = Ptr(args->out[1]);
  const float* dy = Ptr(args->out_grad[0]);
  float* dx = Ptr(args->in_grad[0]);
  ParallelFor(args->in[0].size(), kLrnGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = LrnInputGrad(g, x, s, dy, i);
      dx[i] = req == OpReq::kAdd ? dx[i] + v : v;
    }
  });
  return Status::OK();
}

Status LrnOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  gpu::LrnForward(Geometry(args->in[0].shape()), Ptr(args->in[0]), Ptr(args->out[1]),
                  args->req[0] == OpReq::kNull ? nullptr : Ptr(args->out[0]),
                  args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status LrnOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::LrnBackward(Geometry(args->in[0].shape()), Ptr(args->in[0]), Ptr(args->out[1]),
                   Ptr(args->out_grad[0]), Ptr(args->in_grad[0]), args->req[0] == OpReq::kAdd,
                   ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("LRN", LrnOp::Create);

}  // namespace kvtrain
