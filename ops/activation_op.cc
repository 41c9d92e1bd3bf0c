// Activation: shape inference and the CPU path (vectorised, multi-threaded).
#include "ops/activation_op.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu_math.h"
#include "ops/cudnn.h"
#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace {

// y = f(x) over [0, n).
void ApplyCpu(ActType act, const float* x, float* y, int64_t n) {
  switch (act) {
    case ActType::kRelu:
      // NaN stays NaN (x < 0 is false), so bad values remain visible.
#pragma GCC ivdep
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
      break;
    case ActType::kSigmoid:
      cpu_math::Sigmoid(x, y, n);
      break;
    case ActType::kTanh:
      cpu_math::Tanh(x, y, n);
      break;
    case ActType::kSoftrelu:
      for (int64_t i = 0; i < n; ++i) {
        y[i] = x[i] > 20.0f ? x[i] : std::log1p(std::exp(x[i]));
      }
      break;
  }
}

// d[i] = dy[i] * f'(x[i]) from y = f(x), written to dx (or added when
// `add`); dx may be dy (in place), hence ivdep. Separate write and add
// loops: a written dx may hold garbage (even NaN) that must not be read.
template <typename Slope>
void ApplySlope(const float* y, const float* dy, float* dx, int64_t n,
                bool add, Slope slope) {
  if (add) {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * slope(y[i]);
  } else {
#pragma GCC ivdep
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * slope(y[i]);
  }
}

void SlopeCpu(ActType act, const float* y, const float* dy, float* dx,
              int64_t n, bool add) {
  switch (act) {
    case ActType::kRelu:
      ApplySlope(y, dy, dx, n, add, [](float v) { return v > 0.0f ? 1.0f : 0.0f; });
      break;
    case ActType::kSigmoid:
      ApplySlope(y, dy, dx, n, add, [](float v) { return v * (1.0f - v); });
      break;
    case ActType::kTanh:
      ApplySlope(y, dy, dx, n, add, [](float v) { return 1.0f - v * v; });
      break;
    case ActType::kSoftrelu:
      ApplySlope(y, dy, dx, n, add, [](float v) { return -std::expm1(-v); });
      break;
  }
}

}  // namespace

StatusOr<std::unique_ptr<Operator>> ActivationOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<ActivationOp>(new ActivationOp);
  AttrReader r(spec.Describe(), spec.attrs);
  int act = -1;
  KV_RETURN_IF_ERROR(
      r.Enum("act_type", {"relu", "sigmoid", "tanh", "softrelu"}, &act, -1));
  if (act < 0) {
    return Status::InvalidArgument(
        spec.Describe() +
        ": missing attribute act_type (relu, sigmoid, tanh or softrelu)");
  }
  op->act_ = static_cast<ActType>(act);
  KV_RETURN_IF_ERROR(r.Bool("cudnn_off", &op->cudnn_off_, true));
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(std::move(op));
}

Status ActivationOp::InferShape(std::vector<Shape>* in,
                                std::vector<Shape>* out,
                                std::vector<Shape>* aux) const {
  if ((*in)[0].ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  (*out)[0] = (*in)[0];
  return Status::OK();
}

BackwardNeeds ActivationOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.outputs = {0};
  return needs;
}

Status ActivationOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const float* x = op_util::Ptr(args->in[0]);
  float* y = op_util::Ptr(args->out[0]);
  const bool add = req == OpReq::kAdd;
  ParallelFor(args->in[0].size(), op_util::kElementwiseGrain,
                    [&](int64_t b, int64_t e) {
    if (!add) {
      ApplyCpu(act_, x + b, y + b, e - b);
      return;
    }
    // Add through a small buffer so f stays one vectorised pass.
    float buf[1024];
    for (int64_t i = b; i < e; i += 1024) {
      const int64_t len = std::min<int64_t>(1024, e - i);
      ApplyCpu(act_, x + i, buf, len);
      for (int64_t j = 0; j < len; ++j) y[i + j] += buf[j];
    }
  });
  return Status::OK();
}

Status ActivationOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const float* y = op_util::Ptr(args->out[0]);
  const float* dy = op_util::Ptr(args->out_grad[0]);
  float* dx = op_util::Ptr(args->in_grad[0]);
  ParallelFor(args->out[0].size(), op_util::kElementwiseGrain,
                    [&](int64_t b, int64_t e) {
    SlopeCpu(act_, y + b, dy + b, dx + b, e - b, req == OpReq::kAdd);
  });
  return Status::OK();
}

#ifdef KVTRAIN_CUDA
namespace {

// The descriptors of one cuDNN activation call: the tensor as one row.
struct CudnnAct {
  CudnnAct(cudnnHandle_t h, ActType act, int64_t n) : handle(h) {
    t.Set(1, 1, 1, n);
    desc.Set(act == ActType::kRelu      ? CUDNN_ACTIVATION_RELU
             : act == ActType::kSigmoid ? CUDNN_ACTIVATION_SIGMOID
                                        : CUDNN_ACTIVATION_TANH);
  }
  cudnnHandle_t handle;
  cudnn::TensorDesc t;
  cudnn::ActDesc desc;
};

// cuDNN's handle when it runs this call, else null (reference kernels).
cudnnHandle_t ActHandle(bool cudnn_off, ActType act, const OpContext& ctx,
                        int64_t n) {
  if (cudnn_off || act == ActType::kSoftrelu || !cudnn::FitsInt({n})) {
    return nullptr;
  }
  return cudnn::Handle(ctx.device);
}

}  // namespace
#endif

Status ActivationOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const int64_t n = args->in[0].size();
  if (cudnnHandle_t h = ActHandle(cudnn_off_, act_, ctx, n)) {
    CudnnAct c(h, act_, n);
    KV_CUDNN_CHECK(cudnnActivationForward(
        h, c.desc.get(), &cudnn::kOne, c.t.get(), op_util::Ptr(args->in[0]),
        cudnn::Beta(args->req[0] == OpReq::kAdd), c.t.get(),
        op_util::Ptr(args->out[0])));
    return Status::OK();
  }
  gpu::ActivationForward(act_, op_util::Ptr(args->in[0]),
                         op_util::Ptr(args->out[0]), args->in[0].size(),
                         args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status ActivationOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const int64_t n = args->out[0].size();
  if (cudnnHandle_t h = ActHandle(cudnn_off_, act_, ctx, n)) {
    // The input may be gone (Forward may run in place): relu, sigmoid and
    // tanh have their gradients in terms of the output, passed for both.
    CudnnAct c(h, act_, n);
    const float* y = op_util::Ptr(args->out[0]);
    KV_CUDNN_CHECK(cudnnActivationBackward(
        h, c.desc.get(), &cudnn::kOne, c.t.get(), y, c.t.get(),
        op_util::Ptr(args->out_grad[0]), c.t.get(), y,
        cudnn::Beta(args->req[0] == OpReq::kAdd), c.t.get(),
        op_util::Ptr(args->in_grad[0])));
    return Status::OK();
  }
  gpu::ActivationBackward(act_, op_util::Ptr(args->out[0]),
                          op_util::Ptr(args->out_grad[0]),
                          op_util::Ptr(args->in_grad[0]), args->out[0].size(),
                          args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("Activation", ActivationOp::Create);

}  // namespace kvtrain
