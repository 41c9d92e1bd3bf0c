// softmax (MXNet's, not the SoftmaxOutput loss): y = exp(x / t) / sum, along
// the last axis; log_softmax: y = x / t - log(sum(exp(x / t))), computed
// without overflow.
//   input data (any shape, ndim >= 1); output of the same shape
//   attrs axis (-1: the last; another axis is an error naming it),
//         temperature (1)
// Backward reads the output: softmax dx = y (dy - sum(dy y)) / t;
// log_softmax dx = (dy - exp(y) sum(dy)) / t.
#ifndef KVTRAIN_OPS_SOFTMAX_OP_H_
#define KVTRAIN_OPS_SOFTMAX_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class SoftmaxOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);
  static StatusOr<std::unique_ptr<Operator>> CreateLog(const OpSpec& spec);

  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  SoftmaxOp(float temperature, bool log) : temperature_(temperature), log_(log) {}
  static StatusOr<std::unique_ptr<Operator>> CreateFor(const OpSpec& spec, bool log);
  float temperature_;
  bool log_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_SOFTMAX_OP_H_
