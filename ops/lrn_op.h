// LRN: local response normalisation across channels, as MXNet's (AlexNet's
// layer):
//   out = data / (knorm + alpha / nsize * sum of data^2 over nsize
//         neighbouring channels)^beta
//   input  data (batch, channels, ...) with at least 2 dimensions; outputs
//          output (same shape) and the hidden denominator base kept for
//          Backward (MXNet's tmp_norm)
//   attrs  nsize (required, >= 1), alpha (1e-4), beta (0.75), knorm (2)
#ifndef KVTRAIN_OPS_LRN_OP_H_
#define KVTRAIN_OPS_LRN_OP_H_

#include "ops/lrn_kernels.h"
#include "ops/operator.h"

namespace kvtrain {

class LrnOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListOutputs() const override { return {"output", "tmp_norm"}; }
  int NumVisibleOutputs() const override { return 1; }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  LrnGeometry Geometry(const Shape& data) const;

  LrnGeometry params_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_LRN_OP_H_
