// Broadcasting binary ops: shapes, and the CPU path (one pass over the
// output, an index counter carrying each input's offset).
#include "ops/broadcast_op.h"

#include <algorithm>
#include <string>

#include "ops/op_util.h"

namespace kvtrain {
namespace {

using op_util::Ptr;

// Calls fn(i, lhs offset, rhs offset) for every output element in order.
template <typename Fn>
void ForEach(const BroadcastGeometry& g, Fn fn) {
  int64_t coord[BroadcastGeometry::kMaxDims] = {};
  int64_t l = 0, r = 0;
  for (int64_t i = 0; i < g.size; ++i) {
    fn(i, l, r);
    for (int d = g.ndim - 1; d >= 0; --d) {
      l += g.lhs_stride[d];
      r += g.rhs_stride[d];
      if (++coord[d] < g.dims[d]) break;
      l -= g.lhs_stride[d] * g.dims[d];
      r -= g.rhs_stride[d] * g.dims[d];
      coord[d] = 0;
    }
  }
}

}  // namespace

BroadcastGeometry MakeBroadcastGeometry(const Shape& lhs, const Shape& rhs) {
  BroadcastGeometry g;
  g.ndim = std::max(lhs.ndim(), rhs.ndim());
  int64_t ls = 1, rs = 1;
  g.size = 1;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int li = d - (g.ndim - lhs.ndim()), ri = d - (g.ndim - rhs.ndim());
    const int64_t a = li >= 0 ? lhs[li] : 1, b = ri >= 0 ? rhs[ri] : 1;
    g.dims[d] = std::max(a, b);
    g.lhs_stride[d] = a == 1 ? 0 : ls;
    g.rhs_stride[d] = b == 1 ? 0 : rs;
    ls *= a;
    rs *= b;
    g.size *= g.dims[d];
  }
  return g;
}

StatusOr<std::unique_ptr<Operator>> BroadcastOp::CreateFor(BroadcastKind kind,
                                                           const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  auto op = std::unique_ptr<BroadcastOp>(new BroadcastOp);
  op->kind_ = kind;
  return std::unique_ptr<Operator>(std::move(op));
}

Status BroadcastOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                               std::vector<Shape>* aux) const {
  const Shape& lhs = (*in)[0];
  const Shape& rhs = (*in)[1];
  if (lhs.ndim() == 0 || rhs.ndim() == 0) {
    return Error("the shape of " + input_name(lhs.ndim() == 0 ? 0 : 1) +
                 " is unknown");
  }
  const int ndim = std::max(lhs.ndim(), rhs.ndim());
  if (ndim > BroadcastGeometry::kMaxDims) {
    return Error("broadcasts at most " +
                 std::to_string(BroadcastGeometry::kMaxDims) +
                 " dimensions, got " + std::to_string(ndim));
  }
  std::vector<int64_t> dims(static_cast<size_t>(ndim));
  for (int d = 0; d < ndim; ++d) {
    const int li = d - (ndim - lhs.ndim()), ri = d - (ndim - rhs.ndim());
    const int64_t a = li >= 0 ? lhs[li] : 1, b = ri >= 0 ? rhs[ri] : 1;
    if (a != b && a != 1 && b != 1) {
      return Error(input_name(0) + " is " + lhs.ToString() + " and " +
                   input_name(1) + " is " + rhs.ToString() + ": dimension " +
                   std::to_string(d) + " is " + std::to_string(a) +
                   " against " + std::to_string(b) +
                   " (broadcasting needs equal sizes or 1)");
    }
    dims[static_cast<size_t>(d)] = std::max(a, b);
  }
  (*out)[0] = Shape(dims);
  return Status::OK();
}

BackwardNeeds BroadcastOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  if (BroadcastGradientReads(kind_)) needs.inputs = {0, 1};
  return needs;
}

Status BroadcastOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const BroadcastGeometry g =
      MakeBroadcastGeometry(args->in[0].shape(), args->in[1].shape());
  const float* a = Ptr(args->in[0]);
  const float* b = Ptr(args->in[1]);
  float* y = Ptr(args->out[0]);
  const bool add = req == OpReq::kAdd;
  const BroadcastKind kind = kind_;
  ForEach(g, [&](int64_t i, int64_t l, int64_t r) {
    const float v = BroadcastApply(kind, a[l], b[r]);
    y[i] = add ? y[i] + v : v;
  });
  return Status::OK();
}

Status BroadcastOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const BroadcastGeometry g =
      MakeBroadcastGeometry(args->in[0].shape(), args->in[1].shape());
  const bool reads = BroadcastGradientReads(kind_);
  const float* a = reads ? Ptr(args->in[0]) : nullptr;
  const float* b = reads ? Ptr(args->in[1]) : nullptr;
  const float* dy = Ptr(args->out_grad[0]);
  const BroadcastKind kind = kind_;
  for (int k = 0; k < 2; ++k) {
    const OpReq req = args->req[k];
    if (req == OpReq::kNull) continue;
    float* dx = Ptr(args->in_grad[k]);
    op_util::ZeroReq(ctx, req, dx, args->in_grad[k].size());
    ForEach(g, [&](int64_t i, int64_t l, int64_t r) {
      const float p = reads ? BroadcastPartial(kind, k, a[l], b[r])
                            : BroadcastPartial(kind, k, 0.0f, 1.0f);
      dx[k == 0 ? l : r] += dy[i] * p;
    });
  }
  return Status::OK();
}

Status BroadcastOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  gpu::BroadcastForward(
      kind_, MakeBroadcastGeometry(args->in[0].shape(), args->in[1].shape()),
      Ptr(args->in[0]), Ptr(args->in[1]), Ptr(args->out[0]),
      args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status BroadcastOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const BroadcastGeometry g =
      MakeBroadcastGeometry(args->in[0].shape(), args->in[1].shape());
  const bool reads = BroadcastGradientReads(kind_);
  for (int k = 0; k < 2; ++k) {
    const OpReq req = args->req[k];
    if (req == OpReq::kNull) continue;
    op_util::ZeroReq(ctx, req, Ptr(args->in_grad[k]), args->in_grad[k].size());
    gpu::BroadcastBackward(kind_, g, k, reads ? Ptr(args->in[0]) : nullptr,
                           reads ? Ptr(args->in[1]) : nullptr,
                           Ptr(args->out_grad[0]), Ptr(args->in_grad[k]),
                           ctx.device->stream());
  }
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("broadcast_add", BroadcastOp::Create<BroadcastKind::kAdd>);
KV_REGISTER_OP("broadcast_sub", BroadcastOp::Create<BroadcastKind::kSub>);
KV_REGISTER_OP("broadcast_mul", BroadcastOp::Create<BroadcastKind::kMul>);
KV_REGISTER_OP("broadcast_div", BroadcastOp::Create<BroadcastKind::kDiv>);
KV_REGISTER_OP("broadcast_maximum", BroadcastOp::Create<BroadcastKind::kMaximum>);
KV_REGISTER_OP("broadcast_minimum", BroadcastOp::Create<BroadcastKind::kMinimum>);
KV_REGISTER_OP("broadcast_power", BroadcastOp::Create<BroadcastKind::kPower>);
KV_REGISTER_OP("broadcast_equal", BroadcastOp::Create<BroadcastKind::kEqual>);
KV_REGISTER_OP("broadcast_not_equal", BroadcastOp::Create<BroadcastKind::kNotEqual>);
KV_REGISTER_OP("broadcast_greater", BroadcastOp::Create<BroadcastKind::kGreater>);
KV_REGISTER_OP("broadcast_greater_equal", BroadcastOp::Create<BroadcastKind::kGreaterEqual>);
KV_REGISTER_OP("broadcast_lesser", BroadcastOp::Create<BroadcastKind::kLesser>);
KV_REGISTER_OP("broadcast_lesser_equal", BroadcastOp::Create<BroadcastKind::kLesserEqual>);

// broadcast_to / broadcast_axis: the geometry of data against the output
// shape, with no right-hand side (its strides 0: the kernels read data's
// first element there and never use it).
namespace {

BroadcastGeometry RepeatGeometry(const Shape& in, const Shape& out) {
  BroadcastGeometry g = MakeBroadcastGeometry(in, out);
  for (int64_t& s : g.rhs_stride) s = 0;
  return g;
}

}  // namespace

StatusOr<std::unique_ptr<Operator>> BroadcastToOp::CreateTo(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  auto op = std::unique_ptr<BroadcastToOp>(new BroadcastToOp);
  bool present = false;
  KV_RETURN_IF_ERROR(r.IntList("shape", 0, &op->shape_, &present));
  KV_RETURN_IF_ERROR(r.Finish());
  if (!present || op->shape_.empty()) {
    return Status::InvalidArgument(spec.Describe() + ": attribute shape is required");
  }
  return std::unique_ptr<Operator>(std::move(op));
}

StatusOr<std::unique_ptr<Operator>> BroadcastToOp::CreateAxis(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  auto op = std::unique_ptr<BroadcastToOp>(new BroadcastToOp);
  op->by_axis_ = true;
  bool has_axis = false, has_size = false;
  KV_RETURN_IF_ERROR(r.IntList("axis", -BroadcastGeometry::kMaxDims, &op->axis_, &has_axis));
  KV_RETURN_IF_ERROR(r.IntList("size", 1, &op->size_, &has_size));
  KV_RETURN_IF_ERROR(r.Finish());
  if (op->axis_.size() != op->size_.size()) {
    return Status::InvalidArgument(spec.Describe() + ": " + std::to_string(op->axis_.size()) +
                                   " axes but " + std::to_string(op->size_.size()) +
                                   " sizes (one size per axis)");
  }
  return std::unique_ptr<Operator>(std::move(op));
}

StatusOr<std::unique_ptr<Operator>> BroadcastToOp::CreateLike(const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  auto op = std::unique_ptr<BroadcastToOp>(new BroadcastToOp);
  op->like_ = true;
  return std::unique_ptr<Operator>(std::move(op));
}

Status BroadcastToOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                                 std::vector<Shape>* aux) const {
  const Shape& data = (*in)[0];
  if (data.ndim() == 0) return Error("the shape of " + input_name(0) + " is unknown");
  if (like_) {
    const Shape& like = (*in)[1];
    if (like.ndim() == 0) return Error("the shape of " + input_name(1) + " is unknown");
    bool fits = like.ndim() == data.ndim() && like.ndim() <= BroadcastGeometry::kMaxDims;
    for (int d = 0; fits && d < data.ndim(); ++d) fits = data[d] == like[d] || data[d] == 1;
    if (!fits) {
      return Error(input_name(0) + " " + data.ToString() + " does not broadcast to " +
                   input_name(1) + "'s shape " + like.ToString() +
                   " (as many dimensions, each equal or 1)");
    }
    (*out)[0] = like;
    return Status::OK();
  }
  if (data.ndim() > BroadcastGeometry::kMaxDims) {
    return Error("broadcasts at most " + std::to_string(BroadcastGeometry::kMaxDims) +
                 " dimensions, got " + std::to_string(data.ndim()));
  }
  std::vector<int64_t> dims(static_cast<size_t>(data.ndim()));
  for (int d = 0; d < data.ndim(); ++d) dims[static_cast<size_t>(d)] = data[d];
  if (by_axis_) {
    for (size_t i = 0; i < axis_.size(); ++i) {
      int64_t a = axis_[i];
      if (a < 0) a += data.ndim();
      if (a < 0 || a >= data.ndim()) {
        return Error("axis " + std::to_string(axis_[i]) + " is out of range for " +
                     input_name(0) + " of shape " + data.ToString());
      }
      if (data[static_cast<int>(a)] != 1) {
        return Error("axis " + std::to_string(axis_[i]) + " of " + input_name(0) + " " +
                     data.ToString() + " has size " +
                     std::to_string(data[static_cast<int>(a)]) + "; only size 1 broadcasts");
      }
      dims[static_cast<size_t>(a)] = size_[i];
    }
  } else {
    if (static_cast<int>(shape_.size()) != data.ndim()) {
      return Error("shape " + Shape(shape_).ToString() + " has " +
                   std::to_string(shape_.size()) + " dimensions but " + input_name(0) +
                   " is " + data.ToString());
    }
    for (int d = 0; d < data.ndim(); ++d) {
      const int64_t want = shape_[static_cast<size_t>(d)];
      if (want == 0 || want == data[d]) continue;  // 0: as data
      if (data[d] != 1) {
        return Error(input_name(0) + " is " + data.ToString() + " and shape is " +
                     Shape(shape_).ToString() + ": dimension " + std::to_string(d) + " is " +
                     std::to_string(data[d]) + " against " + std::to_string(want) +
                     " (broadcasting needs equal sizes or 1)");
      }
      dims[static_cast<size_t>(d)] = want;
    }
  }
  (*out)[0] = Shape(dims);
  return Status::OK();
}

Status BroadcastToOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const BroadcastGeometry g = RepeatGeometry(args->in[0].shape(), args->out[0].shape());
  const float* a = Ptr(args->in[0]);
  float* y = Ptr(args->out[0]);
  const bool add = req == OpReq::kAdd;
  ForEach(g, [&](int64_t i, int64_t l, int64_t) { y[i] = add ? y[i] + a[l] : a[l]; });
  return Status::OK();
}

Status BroadcastToOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  if (like_ && args->req[1] != OpReq::kNull) {  // rhs gives its shape only
    op_util::ZeroReq(ctx, args->req[1], Ptr(args->in_grad[1]), args->in_grad[1].size());
  }
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  const BroadcastGeometry g =
      RepeatGeometry(args->in_grad[0].shape(), args->out_grad[0].shape());
  float* dx = Ptr(args->in_grad[0]);
  const float* dy = Ptr(args->out_grad[0]);
  op_util::ZeroReq(ctx, req, dx, args->in_grad[0].size());
  ForEach(g, [&](int64_t i, int64_t l, int64_t) { dx[l] += dy[i]; });
  return Status::OK();
}

Status BroadcastToOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (args->req[0] == OpReq::kNull) return Status::OK();
  const float* a = Ptr(args->in[0]);
  gpu::BroadcastForward(BroadcastKind::kLeft,
                        RepeatGeometry(args->in[0].shape(), args->out[0].shape()), a, a,
                        Ptr(args->out[0]), args->req[0] == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status BroadcastToOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  if (like_ && args->req[1] != OpReq::kNull) {
    op_util::ZeroReq(ctx, args->req[1], Ptr(args->in_grad[1]), args->in_grad[1].size());
  }
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  op_util::ZeroReq(ctx, req, Ptr(args->in_grad[0]), args->in_grad[0].size());
  gpu::BroadcastBackward(BroadcastKind::kLeft,
                         RepeatGeometry(args->in_grad[0].shape(), args->out_grad[0].shape()),
                         0, nullptr, nullptr, Ptr(args->out_grad[0]), Ptr(args->in_grad[0]),
                         ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("broadcast_to", BroadcastToOp::CreateTo);
KV_REGISTER_OP("broadcast_axis", BroadcastToOp::CreateAxis);
KV_REGISTER_OP("broadcast_like", BroadcastToOp::CreateLike);

}  // namespace kvtrain
