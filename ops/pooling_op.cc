// Pooling: shape inference and the CPU path (one plane per task).
#include "ops/pooling_op.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/cpu_math.h"
#include "ops/cudnn.h"
#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace {

using op_util::Ptr;

// Output planes per ParallelFor chunk: enough work to be worth a thread.
int64_t PlaneGrain(const PoolGeometry& g) {
  return std::max<int64_t>(1, (1 << 14) / std::max(1, g.h * g.w));
}

void ForwardPlane(PoolType type, const PoolGeometry& g, const float* in,
                  float* out, bool add) {
  const float scale = 1.0f / static_cast<float>(g.kh * g.kw);
  for (int oy = 0; oy < g.oh; ++oy) {
    const int ys = oy * g.sh - g.ph;
    const int y0 = std::max(ys, 0), y1 = std::min(ys + g.kh, g.h);
    for (int ox = 0; ox < g.ow; ++ox) {
      const int xs = ox * g.sw - g.pw;
      const int x0 = std::max(xs, 0), x1 = std::min(xs + g.kw, g.w);
      float v = type == PoolType::kMax ? -std::numeric_limits<float>::infinity()
                                       : 0.0f;
      for (int y = y0; y < y1; ++y) {
        const float* row = in + y * g.w;
        for (int x = x0; x < x1; ++x) {
          v = type == PoolType::kMax ? std::max(v, row[x]) : v + row[x];
        }
      }
      if (type == PoolType::kAvg) v *= scale;
      if (y0 >= y1 || x0 >= x1) v = 0.0f;
      float& o = out[oy * g.ow + ox];
      o = add ? o + v : v;
    }
  }
}

// Adds one plane's gradient onto din (already zeroed or holding the sum).
void BackwardPlane(PoolType type, const PoolGeometry& g, const float* in,
                   const float* out, const float* dout, float* din) {
  const float scale = 1.0f / static_cast<float>(g.kh * g.kw);
  for (int oy = 0; oy < g.oh; ++oy) {
    const int ys = oy * g.sh - g.ph;
    const int y0 = std::max(ys, 0), y1 = std::min(ys + g.kh, g.h);
    for (int ox = 0; ox < g.ow; ++ox) {
      const int xs = ox * g.sw - g.pw;
      const int x0 = std::max(xs, 0), x1 = std::min(xs + g.kw, g.w);
      const int o = oy * g.ow + ox;
      if (type == PoolType::kAvg) {
        const float d = dout[o] * scale;
        for (int y = y0; y < y1; ++y) {
          for (int x = x0; x < x1; ++x) din[y * g.w + x] += d;
        }
        continue;
      }
      bool found = false;
      for (int y = y0; y < y1 && !found; ++y) {
        for (int x = x0; x < x1; ++x) {
          if (in[y * g.w + x] == out[o]) {
            din[y * g.w + x] += dout[o];
            found = true;
            break;
          }
        }
      }
    }
  }
}

// The common 2x2, stride 2, no-padding max pooling, branch-free so it
// vectorises; same results as ForwardPlane/BackwardPlane.
bool IsMax2x2(PoolType type, const PoolGeometry& g) {
  return type == PoolType::kMax && g.kh == 2 && g.kw == 2 && g.sh == 2 &&
         g.sw == 2 && g.ph == 0 && g.pw == 0;
}

KV_MULTI_ISA void ForwardPlaneMax2x2(const PoolGeometry& g, const float* in,
                                     float* out, bool add) {
  for (int oy = 0; oy < g.oh; ++oy) {
    const float* r0 = in + 2 * oy * g.w;
    const float* r1 = r0 + g.w;
    float* o = out + oy * g.ow;
    for (int ox = 0; ox < g.ow; ++ox) {
      const float v = std::max(std::max(r0[2 * ox], r0[2 * ox + 1]),
                               std::max(r1[2 * ox], r1[2 * ox + 1]));
      o[ox] = add ? o[ox] + v : v;
    }
  }
}

// The gradient of one 2x2 window: `grad` to its first element equal to the
// maximum `m` (row-major), zero to the others; no branches.
inline void SelectFirstMax(const float* r0, const float* r1, float m,
                           float grad, float* ga, float* gb, float* gc,
                           float* ge) {
  const int a = r0[0] == m;
  const int b = (1 - a) & (r0[1] == m);
  const int c = (1 - a) & (1 - b) & (r1[0] == m);
  const int e = (1 - a) & (1 - b) & (1 - c) & (r1[1] == m);
  *ga = a ? grad : 0.0f;
  *gb = b ? grad : 0.0f;
  *gc = c ? grad : 0.0f;
  *ge = e ? grad : 0.0f;
}

// Writes (or adds) the whole plane's gradient: each input is in at most one
// window, and gets the window's gradient if it is the first maximum. Built
// for the baseline ISA only (4-wide vectors): rows of windows are short
// (LeNet's 12 and 4), and the AVX-512 clone's 16-wide loop never ran on
// them, leaving every window to its scalar remainder (pool1's backward:
// 1.7 ms -> 0.36 ms a batch of 100).
void BackwardPlaneMax2x2(const PoolGeometry& g, const float* in,
                         const float* out, const float* dout, float* din,
                         bool add) {
  if (!add && (g.h % 2 || g.w % 2)) {
    std::memset(din, 0, g.h * g.w * sizeof(float));  // uncovered edges
  }
  for (int oy = 0; oy < g.oh; ++oy) {
    const float* r0 = in + 2 * oy * g.w;
    const float* r1 = r0 + g.w;
    float* d0 = din + 2 * oy * g.w;
    float* d1 = d0 + g.w;
    const float* o = out + oy * g.ow;
    const float* d = dout + oy * g.ow;
    if (add) {
      for (int ox = 0; ox < g.ow; ++ox) {
        float ga, gb, gc, ge;
        SelectFirstMax(r0 + 2 * ox, r1 + 2 * ox, o[ox], d[ox], &ga, &gb, &gc, &ge);
        d0[2 * ox] += ga;
        d0[2 * ox + 1] += gb;
        d1[2 * ox] += gc;
        d1[2 * ox + 1] += ge;
      }
    } else {
      for (int ox = 0; ox < g.ow; ++ox) {
        float ga, gb, gc, ge;
        SelectFirstMax(r0 + 2 * ox, r1 + 2 * ox, o[ox], d[ox], &ga, &gb, &gc, &ge);
        d0[2 * ox] = ga;
        d0[2 * ox + 1] = gb;
        d1[2 * ox] = gc;
        d1[2 * ox + 1] = ge;
      }
    }
  }
}

}  // namespace

StatusOr<std::unique_ptr<Operator>> PoolingOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<PoolingOp>(new PoolingOp);
  AttrReader r(spec.Describe(), spec.attrs);
  int type = 0;
  KV_RETURN_IF_ERROR(r.Enum("pool_type", {"max", "avg"}, &type, 0));
  op->type_ = static_cast<PoolType>(type);
  KV_RETURN_IF_ERROR(r.Bool("global_pool", &op->global_, false));
  std::vector<int64_t> kernel, stride, pad;
  bool has_kernel = false, has_stride = false, has_pad = false;
  KV_RETURN_IF_ERROR(r.Tuple("kernel", 2, 1, &kernel, &has_kernel));
  KV_RETURN_IF_ERROR(r.Tuple("stride", 2, 1, &stride, &has_stride));
  KV_RETURN_IF_ERROR(r.Tuple("pad", 2, 0, &pad, &has_pad));
  KV_RETURN_IF_ERROR(r.Bool("cudnn_off", &op->cudnn_off_, true));
  KV_RETURN_IF_ERROR(r.Finish());
  if (!has_kernel && !op->global_) {
    return Status::InvalidArgument(
        spec.Describe() +
        ": missing attribute kernel, e.g. (2, 2) (or global_pool=true)");
  }
  for (int i = 0; i < 2; ++i) {
    if (has_kernel) op->kernel_[i] = kernel[i];
    if (has_stride) op->stride_[i] = stride[i];
    if (has_pad) op->pad_[i] = pad[i];
    if (has_pad && pad[i] >= op->kernel_[i] && !op->global_) {
      return Status::InvalidArgument(spec.Describe() +
                                     ": pad must be smaller than the kernel");
    }
  }
  return std::unique_ptr<Operator>(std::move(op));
}

PoolGeometry PoolingOp::Geometry(const Shape& d) const {
  PoolGeometry g;
  g.h = static_cast<int>(d[2]);
  g.w = static_cast<int>(d[3]);
  if (global_) {
    g.kh = g.h;
    g.kw = g.w;
  } else {
    g.kh = static_cast<int>(kernel_[0]);
    g.kw = static_cast<int>(kernel_[1]);
    g.sh = static_cast<int>(stride_[0]);
    g.sw = static_cast<int>(stride_[1]);
    g.ph = static_cast<int>(pad_[0]);
    g.pw = static_cast<int>(pad_[1]);
  }
  g.oh = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

Status PoolingOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                             std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() != 4) {
    return Error(input_name(0) +
                 " must be 4-D (batch, channel, height, width), got " +
                 (d.ndim() == 0 ? std::string("an unknown shape")
                                : d.ToString()));
  }
  if (!global_ && (d[2] + 2 * pad_[0] < kernel_[0] ||
                   d[3] + 2 * pad_[1] < kernel_[1])) {
    return Error("kernel (" + std::to_string(kernel_[0]) + ", " +
                 std::to_string(kernel_[1]) +
                 ") is larger than the padded input " + d.ToString());
  }
  const PoolGeometry g = Geometry(d);
  (*out)[0] = Shape{d[0], d[1], g.oh, g.ow};
  return Status::OK();
}

BackwardNeeds PoolingOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0};
  if (type_ == PoolType::kMax) needs.outputs = {0};
  return needs;
}

Status PoolingOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const PoolGeometry g = Geometry(args->in[0].shape());
  const int64_t planes = args->in[0].dim(0) * args->in[0].dim(1);
  const float* in = Ptr(args->in[0]);
  float* out = Ptr(args->out[0]);
  const bool fast = IsMax2x2(type_, g);
  ParallelFor(planes, PlaneGrain(g), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const float* src = in + p * g.h * g.w;
      float* dst = out + p * g.oh * g.ow;
      if (fast) {
        ForwardPlaneMax2x2(g, src, dst, req == OpReq::kAdd);
      } else {
        ForwardPlane(type_, g, src, dst, req == OpReq::kAdd);
      }
    }
  });
  return Status::OK();
}

Status PoolingOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const PoolGeometry g = Geometry(args->in[0].shape());
  const int64_t planes = args->in[0].dim(0) * args->in[0].dim(1);
  const float* in = Ptr(args->in[0]);
  const float* out = Ptr(args->out[0]);
  const float* dout = Ptr(args->out_grad[0]);
  float* din = Ptr(args->in_grad[0]);
  const bool fast = IsMax2x2(type_, g);
  ParallelFor(planes, PlaneGrain(g), [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      float* d = din + p * g.h * g.w;
      const float* x = in + p * g.h * g.w;
      const int64_t o = p * g.oh * g.ow;
      if (fast) {
        BackwardPlaneMax2x2(g, x, out + o, dout + o, d, req == OpReq::kAdd);
        continue;
      }
      if (req != OpReq::kAdd) std::memset(d, 0, g.h * g.w * sizeof(float));
      BackwardPlane(type_, g, x, out + o, dout + o, d);
    }
  });
  return Status::OK();
}

#ifdef KVTRAIN_CUDA
namespace {

// The descriptors of one cuDNN pooling call.
struct CudnnPool {
  CudnnPool(cudnnHandle_t h, PoolType type, const PoolGeometry& g,
            const Shape& data)
      : handle(h) {
    x.Set(data[0], data[1], g.h, g.w);
    y.Set(data[0], data[1], g.oh, g.ow);
    pool.Set(type == PoolType::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC
                                    : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
             g.kh, g.kw, g.ph, g.pw, g.sh, g.sw);
  }
  cudnnHandle_t handle;
  cudnn::TensorDesc x, y;
  cudnn::PoolDesc pool;
};

// cuDNN's handle when it runs this call, else null (reference kernels).
cudnnHandle_t PoolHandle(bool cudnn_off, const OpContext& ctx,
                         const Shape& data) {
  if (cudnn_off || !cudnn::FitsInt({data[0], data[1], data.NumElements()})) {
    return nullptr;
  }
  return cudnn::Handle(ctx.device);
}

}  // namespace
#endif

Status PoolingOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const Shape& shape = args->in[0].shape();
  if (cudnnHandle_t h = PoolHandle(cudnn_off_, ctx, shape)) {
    CudnnPool c(h, type_, Geometry(shape), shape);
    KV_CUDNN_CHECK(cudnnPoolingForward(
        h, c.pool.get(), &cudnn::kOne, c.x.get(), Ptr(args->in[0]),
        cudnn::Beta(args->req[0] == OpReq::kAdd), c.y.get(),
        Ptr(args->out[0])));
    return Status::OK();
  }
  gpu::PoolForward(type_, Geometry(args->in[0].shape()),
                   args->in[0].dim(0) * args->in[0].dim(1), Ptr(args->in[0]),
                   Ptr(args->out[0]), args->req[0] == OpReq::kAdd,
                   ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status PoolingOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const Shape& shape = args->in[0].shape();
  if (cudnnHandle_t h = PoolHandle(cudnn_off_, ctx, shape)) {
    CudnnPool c(h, type_, Geometry(shape), shape);
    KV_CUDNN_CHECK(cudnnPoolingBackward(
        h, c.pool.get(), &cudnn::kOne, c.y.get(), Ptr(args->out[0]), c.y.get(),
        Ptr(args->out_grad[0]), c.x.get(), Ptr(args->in[0]),
        cudnn::Beta(args->req[0] == OpReq::kAdd), c.x.get(),
        Ptr(args->in_grad[0])));
    return Status::OK();
  }
  gpu::PoolBackward(type_, Geometry(args->in[0].shape()),
                    args->in[0].dim(0) * args->in[0].dim(1), Ptr(args->in[0]),
                    Ptr(args->out[0]), Ptr(args->out_grad[0]),
                    Ptr(args->in_grad[0]), args->req[0] == OpReq::kAdd,
                    ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("Pooling", PoolingOp::Create);

}  // namespace kvtrain
