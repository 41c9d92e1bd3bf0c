// Binary ops with broadcasting, as MXNet's:
//   broadcast_add, broadcast_sub, broadcast_mul, broadcast_div: lhs <op>
//   rhs, where the shorter shape is taken with leading 1s and each
//   dimension is equal in both or 1 in one (that input repeats along it);
//   at most 8 dimensions. Inputs lhs, rhs; output of the broadcast shape;
//   no attributes. Backward sums each input's gradient over the dimensions
//   it was broadcast along, and reads both inputs.
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

// The geometry of lhs <op> rhs (shapes already checked by InferShape).
BroadcastGeometry MakeBroadcastGeometry(const Shape& lhs, const Shape& rhs);

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_BROADCAST_OP_H_
