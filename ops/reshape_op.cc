// Flatten/Reshape: shape inference; the data moves by a copy (or not at all
// when the executor runs the op in place).
#include "ops/reshape_op.h"

#include "ops/op_util.h"

namespace kvtrain {

StatusOr<std::unique_ptr<Operator>> ReshapeOp::CreateFlatten(
    const OpSpec& spec) {
  AttrReader r(spec.Describe(), spec.attrs);
  KV_RETURN_IF_ERROR(r.Finish());
  return std::unique_ptr<Operator>(new ReshapeOp);
}

StatusOr<std::unique_ptr<Operator>> ReshapeOp::CreateReshape(
    const OpSpec& spec) {
  auto op = std::unique_ptr<ReshapeOp>(new ReshapeOp);
  op->flatten_ = false;
  AttrReader r(spec.Describe(), spec.attrs);
  bool present = false;
  KV_RETURN_IF_ERROR(r.IntList("shape", -1, &op->target_, &present));
  KV_RETURN_IF_ERROR(r.Finish());
  if (!present) {
    return Status::InvalidArgument(spec.Describe() +
                                   ": missing attribute shape, e.g. (0, -1)");
  }
  int unknown = 0;
  for (int64_t d : op->target_) unknown += d == -1;
  if (unknown > 1) {
    return Status::InvalidArgument(spec.Describe() +
                                   ": shape may contain -1 only once");
  }
  return std::unique_ptr<Operator>(std::move(op));
}

Status ReshapeOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                             std::vector<Shape>* aux) const {
  const Shape& d = (*in)[0];
  if (d.ndim() == 0) {
    return Error("the shape of " + input_name(0) + " is unknown");
  }
  if (flatten_) {
    (*out)[0] = Shape{d[0], d.Product(1, d.ndim())};
    return Status::OK();
  }
  std::vector<int64_t> dims;
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < target_.size(); ++i) {
    int64_t v = target_[i];
    if (v == 0) {
      if (static_cast<int>(i) >= d.ndim()) {
        return Error("shape entry " + std::to_string(i) +
                     " is 0 (copy) but the input " + d.ToString() + " has " +
                     std::to_string(d.ndim()) + " dimensions");
      }
      v = d[static_cast<int>(i)];
    }
    if (v == -1) {
      infer_at = static_cast<int>(i);
    } else {
      known *= v;
    }
    dims.push_back(v);
  }
  if (infer_at >= 0) {
    if (known == 0 || d.NumElements() % known != 0) {
      return Error("cannot reshape " + d.ToString() + " to " +
                   Shape(target_).ToString());
    }
    dims[infer_at] = d.NumElements() / known;
  }
  const Shape result(dims);
  if (result.NumElements() != d.NumElements()) {
    return Error("cannot reshape " + d.ToString() + " (" +
                 std::to_string(d.NumElements()) + " elements) to " +
                 result.ToString());
  }
  (*out)[0] = result;
  return Status::OK();
}

BackwardNeeds ReshapeOp::DeclareBackwardNeeds() const { return BackwardNeeds(); }

Status ReshapeOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  op_util::CopyReq(ctx, args->req[0], op_util::Ptr(args->in[0]),
                   op_util::Ptr(args->out[0]), args->in[0].size());
  return Status::OK();
}

Status ReshapeOp::BackwardCpu(const OpContext& ctx, BackwardArgs* args) {
  op_util::CopyReq(ctx, args->req[0], op_util::Ptr(args->out_grad[0]),
                   op_util::Ptr(args->in_grad[0]), args->in[0].size());
  return Status::OK();
}

// op_util's copies run on either device.
Status ReshapeOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

Status ReshapeOp::BackwardGpu(const OpContext& ctx, BackwardArgs* args) {
  return BackwardCpu(ctx, args);
}

KV_REGISTER_OP("Flatten", ReshapeOp::CreateFlatten);
KV_REGISTER_OP("Reshape", ReshapeOp::CreateReshape);

}  // namespace kvtrain
