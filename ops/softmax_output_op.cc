// SoftmaxOutput: shape inference, CPU path, GPU dispatch.
#include "ops/softmax_output_op.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu_math.h"
#include "ops/cudnn.h"
#include "ops/op_util.h"
#include "ops/softmax_output_kernels.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {

using op_util::Ptr;

StatusOr<std::unique_ptr<Operator>> SoftmaxOutputOp::Create(
    const OpSpec& spec) {
  auto op = std::unique_ptr<SoftmaxOutputOp>(new SoftmaxOutputOp);
  AttrReader r(spec.Describe(), spec.attrs);
  double scale = 1, ignore = -1;
  int norm = 0;
  KV_RETURN_IF_ERROR(r.Float("grad_scale", &scale, -1e30, 1e30, 1));
  KV_RETURN_IF_ERROR(
      r.Enum("normalization", {"null", "batch", "valid"}, &norm, 0));
  KV_RETURN_IF_ERROR(r.Bool("use_ignore", &op->use_ignore_, false));
  KV_RETURN_IF_ERROR(r.Float("ignore_label", &ignore, -1e30, 1e30, -1));
  KV_RETURN_IF_ERROR(r.Bool("cudnn_off", &op->cudnn_off_, true));
  KV_RETURN_IF_ERROR(r.Finish());
  op->grad_scale_ = static_cast<float>(scale);
  op->norm_ = static_cast<Norm>(norm);
  op->ignore_label_ = static_cast<float>(ignore);
  return std::unique_ptr<Operator>(std::move(op));
}

Status SoftmaxOutputOp::InferShape(std::vector<Shape>* in,
                                   std::vector<Shape>* out,
                                   std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() < 2) {
    return Error(input_name(0) + " must be (batch, classes), got " +
                 (d.ndim() == 0 ? std::string("an unknown shape")
                                : d.ToString()));
  }
  Shape& label = (*in)[1];
  if (label.ndim() != 0 && label != Shape{d[0]}) {
    return Error(input_name(1) + " is " + label.ToString() +
                 " but the batch has " + std::to_string(d[0]) +
                 " rows; expected (" + std::to_string(d[0]) + ")");
  }
  label = Shape{d[0]};
  (*out)[0] = d;
  return Status::OK();
}

BackwardNeeds SoftmaxOutputOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {1};
  needs.outputs = {0};
  needs.out_grad = false;
  return needs;
}

float SoftmaxOutputOp::Scale(int64_t rows, int64_t valid) const {
  switch (norm_) {
    case Norm::kBatch:
      return grad_scale_ / static_cast<float>(std::max<int64_t>(rows, 1));
    case Norm::kValid:
      return grad_scale_ / static_cast<float>(std::max<int64_t>(valid, 1));
    default:
      return grad_scale_;
  }
}

Status SoftmaxOutputOp::BadLabels(int64_t bad, int64_t classes) const {
  return Error(std::to_string(bad) + " label(s) outside [0, " +
               std::to_string(classes) + ")");
}

Status SoftmaxOutputOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  if (args->req[0] == OpReq::kNull) return Status::OK();
  if (args->req[0] == OpReq::kAdd) return Error("cannot add to probabilities");
  const int64_t rows = args->in[0].dim(0);
  const int64_t classes = args->in[0].size() / std::max<int64_t>(rows, 1);
  const float* x = Ptr(args->in[0]);
  float* p = Ptr(args->out[0]);
  ParallelFor(rows, std::max<int64_t>(1, 4096 / classes),
                    [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* in = x + r * classes;
      float* out = p + r * classes;
      const float m = *std::max_element(in, in + classes);
      for (int64_t c = 0; c < classes; ++c) out[c] = in[c] - m;
      cpu_math::Exp(out, out, classes);
      float sum = 0.0f;
      for (int64_t c = 0; c < classes; ++c) sum += out[c];
      const float inv = 1.0f / sum;
      for (int64_t c = 0; c < classes; ++c) out[c] *= inv;
    }
  });
  return Status::OK();
}

Status SoftmaxOutputOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const int64_t rows = args->in[0].dim(0);
  const int64_t classes = args->in[0].size() / std::max<int64_t>(rows, 1);
  const float* label = Ptr(args->in[1]);
  int64_t valid = 0, bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (use_ignore_ && label[r] == ignore_label_) continue;
    ++valid;
    bad += !(label[r] >= 0 && label[r] < static_cast<float>(classes));
  }
  if (bad > 0) return BadLabels(bad, classes);
  op_util::ZeroReq(ctx, args->req[1], Ptr(args->in_grad[1]), rows);
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const float scale = Scale(rows, valid);
  const float* p = Ptr(args->out[0]);
  float* dx = Ptr(args->in_grad[0]);
  for (int64_t r = 0; r < rows; ++r) {
    const bool ignored = use_ignore_ && label[r] == ignore_label_;
    const int64_t y = static_cast<int64_t>(label[r]);
    for (int64_t c = 0; c < classes; ++c) {
      const int64_t i = r * classes + c;
      const float g =
          ignored ? 0.0f : scale * (p[i] - (c == y ? 1.0f : 0.0f));
      dx[i] = req == OpReq::kAdd ? dx[i] + g : g;
    }
  }
  return Status::OK();
}

Status SoftmaxOutputOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  if (args->req[0] == OpReq::kAdd) return Error("cannot add to probabilities");
  const int64_t rows = args->in[0].dim(0);
  const int64_t classes = args->in[0].size() / rows;
  cudnnHandle_t h = cudnn_off_ || !cudnn::FitsInt({rows, classes})
                        ? nullptr
                        : cudnn::Handle(ctx.device);
  if (h != nullptr) {
    cudnn::TensorDesc t;
    t.Set(rows, classes, 1, 1);
    KV_CUDNN_CHECK(cudnnSoftmaxForward(
        h, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &cudnn::kOne,
        t.get(), Ptr(args->in[0]), &cudnn::kZero, t.get(), Ptr(args->out[0])));
    return Status::OK();
  }
  gpu::SoftmaxRows(Ptr(args->in[0]), rows, classes,
                   Ptr(args->out[0]), ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status SoftmaxOutputOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const int64_t rows = args->in[0].dim(0);
  const int64_t classes = args->in[0].size() / rows;
  int64_t valid = 0, bad = 0;
  gpu::CountLabels(Ptr(args->in[1]), rows, classes, use_ignore_, ignore_label_,
                   &valid, &bad, ctx.device->stream());
  if (bad > 0) return BadLabels(bad, classes);
  op_util::ZeroReq(ctx, args->req[1], Ptr(args->in_grad[1]), rows);
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::SoftmaxGrad(Ptr(args->out[0]), Ptr(args->in[1]), rows, classes,
                   Scale(rows, valid), use_ignore_, ignore_label_,
                   Ptr(args->in_grad[0]), args->req[0] == OpReq::kAdd,
                   ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("SoftmaxOutput", SoftmaxOutputOp::Create);

}  // namespace kvtrain
