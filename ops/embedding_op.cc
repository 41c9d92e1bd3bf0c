// Embedding: shape inference, the index check, the CPU path (a parallel
// gather; a scatter split by columns, so duplicates need no locks and the
// sums do not depend on the thread count) and GPU dispatch.
#include "ops/embedding_op.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <sstream>

#include "ops/embedding_kernels.h"
#include "ops/op_util.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {

using op_util::Ptr;

namespace {

// The largest input_dim: every integer up to 2^24 is a float32, above it
// only some are, and those rows could not be named by the data.
constexpr int64_t kMaxInputDim = int64_t{1} << 24;

// "[1, 2]": the coordinates of flat element `i` of `shape`.
std::string Position(const Shape& shape, int64_t i) {
  std::vector<int64_t> at(shape.ndim());
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    at[d] = i % shape[d];
    i /= shape[d];
  }
  std::string s = "[";
  for (int d = 0; d < shape.ndim(); ++d) {
    s += (d == 0 ? "" : ", ") + std::to_string(at[d]);
  }
  return s + "]";
}

}  // namespace

StatusOr<std::unique_ptr<Operator>> EmbeddingOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<EmbeddingOp>(new EmbeddingOp);
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Int("input_dim", &op->input_dim_, 1, kMaxInputDim));
  KV_RETURN_IF_ERROR(r.Int("output_dim", &op->output_dim_, 1, INT_MAX));
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(std::move(op));
}

Status EmbeddingOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                               std::vector<Shape>* aux) const {
  const Shape& data = (*in)[0];
  if (data.ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  const Shape want{input_dim_, output_dim_};
  Shape& weight = (*in)[1];
  if (weight.ndim() != 0 && weight != want) {
    return Error(input_name(1) + " is " + weight.ToString() +
                 ", expected (input_dim, output_dim) = " + want.ToString());
  }
  weight = want;
  std::vector<int64_t> dims = data.dims();
  dims.push_back(output_dim_);
  (*out)[0] = Shape(std::move(dims));
  return Status::OK();
}

BackwardNeeds EmbeddingOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0};
  return needs;
}

Status EmbeddingOp::CheckIndices(const Tensor& data) const {
  const float* idx = Ptr(data);
  const int64_t n = data.size();
  const float rows = static_cast<float>(input_dim_);  // exact: <= 2^24
  for (int64_t i = 0; i < n; ++i) {
    const float v = idx[i];
    // Written so that NaN fails too.
    if (v >= 0.0f && v < rows && std::trunc(v) == v) continue;
    std::ostringstream value;
    value.precision(9);
    value << v;
    const std::string range = "[0, " + std::to_string(input_dim_) + ")";
    return Error(input_name(0) + Position(data.shape(), i) + " = " +
                 value.str() + " is not a row index: expected an integer in " +
                 range);
  }
  return Status::OK();
}

Status EmbeddingOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  KV_RETURN_IF_ERROR(CheckIndices(args->in[0]));
  const float* idx = Ptr(args->in[0]);
  const float* w = Ptr(args->in[1]);
  float* y = Ptr(args->out[0]);
  const int64_t dim = output_dim_;
  const bool add = req == OpReq::kAdd;
  ParallelFor(args->in[0].size(),
              std::max<int64_t>(1, op_util::kElementwiseGrain / dim),
              [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) {
                  const float* src = w + static_cast<int64_t>(idx[i]) * dim;
                  float* dst = y + i * dim;
                  if (add) {
                    for (int64_t c = 0; c < dim; ++c) dst[c] += src[c];
                  } else {
                    std::memcpy(dst, src, dim * sizeof(float));
                  }
                }
              });
  return Status::OK();
}

Status EmbeddingOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  const int64_t n = args->in[0].size();
  op_util::ZeroReq(ctx, args->req[0], Ptr(args->in_grad[0]), n);
  const OpReq req = args->req[1];
  if (req == OpReq::kNull) return Status::OK();
  // Checked again: the scatter writes where the indices say.
  KV_RETURN_IF_ERROR(CheckIndices(args->in[0]));
  const float* idx = Ptr(args->in[0]);
  const float* dy = Ptr(args->out_grad[0]);
  float* dw = Ptr(args->in_grad[1]);
  const int64_t dim = output_dim_;
  op_util::ZeroReq(ctx, req, dw, input_dim_ * dim);
  // Each chunk owns a slice of columns of every row and adds the positions
  // in order: duplicates accumulate without races, and each sum is the
  // serial one. At least 16 columns (a cache line) per chunk.
  const int64_t grain = std::max<int64_t>(
      16, op_util::kElementwiseGrain / std::max<int64_t>(n, 1));
  ParallelFor(dim, grain, [&](int64_t cb, int64_t ce) {
    for (int64_t i = 0; i < n; ++i) {
      const float* src = dy + i * dim;
      float* dst = dw + static_cast<int64_t>(idx[i]) * dim;
      for (int64_t c = cb; c < ce; ++c) dst[c] += src[c];
    }
  });
  return Status::OK();
}

Status EmbeddingOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  gpu::EmbeddingForward(Ptr(args->in[0]), args->in[0].size(), Ptr(args->in[1]),
                        input_dim_, output_dim_, Ptr(args->out[0]),
                        req == OpReq::kAdd, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status EmbeddingOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const int64_t n = args->in[0].size();
  op_util::ZeroReq(ctx, args->req[0], Ptr(args->in_grad[0]), n);
  const OpReq req = args->req[1];
  if (req == OpReq::kNull) return Status::OK();
  float* dw = Ptr(args->in_grad[1]);
  op_util::ZeroReq(ctx, req, dw, input_dim_ * output_dim_);
  gpu::EmbeddingBackward(Ptr(args->in[0]), n, Ptr(args->out_grad[0]),
                         input_dim_, output_dim_, dw, ctx.device->stream());
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("Embedding", EmbeddingOp::Create);

}  // namespace kvtrain
