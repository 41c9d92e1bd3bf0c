// Embedding: looks up rows of a table by index.
//   inputs  data (any shape; float32 holding row indices), weight
//           (input_dim, output_dim)
//   output  data.shape + (output_dim): out[..., :] = weight[data[...], :]
//   attrs   input_dim (required, <= 2^24: float32 holds every integer up to
//           there, so every row can be named), output_dim (required)
// The gradient goes to the weight only (rows scatter-added, duplicates
// accumulate); data, like a label, gets zeros.
// Bad indices (not an integer, or outside [0, input_dim)): the CPU path
// fails naming the position and the value. The GPU kernels clamp instead
// (negative or NaN -> 0, too large -> input_dim - 1, fractions truncated),
// so that a GPU op never waits for the device to read the indices back.
#ifndef KVTRAIN_OPS_EMBEDDING_OP_H_
#define KVTRAIN_OPS_EMBEDDING_OP_H_

#include "ops/operator.h"

namespace kvtrain {

class EmbeddingOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override {
    return {"data", "weight"};
  }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  // Ok when every element of `data` (on the CPU) is an integer in
  // [0, input_dim); else an error naming the first bad one.
  Status CheckIndices(const Tensor& data) const;

  int64_t input_dim_ = 0;
  int64_t output_dim_ = 0;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_EMBEDDING_OP_H_
