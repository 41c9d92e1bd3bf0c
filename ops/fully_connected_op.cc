// FullyConnected: shape inference, CPU and GPU paths (GEMMs only).
#include "ops/fully_connected_op.h"

#include <climits>
#include <cstring>

#include "ops/op_util.h"
#include "tensor/blas.h"

#ifdef KVTRAIN_CUDA
#include "tensor/fill_kernels.h"
#endif

namespace kvtrain {

using op_util::Beta;
using op_util::Ptr;

StatusOr<std::unique_ptr<Operator>> FullyConnectedOp::Create(
    const OpSpec& spec) {
  auto op = std::unique_ptr<FullyConnectedOp>(new FullyConnectedOp);
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Int("num_hidden", &op->num_hidden_, 1, INT_MAX));
  KV_RETURN_IF_ERROR(r.Bool("no_bias", &op->no_bias_, false));
  KV_RETURN_IF_ERROR(r.Bool("flatten", &op->flatten_, true));
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(std::move(op));
}

std::vector<std::string> FullyConnectedOp::ListArguments() const {
  if (no_bias_) return {"data", "weight"};
  return {"data", "weight", "bias"};
}

Status FullyConnectedOp::InferShape(std::vector<Shape>* in,
                                    std::vector<Shape>* out,
                                    std::vector<Shape>* aux) const {
  const Shape& data = (*in)[0];
  if (data.ndim() < 1) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  const int64_t features =
      flatten_ ? data.Product(1, data.ndim()) : data[data.ndim() - 1];
  Shape& weight = (*in)[1];
  if (weight.ndim() != 0 && weight.ndim() == 2 && weight[0] == num_hidden_ &&
      weight[1] != features) {
    return Error("input has " + std::to_string(features) + " features but " +
                 input_name(1) + " is " + weight.ToString());
  }
  KV_RETURN_IF_ERROR(op_util::Assign(Describe(), input_name(1), &weight,
                                     Shape{num_hidden_, features}));
  if (!no_bias_) {
    KV_RETURN_IF_ERROR(op_util::Assign(Describe(), input_name(2), &(*in)[2],
                                       Shape{num_hidden_}));
  }
  if (flatten_) {
    (*out)[0] = Shape{data.ndim() == 0 ? 1 : data[0], num_hidden_};
  } else {
    std::vector<int64_t> dims = data.dims();
    dims.back() = num_hidden_;
    (*out)[0] = Shape(dims);
  }
  return Status::OK();
}

BackwardNeeds FullyConnectedOp::DeclareBackwardNeeds() const {
  BackwardNeeds needs;
  needs.inputs = {0, 1};
  return needs;
}

size_t FullyConnectedOp::WorkspaceBytes(const std::vector<Shape>& in_shapes,
                                        const Device& device) const {
  // A ones vector of length rows for the GPU bias GEMMs.
  if (device.is_cpu() || no_bias_) return 0;
  const Shape& d = in_shapes[0];
  const int64_t rows = flatten_ ? d[0] : d.Product(0, d.ndim() - 1);
  return rows * sizeof(float);
}

void FullyConnectedOp::Dims(const Tensor& data, int* rows,
                            int* features) const {
  const Shape& d = data.shape();
  *features = static_cast<int>(flatten_ ? d.Product(1, d.ndim())
                                        : d[d.ndim() - 1]);
  *rows = static_cast<int>(data.size() / std::max(1, *features));
}

void FullyConnectedOp::Gemms(const OpContext& ctx, ForwardArgs* args) {
  int rows = 0, k = 0;
  Dims(args->in[0], &rows, &k);
  const int h = static_cast<int>(num_hidden_);
  blas::Gemm(ctx.device, false, true, rows, h, k, 1.0f, Ptr(args->in[0]), k,
             Ptr(args->in[1]), k, 1.0f, Ptr(args->out[0]), h);
}

Status FullyConnectedOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  int rows = 0, k = 0;
  Dims(args->in[0], &rows, &k);
  const int h = static_cast<int>(num_hidden_);
  float* out = Ptr(args->out[0]);
  // Start from the bias (or zero), then accumulate the product onto it.
  if (!no_bias_) {
    const float* bias = Ptr(args->in[2]);
    for (int r = 0; r < rows; ++r) {
      float* row = out + static_cast<int64_t>(r) * h;
      if (req == OpReq::kAdd) {
        for (int j = 0; j < h; ++j) row[j] += bias[j];
      } else {
        std::memcpy(row, bias, h * sizeof(float));
      }
    }
  } else if (req != OpReq::kAdd) {
    std::memset(out, 0, static_cast<size_t>(rows) * h * sizeof(float));
  }
  Gemms(ctx, args);
  return Status::OK();
}

void FullyConnectedOp::BackwardGemms(const OpContext& ctx,
                                     BackwardArgs* args) {
  int rows = 0, k = 0;
  Dims(args->in[0], &rows, &k);
  const int h = static_cast<int>(num_hidden_);
  const float* dout = Ptr(args->out_grad[0]);
  // dW (h x k) = dout^T (h x rows) * data (rows x k).
  if (args->req[1] != OpReq::kNull) {
    blas::Gemm(ctx.device, true, false, h, k, rows, 1.0f, dout, h,
               Ptr(args->in[0]), k, Beta(args->req[1]), Ptr(args->in_grad[1]),
               k);
  }
  // ddata (rows x k) = dout (rows x h) * W (h x k).
  if (args->req[0] != OpReq::kNull) {
    blas::Gemm(ctx.device, false, false, rows, k, h, 1.0f, dout, h,
               Ptr(args->in[1]), k, Beta(args->req[0]), Ptr(args->in_grad[0]),
               k);
  }
}

Status FullyConnectedOp::BackwardCpu(const OpContext& ctx,
                                     BackwardArgs* args) {
  BackwardGemms(ctx, args);
  if (!no_bias_ && args->req[2] != OpReq::kNull) {
    int rows = 0, k = 0;
    Dims(args->in[0], &rows, &k);
    const int64_t h = num_hidden_;
    const float* dout = Ptr(args->out_grad[0]);
    float* db = Ptr(args->in_grad[2]);
    if (args->req[2] != OpReq::kAdd) std::memset(db, 0, h * sizeof(float));
    for (int r = 0; r < rows; ++r) {
      const float* row = dout + r * h;
      for (int64_t j = 0; j < h; ++j) db[j] += row[j];
    }
  }
  return Status::OK();
}

Status FullyConnectedOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
#ifdef KVTRAIN_CUDA
  const OpReq req = args->req[0];
  if (req == OpReq::kNull) return Status::OK();
  int rows = 0, k = 0;
  Dims(args->in[0], &rows, &k);
  const int h = static_cast<int>(num_hidden_);
  float* out = Ptr(args->out[0]);
  if (!no_bias_) {
    // out = ones (rows x 1) * bias (1 x h) [+ out].
    float* ones = static_cast<float*>(ctx.workspace);
    gpu::FillPattern(ones, rows, 4, 0x3f800000u, ctx.device->stream());
    blas::Gemm(ctx.device, false, false, rows, h, 1, 1.0f, ones, 1,
               Ptr(args->in[2]), h, Beta(req), out, h);
  } else {
    op_util::ZeroReq(ctx, req, out, static_cast<int64_t>(rows) * h);
  }
  Gemms(ctx, args);
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

Status FullyConnectedOp::BackwardGpu(const OpContext& ctx,
                                     BackwardArgs* args) {
#ifdef KVTRAIN_CUDA
  BackwardGemms(ctx, args);
  if (!no_bias_ && args->req[2] != OpReq::kNull) {
    int rows = 0, k = 0;
    Dims(args->in[0], &rows, &k);
    const int h = static_cast<int>(num_hidden_);
    // db (1 x h) = ones (1 x rows) * dout (rows x h).
    float* ones = static_cast<float*>(ctx.workspace);
    gpu::FillPattern(ones, rows, 4, 0x3f800000u, ctx.device->stream());
    blas::Gemm(ctx.device, false, false, 1, h, rows, 1.0f, ones, rows,
               Ptr(args->out_grad[0]), h, Beta(args->req[2]),
               Ptr(args->in_grad[2]), h);
  }
  return Status::OK();
#else
  return Error("GPU path: kvtrain was built without CUDA");
#endif
}

KV_REGISTER_OP("FullyConnected", FullyConnectedOp::Create);

}  // namespace kvtrain
