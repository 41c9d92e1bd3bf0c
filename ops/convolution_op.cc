// Convolution: shape inference, the CPU path (im2col/col2im + GEMM per group
// of images, one share of the batch per thread) and the GPU driver.
#include "ops/convolution_op.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "ops/cpu_math.h"
#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

#ifdef KVTRAIN_CUDA
#include "tensor/fill_kernels.h"
#endif

namespace kvtrain {
namespace {

using op_util::Ptr;

// Target size of one group's column matrix: about the L2 cache on the CPU;
// large on GPUs, where bigger GEMMs are simply better.
constexpr int64_t kCpuColFloats = 1 << 18;
constexpr int64_t kGpuColFloats = 1 << 24;

// Writes one image's column block (K rows of P, row stride `ld`).
KV_MULTI_ISA void Im2ColCpu(const ConvGeometry& g, const float* data,
                           float* col, int64_t ld) {
  for (int c = 0; c < g.c; ++c) {
    for (int ki = 0; ki < g.kh; ++ki) {
      for (int kj = 0; kj < g.kw; ++kj) {
        float* row = col + ((static_cast<int64_t>(c) * g.kh + ki) * g.kw + kj) * ld;
        const int x0 = kj - g.pw;
        // Output columns whose input column x0 + ox * sw is inside [0, w).
        int lo = 0, hi = g.ow;
        while (lo < g.ow && x0 + lo * g.sw < 0) ++lo;
        while (hi > lo && x0 + (hi - 1) * g.sw >= g.w) --hi;
        for (int oy = 0; oy < g.oh; ++oy) {
          float* dst = row + static_cast<int64_t>(oy) * g.ow;
          const int iy = oy * g.sh - g.ph + ki;
          if (iy < 0 || iy >= g.h) {
            std::memset(dst, 0, g.ow * sizeof(float));
            continue;
          }
          const float* src = data + (static_cast<int64_t>(c) * g.h + iy) * g.w;
          for (int ox = 0; ox < lo; ++ox) dst[ox] = 0.0f;
          if (g.sw == 1) {
            // Rows are short (ow floats): a plain loop beats memcpy calls.
            for (int ox = lo; ox < hi; ++ox) dst[ox] = src[x0 + ox];
          } else {
            for (int ox = lo; ox < hi; ++ox) dst[ox] = src[x0 + ox * g.sw];
          }
          for (int ox = hi; ox < g.ow; ++ox) dst[ox] = 0.0f;
        }
      }
    }
  }
}

// Adds one image's column block back onto the image (patches overlap).
KV_MULTI_ISA void Col2ImCpu(const ConvGeometry& g, const float* col,
                           int64_t ld, float* data) {
  for (int c = 0; c < g.c; ++c) {
    for (int ki = 0; ki < g.kh; ++ki) {
      for (int kj = 0; kj < g.kw; ++kj) {
        const float* row =
            col + ((static_cast<int64_t>(c) * g.kh + ki) * g.kw + kj) * ld;
        const int x0 = kj - g.pw;
        int lo = 0, hi = g.ow;
        while (lo < g.ow && x0 + lo * g.sw < 0) ++lo;
        while (hi > lo && x0 + (hi - 1) * g.sw >= g.w) --hi;
        for (int oy = 0; oy < g.oh; ++oy) {
          const int iy = oy * g.sh - g.ph + ki;
          if (iy < 0 || iy >= g.h) continue;
          const float* src = row + static_cast<int64_t>(oy) * g.ow;
          float* dst = data + (static_cast<int64_t>(c) * g.h + iy) * g.w + x0;
          for (int ox = lo; ox < hi; ++ox) dst[ox * g.sw] += src[ox];
        }
      }
    }
  }
}

}  // namespace

void Im2ColImageCpu(const ConvGeometry& g, const float* data, float* col, int64_t ld) {
  Im2ColCpu(g, data, col, ld);
}

void Col2ImImageCpu(const ConvGeometry& g, const float* col, int64_t ld, float* data) {
  Col2ImCpu(g, col, ld, data);
}

StatusOr<std::unique_ptr<Operator>> ConvolutionOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<ConvolutionOp>(new ConvolutionOp);
  AttrReader r(spec.Describe(), spec.attrs);
  std::vector<int64_t> kernel, stride, pad;
  bool has_kernel = false, has_stride = false, has_pad = false;
  KV_RETURN_IF_ERROR(r.Tuple("kernel", 2, 1, &kernel, &has_kernel));
  if (!has_kernel) {
    return Status::InvalidArgument(spec.Describe() +
                                   ": missing attribute kernel, e.g. (5, 5)");
  }
  KV_RETURN_IF_ERROR(r.Tuple("stride", 2, 1, &stride, &has_stride));
  KV_RETURN_IF_ERROR(r.Tuple("pad", 2, 0, &pad, &has_pad));
  KV_RETURN_IF_ERROR(r.Int("num_filter", &op->num_filter_, 1, INT_MAX));
  KV_RETURN_IF_ERROR(r.Bool("no_bias", &op->no_bias_, false));
  bool cudnn_off = true;
  int64_t workspace_mb = 1024;
  KV_RETURN_IF_ERROR(r.Bool("cudnn_off", &cudnn_off, true));
  KV_RETURN_IF_ERROR(r.Int("workspace", &workspace_mb, 0, 1 << 20, 1024));
  KV_RETURN_IF_ERROR(r.Finish());
  ConvParams params;
  for (int i = 0; i < 2; ++i) {
    op->kernel_[i] = kernel[i];
    if (has_stride) op->stride_[i] = stride[i];
    if (has_pad) op->pad_[i] = pad[i];
    params.kernel[i] = op->kernel_[i];
    params.stride[i] = op->stride_[i];
    params.pad[i] = op->pad_[i];
  }
  params.num_filter = op->num_filter_;
  params.no_bias = op->no_bias_;
  params.workspace_limit = static_cast<size_t>(workspace_mb) << 20;
  if (!cudnn_off) op->cudnn_.reset(new ConvCudnn(params));
  return std::unique_ptr<Operator>(std::move(op));
}

std::vector<std::string> ConvolutionOp::ListArguments() const {
  if (no_bias_) return {"data", "weight"};
  return {"data", "weight", "bias"};
}

Status ConvolutionOp::InferShape(std::vector<Shape>* in,
                                 std::vector<Shape>* out,
                                 std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() != 4) {
    return Error(input_name(0) +
                 " must be 4-D (batch, channel, height, width), got " +
                 (d.ndim() == 0 ? std::string("an unknown shape")
                                : d.ToString()));
  }
  int64_t o[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t padded = d[2 + i] + 2 * pad_[i];
    if (padded < kernel_[i]) {
      return Error("kernel (" + std::to_string(kernel_[0]) + ", " +
                   std::to_string(kernel_[1]) + ") is larger than the padded " +
                   "input " + d.ToString() + " of " + input_name(0));
    }
    o[i] = (padded - kernel_[i]) / stride_[i] + 1;
  }
  Shape& weight = (*in)[1];
  if (weight.ndim() == 4 && weight[1] != d[1]) {
    return Error("input has " + std::to_string(d[1]) + " channels but " +
                 input_name(1) + " is " + weight.ToString());
  }
  KV_RETURN_IF_ERROR(
      op_util::Assign(Describe(), input_name(1), &weight,
                      Shape{num_filter_, d[1], kernel_[0], kernel_[1]}));
  if (!no_bias_) {
    KV_RETURN_IF_ERROR(op_util::Assign(Describe(), input_name(2), &(*in)[2],
                                       Shape{num_filter_}));
  }
  (*out)[0] = Shape{d[0], num_filter_, o[0], o[1]};
  return Status::OK();
}

BackwardNeeds ConvolutionOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0, 1};
  return needs;
}

ConvolutionOp::Plan ConvolutionOp::MakePlan(const Shape& data,
                                            const Device& device,
                                            int threads) const {
  Plan p;
  ConvGeometry& g = p.geo;
  g.c = static_cast<int>(data[1]);
  g.h = static_cast<int>(data[2]);
  g.w = static_cast<int>(data[3]);
  g.kh = static_cast<int>(kernel_[0]);
  g.kw = static_cast<int>(kernel_[1]);
  g.sh = static_cast<int>(stride_[0]);
  g.sw = static_cast<int>(stride_[1]);
  g.ph = static_cast<int>(pad_[0]);
  g.pw = static_cast<int>(pad_[1]);
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  p.batch = static_cast<int>(data[0]);
  p.filters = static_cast<int>(num_filter_);
  p.slots = device.is_cpu() ? std::max(1, std::min(threads, p.batch)) : 1;
  const int64_t share = (p.batch + p.slots - 1) / p.slots;
  const int64_t target = device.is_cpu() ? kCpuColFloats : kGpuColFloats;
  p.group = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(share, target / (g.K() * g.P()))));
  const int64_t cols = p.group * g.P();
  // Column matrix, GEMM result, (CPU) the slot's weight/bias gradient
  // partial sums, and a ones vector for the bias GEMMs.
  p.slot_floats = g.K() * cols + p.filters * cols + cols +
                  (device.is_cpu() ? p.filters * g.K() + p.filters : 0);
  return p;
}

bool ConvolutionOp::UseCudnn(const DeviceContext* ctx, const Shape& data,
                             size_t* bytes) const {
  return cudnn_ != nullptr && cudnn_->Ready(ctx, data, bytes);
}

size_t ConvolutionOp::WorkspaceBytes(const std::vector<Shape>& in_shapes,
                                     const Device& device) const {
  if (device.is_gpu() && cudnn_ != nullptr) {
    StatusOr<DeviceContext*> ctx = DeviceContext::Get(device);
    size_t bytes = 0;
    if (ctx.ok() && UseCudnn(*ctx, in_shapes[0], &bytes)) return bytes;
  }
  const Plan p = MakePlan(in_shapes[0], device, CpuThreads());
  return p.slots * p.slot_floats * sizeof(float);
}

ConvolutionOp::Plan ConvolutionOp::CallPlan(const OpContext& ctx,
                                            const Tensor& data) const {
  const Device& dev = ctx.device->device();
  Plan p = MakePlan(data.shape(), dev, CpuThreads());
  // Fewer slots if the thread count grew since the workspace was sized.
  while (p.slots > 1 &&
         p.slots * p.slot_floats * sizeof(float) > ctx.workspace_bytes) {
    p = MakePlan(data.shape(), dev, p.slots - 1);
  }
  return p;
}

Status ConvolutionOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const Plan p = CallPlan(ctx, args->in[0]);
  if (p.slots * p.slot_floats * sizeof(float) > ctx.workspace_bytes) {
    return Error("workspace too small");
  }
  const ConvGeometry& g = p.geo;
  const int64_t K = g.K(), P = g.P();
  const float* data = Ptr(args->in[0]);
  const float* weight = Ptr(args->in[1]);
  const float* bias = no_bias_ ? nullptr : Ptr(args->in[2]);
  float* out = Ptr(args->out[0]);
  float* ws = static_cast<float*>(ctx.workspace);
  ParallelFor(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* col = ws + s * p.slot_floats;
      float* tmp = col + K * p.group * P;
      const int begin = static_cast<int>(s * p.batch / p.slots);
      const int end = static_cast<int>((s + 1) * p.batch / p.slots);
      for (int n0 = begin; n0 < end; n0 += p.group) {
        const int gg = std::min(p.group, end - n0);
        const int64_t ld = gg * P;
        for (int j = 0; j < gg; ++j) {
          Im2ColCpu(g, data + (n0 + j) * g.image_size(), col + j * P, ld);
        }
        blas::Gemm(ctx.device, false, false, p.filters, static_cast<int>(ld),
                   static_cast<int>(K), 1.0f, weight, static_cast<int>(K), col,
                   static_cast<int>(ld), 0.0f, tmp, static_cast<int>(ld));
        for (int j = 0; j < gg; ++j) {
          for (int f = 0; f < p.filters; ++f) {
            const float* src = tmp + f * ld + j * P;
            float* dst = out + ((n0 + j) * static_cast<int64_t>(p.filters) + f) * P;
            const float b = bias ? bias[f] : 0.0f;
            if (req == OpReq::kAdd) {
              for (int64_t i = 0; i < P; ++i) dst[i] += src[i] + b;
            } else {
              for (int64_t i = 0; i < P; ++i) dst[i] = src[i] + b;
            }
          }
        }
      }
    }
  });
  return Status::OK();
}

void ConvolutionOp::BackwardSlotCpu(const Plan& p, const BackwardArgs& args,
                                    int slot, float* ws,
                                    const OpContext& ctx) const {
  const ConvGeometry& g = p.geo;
  const int64_t K = g.K(), P = g.P();
  float* col = ws + slot * p.slot_floats;
  float* tmp = col + K * p.group * P;
  float* dw = tmp + p.filters * p.group * P;
  float* db = dw + p.filters * K;
  float* ones = db + p.filters;
  std::memset(dw, 0, (p.filters * K + p.filters) * sizeof(float));
  for (int64_t i = 0; i < p.group * P; ++i) ones[i] = 1.0f;
  const float* data = Ptr(args.in[0]);
  const float* weight = Ptr(args.in[1]);
  const float* dout = Ptr(args.out_grad[0]);
  const bool want_dw = args.req[1] != OpReq::kNull;
  const bool want_dx = args.req[0] != OpReq::kNull;
  float* dx = want_dx ? Ptr(args.in_grad[0]) : nullptr;
  const int begin = static_cast<int>(slot * p.batch / p.slots);
  const int end = static_cast<int>((slot + 1) * p.batch / p.slots);
  for (int n0 = begin; n0 < end; n0 += p.group) {
    const int gg = std::min(p.group, end - n0);
    const int64_t ld = gg * P;
    // Gather dout into the column layout (F x gg*P).
    for (int j = 0; j < gg; ++j) {
      for (int f = 0; f < p.filters; ++f) {
        const float* src = dout + ((n0 + j) * static_cast<int64_t>(p.filters) + f) * P;
        float* dst = tmp + f * ld + j * P;
        for (int64_t i = 0; i < P; ++i) dst[i] = src[i];
      }
    }
    // Bias gradient: row sums of that matrix, as a GEMV against ones.
    blas::Gemm(ctx.device, false, false, p.filters, 1, static_cast<int>(ld),
               1.0f, tmp, static_cast<int>(ld), ones, 1, 1.0f, db, 1);
    if (want_dw) {
      for (int j = 0; j < gg; ++j) {
        Im2ColCpu(g, data + (n0 + j) * g.image_size(), col + j * P, ld);
      }
      blas::Gemm(ctx.device, false, true, p.filters, static_cast<int>(K),
                 static_cast<int>(ld), 1.0f, tmp, static_cast<int>(ld), col,
                 static_cast<int>(ld), 1.0f, dw, static_cast<int>(K));
    }
    if (want_dx) {
      blas::Gemm(ctx.device, true, false, static_cast<int>(K),
                 static_cast<int>(ld), p.filters, 1.0f, weight,
                 static_cast<int>(K), tmp, static_cast<int>(ld), 0.0f, col,
                 static_cast<int>(ld));
      for (int j = 0; j < gg; ++j) {
        float* img = dx + (n0 + j) * g.image_size();
        if (args.req[0] != OpReq::kAdd) {
          std::memset(img, 0, g.image_size() * sizeof(float));
        }
        Col2ImCpu(g, col + j * P, ld, img);
      }
    }
  }
}

Status ConvolutionOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const Plan p = CallPlan(ctx, args->in[0]);
  if (p.slots * p.slot_floats * sizeof(float) > ctx.workspace_bytes) {
    return Error("workspace too small");
  }
  float* ws = static_cast<float*>(ctx.workspace);
  ParallelFor(p.slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      BackwardSlotCpu(p, *args, static_cast<int>(s), ws, ctx);
    }
  });
  // Sum the slots' partial weight and bias gradients.
  const int64_t K = p.geo.K();
  const int64_t cols = p.group * p.geo.P();
  auto reduce = [&](int input, int64_t offset, int64_t n) {
    if (args->req[input] == OpReq::kNull) return;
    float* dst = Ptr(args->in_grad[input]);
    for (int s = 0; s < p.slots; ++s) {
      const float* part = ws + s * p.slot_floats + K * cols +
                          p.filters * cols + offset;
      const OpReq req = s == 0 ? args->req[input] : OpReq::kAdd;
      op_util::CopyReq(ctx, req, part, dst, n);
    }
  };
  reduce(1, 0, p.filters * K);
  if (!no_bias_) reduce(2, p.filters * K, p.filters);
  return Status::OK();
}

Status ConvolutionOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  size_t bytes = 0;
  if (UseCudnn(ctx.device, args->in[0].shape(), &bytes)) {
    if (bytes > ctx.workspace_bytes) return Error("workspace too small");
    return cudnn_->Forward(ctx, args);
  }
  const Plan p = CallPlan(ctx, args->in[0]);
  const ConvGeometry& g = p.geo;
  const int64_t K = g.K(), P = g.P();
  float* col = static_cast<float*>(ctx.workspace);
  float* tmp = col + K * p.group * P;
  void* stream = ctx.device->stream();
  for (int n0 = 0; n0 < p.batch; n0 += p.group) {
    const int gg = std::min(p.group, p.batch - n0);
    const int ld = static_cast<int>(gg * P);
    gpu::Im2Col(g, Ptr(args->in[0]) + n0 * g.image_size(), gg, col, stream);
    blas::Gemm(ctx.device, false, false, p.filters, ld, static_cast<int>(K),
               1.0f, Ptr(args->in[1]), static_cast<int>(K), col, ld, 0.0f, tmp,
               ld);
    gpu::ScatterBias(tmp, no_bias_ ? nullptr : Ptr(args->in[2]), gg, p.filters,
                     P, Ptr(args->out[0]) + n0 * p.filters * P,
                     req == OpReq::kAdd, stream);
  }
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status ConvolutionOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  size_t bytes = 0;
  if (UseCudnn(ctx.device, args->in[0].shape(), &bytes)) {
    if (bytes > ctx.workspace_bytes) return Error("workspace too small");
    return cudnn_->Backward(ctx, args);
  }
  const Plan p = CallPlan(ctx, args->in[0]);
  const ConvGeometry& g = p.geo;
  const int64_t K = g.K(), P = g.P();
  float* col = static_cast<float*>(ctx.workspace);
  float* tmp = col + K * p.group * P;
  float* ones = tmp + p.filters * p.group * P;
  void* stream = ctx.device->stream();
  gpu::FillPattern(ones, p.group * P, 4, 0x3f800000u, stream);
  const bool want_dw = args->req[1] != OpReq::kNull;
  const bool want_db = !no_bias_ && args->req[2] != OpReq::kNull;
  if (want_dw) {
    op_util::ZeroReq(ctx, args->req[1], Ptr(args->in_grad[1]), p.filters * K);
  }
  if (want_db) {
    op_util::ZeroReq(ctx, args->req[2], Ptr(args->in_grad[2]), p.filters);
  }
  for (int n0 = 0; n0 < p.batch; n0 += p.group) {
    const int gg = std::min(p.group, p.batch - n0);
    const int ld = static_cast<int>(gg * P);
    gpu::Gather(Ptr(args->out_grad[0]) + n0 * p.filters * P, gg, p.filters, P,
                tmp, stream);
    if (want_db) {
      blas::Gemm(ctx.device, false, false, p.filters, 1, ld, 1.0f, tmp, ld,
                 ones, 1, 1.0f, Ptr(args->in_grad[2]), 1);
    }
    if (want_dw) {
      gpu::Im2Col(g, Ptr(args->in[0]) + n0 * g.image_size(), gg, col, stream);
      blas::Gemm(ctx.device, false, true, p.filters, static_cast<int>(K), ld,
                 1.0f, tmp, ld, col, ld, 1.0f, Ptr(args->in_grad[1]),
                 static_cast<int>(K));
    }
    if (args->req[0] != OpReq::kNull) {
      blas::Gemm(ctx.device, true, false, static_cast<int>(K), ld, p.filters,
                 1.0f, Ptr(args->in[1]), static_cast<int>(K), tmp, ld, 0.0f,
                 col, ld);
      gpu::Col2Im(g, col, gg, Ptr(args->in_grad[0]) + n0 * g.image_size(),
                  args->req[0] == OpReq::kAdd, stream);
    }
  }
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("Convolution", ConvolutionOp::Create);

}  // namespace kvtrain
