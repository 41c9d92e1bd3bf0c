// Concat: shape inference and strided copies on either device.
#include "ops/concat_op.h"

#include <cstring>

#include "ops/op_util.h"

#ifdef KVTRAIN_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda_check.h"
#endif

namespace kvtrain {

using op_util::Ptr;

StatusOr<std::unique_ptr<Operator>> ConcatOp::Create(const OpSpec& spec) {
  auto op = std::unique_ptr<ConcatOp>(new ConcatOp);
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Int("num_args", &op->num_args_, 1, 1 << 16));
  KV_RETURN_IF_ERROR(r.Int("dim", &op->dim_, 0, 31, 1));
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(std::move(op));
}

std::vector<std::string> ConcatOp::ListArguments() const {
  std::vector<std::string> args;
  for (int64_t i = 0; i < num_args_; ++i) {
    args.push_back("arg" + std::to_string(i));
  }
  return args;
}

Status ConcatOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                            std::vector<Shape>* aux) const {
  const Shape& first = (*in)[0];
  if (first.ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  if (dim_ >= first.ndim()) {
    return Error("dim " + std::to_string(dim_) + " is out of range for " +
                 input_name(0) + " " + first.ToString());
  }
  Shape result = first;
  result[static_cast<int>(dim_)] = 0;
  for (size_t i = 0; i < in->size(); ++i) {
    const Shape& s = (*in)[i];
    bool same = s.ndim() == first.ndim();
    for (int k = 0; same && k < s.ndim(); ++k) {
      same = k == dim_ || s[k] == first[k];
    }
    if (!same) {
      return Error(input_name(static_cast<int>(i)) + " is " + s.ToString() +
                   " but " + input_name(0) + " is " + first.ToString() +
                   "; they may differ only in dimension " +
                   std::to_string(dim_));
    }
    result[static_cast<int>(dim_)] += s[static_cast<int>(dim_)];
  }
  (*out)[0] = result;
  return Status::OK();
}

void ConcatOp::Move(const OpContext& ctx, const std::vector<Tensor>& parts,
                    const std::vector<OpReq>& reqs, const Tensor& whole,
                    bool to_output) {
  const int d = static_cast<int>(dim_);
  const int64_t rows = whole.shape().Product(0, d);
  const int64_t total = whole.shape().Product(d, whole.ndim());
  int64_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& part = parts[i];
    const int64_t width = part.shape().Product(d, part.ndim());
    const OpReq req = reqs[i];
    float* base = Ptr(whole) + offset;
    offset += width;
    if (req == OpReq::kNull) continue;
    const bool cpu = ctx.device->device().is_cpu();
    if (req == OpReq::kAdd || cpu) {
      for (int64_t r = 0; r < rows; ++r) {
        float* w = base + r * total;
        float* p = Ptr(part) + r * width;
        const float* src = to_output ? p : w;
        float* dst = to_output ? w : p;
        if (req == OpReq::kAdd) {
          op_util::Axpy(ctx, 1.0f, src, dst, width);
        } else {
          std::memcpy(dst, src, width * sizeof(float));
        }
      }
      continue;
    }
#ifdef KVTRAIN_CUDA
    const size_t pitch_w = total * sizeof(float), pitch_p = width * sizeof(float);
    if (to_output) {
      KV_CUDA_CHECK(cudaMemcpy2DAsync(base, pitch_w, Ptr(part), pitch_p,
                                      pitch_p, rows, cudaMemcpyDeviceToDevice,
                                      KV_CUDA_STREAM(ctx.device)));
    } else {
      KV_CUDA_CHECK(cudaMemcpy2DAsync(Ptr(part), pitch_p, base, pitch_w,
                                      pitch_p, rows, cudaMemcpyDeviceToDevice,
                                      KV_CUDA_STREAM(ctx.device)));
    }
#endif
  }
}

Status ConcatOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  if (args->req[0] == OpReq::kNull) return Status::OK();
  Move(ctx, args->in, std::vector<OpReq>(args->in.size(), args->req[0]),
       args->out[0], /*to_output=*/true);
  return Status::OK();
}

Status ConcatOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  Move(ctx, args->in_grad, args->req, args->out_grad[0], /*to_output=*/false);
  return Status::OK();
}

Status ConcatOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status ConcatOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("Concat", ConcatOp::Create);

}  // namespace kvtrain
