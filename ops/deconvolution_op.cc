// Deconvolution: shapes, the CPU path (GEMM + col2im per image, a share of
// the batch per thread) and the GPU driver (the same, on one stream).
#include "ops/deconvolution_op.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace {

using op_util::Ptr;

}  // namespace

StatusOr<std::unique_ptr<Operator>> DeconvolutionOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<DeconvolutionOp>(new DeconvolutionOp);
  AttrReader r(spec.Describe(), spec.attrs);
  std::vector<int64_t> kernel, stride, pad, adj;
  bool has_kernel = false, has_stride = false, has_pad = false, has_adj = false;
  KV_RETURN_IF_ERROR(r.Tuple("kernel", 2, 1, &kernel, &has_kernel));
  if (!has_kernel) {
    return Status::InvalidArgument(spec.Describe() + ": missing attribute kernel, e.g. (4, 4)");
  }
  KV_RETURN_IF_ERROR(r.Tuple("stride", 2, 1, &stride, &has_stride));
  KV_RETURN_IF_ERROR(r.Tuple("pad", 2, 0, &pad, &has_pad));
  KV_RETURN_IF_ERROR(r.Tuple("adj", 2, 0, &adj, &has_adj));
  KV_RETURN_IF_ERROR(r.Int("num_filter", &op->num_filter_, 1, INT_MAX));
  KV_RETURN_IF_ERROR(r.Bool("no_bias", &op->no_bias_, true));
  KV_RETURN_IF_ERROR(r.Finish());
  for (int i = 0; i < 2; ++i) {
    op->kernel_[i] = kernel[i];
    if (has_stride) op->stride_[i] = stride[i];
    if (has_pad) op->pad_[i] = pad[i];
    if (has_adj) op->adj_[i] = adj[i];
  }
  for (int i = 0; i < 2; ++i) {
    if (op->adj_[i] >= op->stride_[i]) {
      return Status::InvalidArgument(spec.Describe() + ": adj (" + std::to_string(op->adj_[0]) +
                                     ", " + std::to_string(op->adj_[1]) +
                                     ") must be smaller than stride (" +
                                     std::to_string(op->stride_[0]) + ", " +
                                     std::to_string(op->stride_[1]) + ")");
    }
  }
  return std::unique_ptr<Operator>(std::move(op));
}

std::vector<std::string> DeconvolutionOp::ListArguments() const {
  if (no_bias_) return {"data", "weight"};
  return {"data", "weight", "bias"};
}

Status DeconvolutionOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                   std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() != 4) {
    return Error(input_name(0) + " must be 4-D (batch, channel, height, width), got " +
                 (d.ndim() == 0 ? std::string("an unknown shape") : d.ToString()));
  }
  int64_t o[2];
  for (int i = 0; i < 2; ++i) {
    o[i] = (d[2 + i] - 1) * stride_[i] - 2 * pad_[i] + kernel_[i] + adj_[i];
    if (o[i] < 1) {
      return Error("pad (" + std::to_string(pad_[0]) + ", " + std::to_string(pad_[1]) +
                   ") leaves no output for " + input_name(0) + " " + d.ToString());
    }
  }
  Shape& weight = (*in)[1];
  if (weight.ndim() == 4 && weight[0] != d[1]) {
    return Error("input has " + std::to_string(d[1]) + " channels but " + input_name(1) +
                 " is " + weight.ToString() + " (channels, num_filter, kh, kw)");
  }
  KV_RETURN_IF_ERROR(op_util::Assign(Describe(), input_name(1), &weight,
                                     Shape{d[1], num_filter_, kernel_[0], kernel_[1]}));
  if (!no_bias_) {
    KV_RETURN_IF_ERROR(
        op_util::Assign(Describe(), input_name(2), &(*in)[2], Shape{num_filter_}));
  }
  (*out)[0] = Shape{d[0], num_filter_, o[0], o[1]};
  return Status::OK();
}

BackwardNeeds DeconvolutionOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0, 1};
  return needs;
}

DeconvolutionOp::Plan DeconvolutionOp::MakePlan(const Shape& data, const Device& device,
                                                int threads) const {
  Plan p;
  ConvGeometry& g = p.geo;
  g.c = static_cast<int>(num_filter_);
  g.kh = static_cast<int>(kernel_[0]);
  g.kw = static_cast<int>(kernel_[1]);
  g.sh = static_cast<int>(stride_[0]);
  g.sw = static_cast<int>(stride_[1]);
  g.ph = static_cast<int>(pad_[0]);
  g.pw = static_cast<int>(pad_[1]);
  g.oh = static_cast<int>(data[2]);
  g.ow = static_cast<int>(data[3]);
  g.h = static_cast<int>((data[2] - 1) * stride_[0] - 2 * pad_[0] + kernel_[0] + adj_[0]);
  g.w = static_cast<int>((data[3] - 1) * stride_[1] - 2 * pad_[1] + kernel_[1] + adj_[1]);
  p.batch = static_cast<int>(data[0]);
  p.channels = static_cast<int>(data[1]);
  p.slots = device.is_cpu() ? std::max(1, std::min(threads, p.batch)) : 1;
  p.slot_floats = g.K() * g.P() +
                  (device.is_cpu() ? p.channels * g.K() + static_cast<int64_t>(g.c) : 0);
  p.K = static_cast<int>(g.K());
  p.P = static_cast<int>(g.P());
  p.in_size = static_cast<int64_t>(p.channels) * p.P;
  p.out_size = g.image_size();
  p.out_plane = static_cast<int64_t>(g.h) * g.w;
  return p;
}

size_t DeconvolutionOp::WorkspaceBytes(const std::vector<Shape>& in_shapes,
                                       const Device& device) const {
  const Plan p = MakePlan(in_shapes[0], device, CpuThreads());
  return p.slots * p.slot_floats * sizeof(float);
}

StatusOr<DeconvolutionOp::Plan> DeconvolutionOp::CallPlan(const OpContext& ctx,
                                                         const Tensor& data) const {
  const Device& dev = ctx.device->device();
  Plan p = MakePlan(data.shape(), dev, CpuThreads());
  while (p.slots > 1 && p.slots * p.slot_floats * sizeof(float) > ctx.workspace_bytes) {
    p = MakePlan(data.shape(), dev, p.slots - 1);
  }
  if (p.slots * p.slot_floats * sizeof(float) > ctx.workspace_bytes) {
    return Error("workspace too small");
  }
  return p;
}

Status DeconvolutionOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  KV_ASSIGN_OR_RETURN(const Plan p, CallPlan(ctx, args->in[0]));
  const ConvGeometry& g = p.geo;
  const int K = p.K, P = p.P;
  const int64_t out_size = p.out_size, in_size = p.in_size, out_plane = p.out_plane;
  const float* data = Ptr(args->in[0]);
  const float* weight = Ptr(args->in[1]);
  const float* bias = no_bias_ ? nullptr : Ptr(args->in[2]);
  float* out = Ptr(args->out[0]);
  float* ws = static_cast<float*>(ctx.workspace);
  ParallelFor(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* col = ws + s * p.slot_floats;
      const int begin = static_cast<int>(s * p.batch / p.slots);
      const int end = static_cast<int>((s + 1) * p.batch / p.slots);
      for (int n = begin; n < end; ++n) {
        // col (K x P) = weight^T (K x C) * data_n (C x P).
        blas::Gemm(ctx.device, true, false, K, P, p.channels, 1.0f, weight, K,
                   data + n * in_size, P, 0.0f, col, P);
        float* img = out + n * out_size;
        if (req != OpReq::kAdd) std::memset(img, 0, out_size * sizeof(float));
        Col2ImImageCpu(g, col, P, img);
        if (bias != nullptr) {
          for (int f = 0; f < g.c; ++f) {
            float* plane = img + f * out_plane;
            for (int64_t i = 0; i < out_plane; ++i) plane[i] += bias[f];
          }
        }
      }
    }
  });
  return Status::OK();
}

Status DeconvolutionOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  KV_ASSIGN_OR_RETURN(const Plan p, CallPlan(ctx, args->in[0]));
  const ConvGeometry& g = p.geo;
  const int K = p.K, P = p.P;
  const int64_t out_size = p.out_size, in_size = p.in_size, out_plane = p.out_plane;
  const float* data = Ptr(args->in[0]);
  const float* weight = Ptr(args->in[1]);
  const float* dout = Ptr(args->out_grad[0]);
  const OpReq dx_req = args->req[0], dw_req = args->req[1];
  const OpReq db_req = no_bias_ ? OpReq::kNull : args->req[2];
  float* ws = static_cast<float*>(ctx.workspace);
  ParallelFor(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* col = ws + s * p.slot_floats;
      float* dw = col + g.K() * g.P();
      float* db = dw + static_cast<int64_t>(p.channels) * K;
      std::memset(dw, 0, (static_cast<int64_t>(p.channels) * K + g.c) * sizeof(float));
      const int begin = static_cast<int>(s * p.batch / p.slots);
      const int end = static_cast<int>((s + 1) * p.batch / p.slots);
      for (int n = begin; n < end; ++n) {
        const float* dy = dout + n * out_size;
        Im2ColImageCpu(g, dy, col, P);
        if (dx_req != OpReq::kNull) {
          // dx_n (C x P) = weight (C x K) * col (K x P).
          blas::Gemm(ctx.device, false, false, p.channels, P, K, 1.0f, weight, K, col, P,
                     dx_req == OpReq::kAdd ? 1.0f : 0.0f, Ptr(args->in_grad[0]) + n * in_size,
                     P);
        }
        if (dw_req != OpReq::kNull) {
          // dw (C x K) += data_n (C x P) * col^T (P x K).
          blas::Gemm(ctx.device, false, true, p.channels, K, P, 1.0f, data + n * in_size, P,
                     col, P, 1.0f, dw, K);
        }
        if (db_req != OpReq::kNull) {
          for (int f = 0; f < g.c; ++f) {
            const float* plane = dy + f * out_plane;
            float sum = 0.0f;
            for (int64_t i = 0; i < out_plane; ++i) sum += plane[i];
            db[f] += sum;
          }
        }
      }
    }
  });
  // Sum the slots' partial weight and bias gradients.
  auto reduce = [&](int input, OpReq req, int64_t offset, int64_t n) {
    if (req == OpReq::kNull) return;
    float* dst = Ptr(args->in_grad[input]);
    for (int s = 0; s < p.slots; ++s) {
      const float* part = ws + s * p.slot_floats + g.K() * g.P() + offset;
      op_util::CopyReq(ctx, s == 0 ? req : OpReq::kAdd, part, dst, n);
    }
  };
  reduce(1, dw_req, 0, static_cast<int64_t>(p.channels) * K);
  if (!no_bias_) reduce(2, db_req, static_cast<int64_t>(p.channels) * K, g.c);
  return Status::OK();
}

Status DeconvolutionOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  KV_ASSIGN_OR_RETURN(const Plan p, CallPlan(ctx, args->in[0]));
  const ConvGeometry& g = p.geo;
  const int K = p.K, P = p.P;
  const int64_t out_size = p.out_size, in_size = p.in_size;
  float* col = static_cast<float*>(ctx.workspace);
  void* stream = ctx.device->stream();
  for (int n = 0; n < p.batch; ++n) {
    blas::Gemm(ctx.device, true, false, K, P, p.channels, 1.0f, Ptr(args->in[1]), K,
               Ptr(args->in[0]) + n * in_size, P, 0.0f, col, P);
    gpu::Col2Im(g, col, 1, Ptr(args->out[0]) + n * out_size, req == OpReq::kAdd, stream);
  }
  if (!no_bias_) {
    gpu::AddBias(Ptr(args->in[2]), p.batch, g.c, p.out_plane, Ptr(args->out[0]), stream);
  }
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status DeconvolutionOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  KV_ASSIGN_OR_RETURN(const Plan p, CallPlan(ctx, args->in[0]));
  const ConvGeometry& g = p.geo;
  const int K = p.K, P = p.P;
  const int64_t out_size = p.out_size, in_size = p.in_size;
  float* col = static_cast<float*>(ctx.workspace);
  void* stream = ctx.device->stream();
  const OpReq dx_req = args->req[0], dw_req = args->req[1];
  if (!no_bias_ && args->req[2] != OpReq::kNull) {
    gpu::BiasGrad(Ptr(args->out_grad[0]), p.batch, g.c, p.out_plane, Ptr(args->in_grad[2]),
                  args->req[2] == OpReq::kAdd, stream);
  }
  for (int n = 0; n < p.batch; ++n) {
    gpu::Im2Col(g, Ptr(args->out_grad[0]) + n * out_size, 1, col, stream);
    if (dx_req != OpReq::kNull) {
      blas::Gemm(ctx.device, false, false, p.channels, P, K, 1.0f, Ptr(args->in[1]), K, col,
                 P, dx_req == OpReq::kAdd ? 1.0f : 0.0f, Ptr(args->in_grad[0]) + n * in_size, P);
    }
    if (dw_req != OpReq::kNull) {
      const float beta = n > 0 || dw_req == OpReq::kAdd ? 1.0f : 0.0f;
      blas::Gemm(ctx.device, false, true, p.channels, K, P, 1.0f,
                 Ptr(args->in[0]) + n * in_size, P, col, P, beta, Ptr(args->in_grad[1]), K);
    }
  }
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("Deconvolution", DeconvolutionOp::Create);

}  // namespace kvtrain
