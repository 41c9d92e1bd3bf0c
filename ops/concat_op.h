// Concat: joins num_args inputs along `dim`; all other dimensions must match.
//   inputs  arg0, arg1, ... (num_args of them); output the joined tensor
//   attrs   num_args (required, >= 1), dim (1)
// Pure data movement (strided copies), so there is no .cu file: GPUs use
// cudaMemcpy2DAsync on the op's stream.
#ifndef KVTRAIN_OPS_CONCAT_OP_H_
#define KVTRAIN_OPS_CONCAT_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class ConcatOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override;
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override {
    return BackwardNeeds();
  }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  // Copies between each input (rows x width_i) and its column block of the
  // output (rows x total width). to_output picks the direction.
  void Move(const OpContext& ctx, const std::vector<Tensor>& parts,
            const std::vector<OpReq>& reqs, const Tensor& whole,
            bool to_output);

  int64_t num_args_ = 0;
  int64_t dim_ = 1;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_CONCAT_OP_H_
