// BatchNorm: shape inference, the CPU path (one channel per task) and the
// GPU driver.
#include "ops/batch_norm_op.h"

#include <cmath>

#include "ops/cudnn.h"
#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

#ifdef KVTRAIN_CUDA
#include "tensor/fill_kernels.h"
#endif

namespace kvtrain {

using op_util::Ptr;

StatusOr<std::unique_ptr<Operator>> BatchNormOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<BatchNormOp>(new BatchNormOp);
  AttrReader r(spec.Describe(), spec.attrs);
  double eps = 1e-3, momentum = 0.9;
  KV_RETURN_IF_ERROR(r.Float("eps", &eps, 1e-12, 1, 1e-3));
  KV_RETURN_IF_ERROR(r.Float("momentum", &momentum, 0, 1, 0.9));
  KV_RETURN_IF_ERROR(r.Bool("fix_gamma", &op->fix_gamma_, true));
  KV_RETURN_IF_ERROR(r.Bool("use_global_stats", &op->use_global_stats_, false));
  KV_RETURN_IF_ERROR(r.Bool("cudnn_off", &op->cudnn_off_, true));
  KV_RETURN_IF_ERROR(r.Finish());
  op->eps_ = static_cast<float>(eps);
  op->momentum_ = static_cast<float>(momentum);
  return std::unique_ptr<Operator>(std::move(op));
}

Status BatchNormOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                               std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() < 2) {
    return Error(input_name(0) + " must have a channel axis (N, C, ...), got " +
                 (d.ndim() == 0 ? std::string("an unknown shape")
                                : d.ToString()));
  }
  const Shape channels{d[1]};
  for (int i = 1; i < 3; ++i) {
    KV_RETURN_IF_ERROR(
        op_util::Assign(Describe(), input_name(i), &(*in)[i], channels));
  }
  (*out)[0] = d;
  (*out)[1] = channels;
  (*out)[2] = channels;
  (*aux)[0] = channels;
  (*aux)[1] = channels;
  return Status::OK();
}

BackwardNeeds BatchNormOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0, 1};
  needs.outputs = {1, 2};
  return needs;
}

size_t BatchNormOp::WorkspaceBytes(const std::vector<Shape>& in_shapes,
                                   const Device& device) const {
  // GPU: dgamma and dbeta before they are written with their requests, and
  // ones for cuDNN's scale under fix_gamma.
  return device.is_gpu() ? 3 * in_shapes[0][1] * sizeof(float) : 0;
}

BatchNormDims BatchNormOp::Dims(const Tensor& data) {
  BatchNormDims d;
  d.n = data.dim(0);
  d.c = data.dim(1);
  d.s = data.shape().Product(2, data.ndim());
  return d;
}

Status BatchNormOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const BatchNormDims d = Dims(args->in[0]);
  const bool batch = BatchStats(ctx);
  const OpReq req = args->req[0];
  const float* x = Ptr(args->in[0]);
  const float* gamma = Ptr(args->in[1]);
  const float* beta = Ptr(args->in[2]);
  float* y = Ptr(args->out[0]);
  float* mean = Ptr(args->out[1]);
  float* invstd = Ptr(args->out[2]);
  float* mm = Ptr(args->aux[0]);
  float* mv = Ptr(args->aux[1]);
  const double m = static_cast<double>(d.n * d.s);
  ParallelFor(d.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      if (batch) {
        double sum = 0, sq = 0;
        for (int64_t n = 0; n < d.n; ++n) {
          const float* p = x + (n * d.c + c) * d.s;
          for (int64_t s = 0; s < d.s; ++s) sum += p[s];
        }
        const double mu = sum / m;
        for (int64_t n = 0; n < d.n; ++n) {
          const float* p = x + (n * d.c + c) * d.s;
          for (int64_t s = 0; s < d.s; ++s) sq += (p[s] - mu) * (p[s] - mu);
        }
        const double var = sq / m;
        mean[c] = static_cast<float>(mu);
        invstd[c] = static_cast<float>(1.0 / std::sqrt(var + eps_));
        if (ctx.is_train) {
          mm[c] = momentum_ * mm[c] + (1 - momentum_) * mean[c];
          mv[c] = momentum_ * mv[c] + (1 - momentum_) * static_cast<float>(var);
        }
      } else {
        mean[c] = mm[c];
        invstd[c] = 1.0f / std::sqrt(mv[c] + eps_);
      }
      if (req == OpReq::kNull) continue;
      const float scale = (fix_gamma_ ? 1.0f : gamma[c]) * invstd[c];
      const float shift = beta[c] - mean[c] * scale;
      for (int64_t n = 0; n < d.n; ++n) {
        const float* p = x + (n * d.c + c) * d.s;
        float* q = y + (n * d.c + c) * d.s;
        for (int64_t s = 0; s < d.s; ++s) {
          q[s] = (req == OpReq::kAdd ? q[s] : 0.0f) + p[s] * scale + shift;
        }
      }
    }
  });
  return Status::OK();
}

Status BatchNormOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const BatchNormDims d = Dims(args->in[0]);
  const bool batch = !use_global_stats_;
  const float* x = Ptr(args->in[0]);
  const float* gamma = Ptr(args->in[1]);
  const float* dy = Ptr(args->out_grad[0]);
  const float* mean = Ptr(args->out[1]);
  const float* invstd = Ptr(args->out[2]);
  const std::vector<OpReq>& req = args->req;
  const double m = static_cast<double>(d.n * d.s);
  ParallelFor(d.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double db = 0, dg = 0;
      for (int64_t n = 0; n < d.n; ++n) {
        const float* p = x + (n * d.c + c) * d.s;
        const float* g = dy + (n * d.c + c) * d.s;
        for (int64_t s = 0; s < d.s; ++s) {
          db += g[s];
          dg += g[s] * (p[s] - mean[c]) * invstd[c];
        }
      }
      if (req[1] != OpReq::kNull) {
        float& out = Ptr(args->in_grad[1])[c];
        const float v = fix_gamma_ ? 0.0f : static_cast<float>(dg);
        out = req[1] == OpReq::kAdd ? out + v : v;
      }
      if (req[2] != OpReq::kNull) {
        float& out = Ptr(args->in_grad[2])[c];
        out = req[2] == OpReq::kAdd ? out + static_cast<float>(db)
                                    : static_cast<float>(db);
      }
      if (req[0] == OpReq::kNull) continue;
      const float scale = (fix_gamma_ ? 1.0f : gamma[c]) * invstd[c];
      const float mdb = batch ? static_cast<float>(db / m) : 0.0f;
      const float mdg = batch ? static_cast<float>(dg / m) : 0.0f;
      float* dx = Ptr(args->in_grad[0]);
      for (int64_t n = 0; n < d.n; ++n) {
        const float* p = x + (n * d.c + c) * d.s;
        const float* g = dy + (n * d.c + c) * d.s;
        float* q = dx + (n * d.c + c) * d.s;
        for (int64_t s = 0; s < d.s; ++s) {
          const float xhat = (p[s] - mean[c]) * invstd[c];
          const float v = scale * (g[s] - mdb - xhat * mdg);
          q[s] = req[0] == OpReq::kAdd ? q[s] + v : v;
        }
      }
    }
  });
  return Status::OK();
}

#ifdef KVTRAIN_CUDA
namespace {

// Descriptors of one cuDNN batch-norm call: data as (N, C, S, 1), the
// per-channel vectors as (1, C, 1, 1).
struct CudnnBn {
  explicit CudnnBn(const BatchNormDims& d) {
    x.Set(d.n, d.c, d.s, 1);
    ch.Set(1, d.c, 1, 1);
  }
  cudnn::TensorDesc x, ch;
};

// gamma, or ones (in the workspace's third part) under fix_gamma.
const float* Scale(const OpContext& ctx, bool fix_gamma, const Tensor& gamma,
                   int64_t c) {
  if (!fix_gamma) return Ptr(gamma);
  float* ones = static_cast<float*>(ctx.workspace) + 2 * c;
  gpu::FillPattern(ones, c, 4, 0x3f800000u, ctx.device->stream());
  return ones;
}

}  // namespace
#endif

void* BatchNormOp::CudnnHandle(const OpContext& ctx, const Tensor& data) const {
#ifdef KVTRAIN_CUDA
  const BatchNormDims d = Dims(data);
  if (cudnn_off_ || use_global_stats_ || eps_ < CUDNN_BN_MIN_EPSILON ||
      !cudnn::FitsInt({d.n, d.c, d.s, data.size()})) {
    return nullptr;
  }
  return cudnn::Handle(ctx.device);
#else
  return nullptr;
#endif
}

Status BatchNormOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const BatchNormDims d = Dims(args->in[0]);
  void* stream = ctx.device->stream();
  float* mean = Ptr(args->out[1]);
  float* invstd = Ptr(args->out[2]);
  void* h = args->req[0] == OpReq::kNull || !BatchStats(ctx)
                ? nullptr
                : CudnnHandle(ctx, args->in[0]);
  if (h != nullptr) {
    // Statistics and output in one call; the moving averages are kvtrain's
    // (biased variance), where cuDNN's would use the unbiased one.
    CudnnBn c(d);
    KV_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        static_cast<cudnnHandle_t>(h), CUDNN_BATCHNORM_SPATIAL, &cudnn::kOne,
        cudnn::Beta(args->req[0] == OpReq::kAdd), c.x.get(), Ptr(args->in[0]),
        c.x.get(), Ptr(args->out[0]), c.ch.get(),
        Scale(ctx, fix_gamma_, args->in[1], d.c), Ptr(args->in[2]), 0.0,
        nullptr, nullptr, eps_, mean, invstd));
    gpu::BatchNormUpdateMoving(d.c, mean, invstd, eps_, momentum_,
                               Ptr(args->aux[0]), Ptr(args->aux[1]), stream);
    return Status::OK();
  }
  if (BatchStats(ctx)) {
    // The variance goes through invstd's buffer.
    gpu::BatchNormStats(d, Ptr(args->in[0]), mean, invstd, stream);
    gpu::BatchNormFinishStats(d.c, invstd, eps_, momentum_, mean, invstd,
                              Ptr(args->aux[0]), Ptr(args->aux[1]), stream);
  } else {
    op_util::CopyReq(ctx, OpReq::kWrite, Ptr(args->aux[0]), mean, d.c);
    gpu::BatchNormFinishStats(d.c, Ptr(args->aux[1]), eps_, -1.0f, mean,
                              invstd, nullptr, nullptr, stream);
  }
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::BatchNormForward(d, Ptr(args->in[0]), mean, invstd,
                        fix_gamma_ ? nullptr : Ptr(args->in[1]),
                        Ptr(args->in[2]), Ptr(args->out[0]),
                        args->req[0] == OpReq::kAdd, stream);
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status BatchNormOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const BatchNormDims d = Dims(args->in[0]);
  float* dgamma = static_cast<float*>(ctx.workspace);
  float* dbeta = dgamma + d.c;
  const std::vector<OpReq>& req = args->req;
  void* h = req[0] == OpReq::kNull ? nullptr : CudnnHandle(ctx, args->in[0]);
  if (h != nullptr) {
    CudnnBn c(d);
    KV_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        static_cast<cudnnHandle_t>(h), CUDNN_BATCHNORM_SPATIAL, &cudnn::kOne,
        cudnn::Beta(req[0] == OpReq::kAdd), &cudnn::kOne, &cudnn::kZero,
        c.x.get(), Ptr(args->in[0]), c.x.get(), Ptr(args->out_grad[0]),
        c.x.get(), Ptr(args->in_grad[0]), c.ch.get(),
        Scale(ctx, fix_gamma_, args->in[1], d.c), dgamma, dbeta, eps_,
        Ptr(args->out[1]), Ptr(args->out[2])));
  } else {
    gpu::BatchNormBackward(
        d, Ptr(args->in[0]), Ptr(args->out_grad[0]), Ptr(args->out[1]),
        Ptr(args->out[2]), fix_gamma_ ? nullptr : Ptr(args->in[1]),
        !use_global_stats_, dgamma, dbeta,
        req[0] == OpReq::kNull ? nullptr : Ptr(args->in_grad[0]),
        req[0] == OpReq::kAdd, ctx.device->stream());
  }
  if (req[1] != OpReq::kNull) {
    if (fix_gamma_) {
      op_util::ZeroReq(ctx, req[1], Ptr(args->in_grad[1]), d.c);
    } else {
      op_util::CopyReq(ctx, req[1], dgamma, Ptr(args->in_grad[1]), d.c);
    }
  }
  op_util::CopyReq(ctx, req[2], dbeta, Ptr(args->in_grad[2]), d.c);
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("BatchNorm", BatchNormOp::Create);

}  // namespace kvtrain
