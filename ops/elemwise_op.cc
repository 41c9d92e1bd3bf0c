// Elementwise binary ops: shape inference, CPU loops, GPU dispatch.
#include "ops/elemwise_op.h"

#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace {

using op_util::Ptr;

template <typename F>
void BinaryLoop(const float* a, const float* b, float* out, int64_t s,
                int64_t e, bool add, F f) {
  // Separate loops: a written output may hold garbage that must not be read.
  if (add) {
#pragma GCC ivdep
    for (int64_t i = s; i < e; ++i) out[i] += f(a[i], b[i]);
  } else {
#pragma GCC ivdep
    for (int64_t i = s; i < e; ++i) out[i] = f(a[i], b[i]);
  }
}

void BinaryCpu(BinaryKind kind, const float* a, const float* b, float* out,
               int64_t n, bool add) {
  ParallelFor(n, op_util::kElementwiseGrain, [&](int64_t s, int64_t e) {
    switch (kind) {
      case BinaryKind::kAdd:
        BinaryLoop(a, b, out, s, e, add, [](float x, float y) { return x + y; });
        break;
      case BinaryKind::kSub:
        BinaryLoop(a, b, out, s, e, add, [](float x, float y) { return x - y; });
        break;
      case BinaryKind::kMul:
        BinaryLoop(a, b, out, s, e, add, [](float x, float y) { return x * y; });
        break;
    }
  });
}

void Binary(const OpContext& ctx, BinaryKind kind, const float* a,
            const float* b, float* out, int64_t n, bool add) {
  if (ctx.device->device().is_cpu()) {
    BinaryCpu(kind, a, b, out, n, add);
    return;
  }
#ifdef KVTRAIN_CUDA
  gpu::Binary(kind, a, b, out, n, add, ctx.device->stream());
#endif
}

}  // namespace

StatusOr<std::unique_ptr<Operator>> ElemwiseOp::CreateFor(BinaryKind kind,
                                                          const OpSpec& spec) {
  auto op = std::unique_ptr<ElemwiseOp>(new ElemwiseOp);
  op->kind_ = kind;
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(std::move(op));
}

Status ElemwiseOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                              std::vector<Shape>* aux) const {
  Shape& lhs = (*in)[0];
  Shape& rhs = (*in)[1];
  if (lhs.ndim() == 0 && rhs.ndim() == 0) {
    return Error("the shapes of " + input_name(0) + " and " + input_name(1) +
                 " are unknown");
  }
  if (lhs.ndim() == 0) lhs = rhs;
  if (rhs.ndim() == 0) rhs = lhs;
  if (lhs != rhs) {
    return Error(input_name(0) + " is " + lhs.ToString() + " but " +
                 input_name(1) + " is " + rhs.ToString() +
                 "; elementwise ops need equal shapes");
  }
  (*out)[0] = lhs;
  return Status::OK();
}

BackwardNeeds ElemwiseOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  if (kind_ == BinaryKind::kMul) needs.inputs = {0, 1};
  return needs;
}

std::vector<std::pair<int, int>> ElemwiseOp::ForwardInplace() const {
  if (kind_ == BinaryKind::kMul) return {};
  return {{0, 0}};
}

Status ElemwiseOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  if (args->req[0] == OpReq::kNull) return Status::OK();
  Binary(ctx, kind_, Ptr(args->in[0]), Ptr(args->in[1]), Ptr(args->out[0]),
         args->in[0].size(), args->req[0] == OpReq::kAdd);
  return Status::OK();
}

Status ElemwiseOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const float* dy = Ptr(args->out_grad[0]);
  const int64_t n = args->in[0].size();
  for (int i = 0; i < 2; ++i) {
    const OpReq req = args->req[i];
    if (req == OpReq::kNull) continue;
    float* dx = Ptr(args->in_grad[i]);
    if (kind_ == BinaryKind::kMul) {
      // d lhs = dy * rhs, d rhs = dy * lhs.
      Binary(ctx, BinaryKind::kMul, dy, Ptr(args->in[1 - i]), dx, n,
             req == OpReq::kAdd);
    } else if (kind_ == BinaryKind::kSub && i == 1) {
      op_util::ZeroReq(ctx, req, dx, n);
      op_util::Axpy(ctx, -1.0f, dy, dx, n);
    } else {
      op_util::CopyReq(ctx, req, dy, dx, n);
    }
  }
  return Status::OK();
}

Status ElemwiseOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status ElemwiseOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("elemwise_add", ElemwiseOp::Create<BinaryKind::kAdd>);
KV_REGISTER_OP("elemwise_sub", ElemwiseOp::Create<BinaryKind::kSub>);
KV_REGISTER_OP("elemwise_mul", ElemwiseOp::Create<BinaryKind::kMul>);

}  // namespace kvtrain
