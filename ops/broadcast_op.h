// Binary ops with broadcasting, as MXNet's:
//   broadcast_add, _sub, _mul, _div, _maximum, _minimum, _power, and the
//   comparisons broadcast_equal, _not_equal, _greater, _greater_equal,
//   _lesser, _lesser_equal (1 or 0; no gradient): lhs <op> rhs, where the
//   shorter shape is taken with leading 1s and each dimension is equal in
//   both or 1 in one (that input repeats along it); at most 8 dimensions.
//   Inputs lhs, rhs; output of the broadcast shape; no attributes. Backward
//   sums each input's gradient over the dimensions it was broadcast along.
// And one input repeated:
//   broadcast_to: attribute shape, as many dimensions as data (0: data's).
//   broadcast_axis: attributes axis and size (tuples of equal length), each
//   named axis of data of size 1 becoming that size.
//   broadcast_like: inputs lhs, rhs; lhs repeated to rhs's shape (rhs is
//   read for its shape only and gets no gradient).
#ifndef KVTRAIN_OPS_BROADCAST_OP_H_
#define KVTRAIN_OPS_BROADCAST_OP_H_

#include "ops/broadcast_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class BroadcastOp : public Operator {
 public:
  template <BroadcastKind kKind>
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec) {
    return CreateFor(kKind, spec);
  }

  std::vector<std::string> ListArguments() const override { return {"lhs", "rhs"}; }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  static StatusOr<std::unique_ptr<Operator>> CreateFor(BroadcastKind kind, const OpSpec& spec);
  BroadcastKind kind_ = BroadcastKind::kAdd;
};

class BroadcastToOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> CreateTo(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateAxis(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateLike(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override {
    return like_ ? std::vector<std::string>{"lhs", "rhs"} : std::vector<std::string>{"data"};
  }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  // Only the output gradient (the shapes come with the gradients).
  BackwardNeeds DeclareBackwardNeeds() const override { return BackwardNeeds(); }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  bool by_axis_ = false;
  bool like_ = false;
  std::vector<int64_t> shape_;       // broadcast_to
  std::vector<int64_t> axis_, size_;  // broadcast_axis
};

// The geometry of lhs <op> rhs (shapes already checked by InferShape).
BroadcastGeometry MakeBroadcastGeometry(const Shape& lhs, const Shape& rhs);

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_BROADCAST_OP_H_
