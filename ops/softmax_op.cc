// softmax along the last axis: attributes, shapes and the CPU path (rows in
// parallel).
#include "ops/softmax_op.h"

#include <algorithm>
#include <cmath>

#include "ops/op_util.h"
#include "ops/softmax_kernels.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {

StatusOr<std::unique_ptr<Operator>> SoftmaxOp::Create(const OpSpec& spec) {
  return CreateFor(spec, false);
}

StatusOr<std::unique_ptr<Operator>> SoftmaxOp::CreateLog(const OpSpec& spec) {
  return CreateFor(spec, true);
}

StatusOr<std::unique_ptr<Operator>> SoftmaxOp::CreateFor(const OpSpec& spec, bool log) {
  AttrReader r(spec.Describe(), spec.attrs);
  int64_t axis = -1;
  KV_RETURN_IF_ERROR(r.Int("axis", &axis, -1, -1, -1));
  double t = 1.0;
  KV_RETURN_IF_ERROR(r.Float("temperature", &t, 1e-6, 1e6, 1.0));
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new SoftmaxOp(static_cast<float>(t), log));
}

Status SoftmaxOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                             std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = (*in)[0];
  return Status::OK();
}

BackwardNeeds SoftmaxOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.outputs = {0};
  return needs;
}

namespace {

int64_t Width(const Tensor& t) { return t.dim(t.ndim() - 1); }

}  // namespace

Status SoftmaxOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const int64_t width = Width(args->in[0]);
  const int64_t rows = width ? args->in[0].size() / width : 0;
  const float* x = op_util::Ptr(args->in[0]);
  float* y = op_util::Ptr(args->out[0]);
  const bool add = req == OpReq::kAdd;
  const float inv_t = 1.0f / temperature_;
  const bool log = log_;
  ParallelFor(rows, std::max<int64_t>(1, op_util::kElementwiseGrain / std::max<int64_t>(width, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * width;
      float* yr = y + r * width;
      const float m = *std::max_element(xr, xr + width);
      double sum = 0;
      for (int64_t j = 0; j < width; ++j) sum += std::exp((xr[j] - m) * inv_t);
      const float inv = static_cast<float>(1.0 / sum);
      const float log_sum = static_cast<float>(std::log(sum));
      for (int64_t j = 0; j < width; ++j) {
        const float v = log ? (xr[j] - m) * inv_t - log_sum
                            : std::exp((xr[j] - m) * inv_t) * inv;
        yr[j] = add ? yr[j] + v : v;
      }
    }
  });
  return Status::OK();
}

Status SoftmaxOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const int64_t width = Width(args->out[0]);
  const int64_t rows = width ? args->out[0].size() / width : 0;
  const float* y = op_util::Ptr(args->out[0]);
  const float* dy = op_util::Ptr(args->out_grad[0]);
  float* dx = op_util::Ptr(args->in_grad[0]);
  const bool add = req == OpReq::kAdd;
  const float inv_t = 1.0f / temperature_;
  const bool log = log_;
  ParallelFor(rows, std::max<int64_t>(1, op_util::kElementwiseGrain / std::max<int64_t>(width, 1)),
              [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* yr = y + r * width;
      const float* gr = dy + r * width;
      float* dr = dx + r * width;
      double dot = 0;
      if (log) {
        for (int64_t j = 0; j < width; ++j) dot += gr[j];
      } else {
        for (int64_t j = 0; j < width; ++j) dot += static_cast<double>(gr[j]) * yr[j];
      }
      for (int64_t j = 0; j < width; ++j) {
        const float g = log ? (gr[j] - std::exp(yr[j]) * static_cast<float>(dot)) * inv_t
                            : yr[j] * (gr[j] - static_cast<float>(dot)) * inv_t;
        dr[j] = add ? dr[j] + g : g;
      }
    }
  });
  return Status::OK();
}

Status SoftmaxOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const int64_t width = Width(args->in[0]);
  gpu::SoftmaxForward(op_util::Ptr(args->in[0]), op_util::Ptr(args->out[0]),
                      width ? args->in[0].size() / width : 0, width, temperature_, log_,
                      args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status SoftmaxOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const int64_t width = Width(args->out[0]);
  gpu::SoftmaxBackward(op_util::Ptr(args->out[0]), op_util::Ptr(args->out_grad[0]),
                       op_util::Ptr(args->in_grad[0]), width ? args->out[0].size() / width : 0,
                       width, temperature_, log_, args->req[0] == OpReq::kAdd,
                       ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("softmax", SoftmaxOp::Create);
KV_REGISTER_OP("log_softmax", SoftmaxOp::CreateLog);

}  // namespace kvtrain
