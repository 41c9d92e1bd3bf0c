// _CrossDeviceCopy: moves a tensor to another device. The executor inserts it
// where a graph spans devices (group2ctx); Backward copies the gradient back.
// The op runs on the destination device; its input lives on the source.
#ifndef KVTRAIN_OPS_COPY_OP_H_
#define KVTRAIN_OPS_COPY_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class CrossDeviceCopyOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override {
    return BackwardNeeds();
  }
  bool crosses_devices() const override { return true; }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  // dst (op)= src across devices.
  Status Move(const Tensor& src, Tensor* dst, OpReq req) const;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_COPY_OP_H_
