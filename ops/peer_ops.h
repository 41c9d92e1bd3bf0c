// _Send and _Recv: the two ends of a graph edge that crosses processes
// (model parallelism across ranks; ChainerMN's "communication as function").
// The executor inserts them when it partitions a graph by rank:
//   _Send (on the producer's rank): forward sends the activation to `peer`;
//     backward receives its gradient from `peer`. Its one output is a
//     1-element token the executor waits on (it holds no data).
//   _Recv (on the consumer's rank): forward receives the activation of
//     `shape` from `peer`; backward sends its gradient back.
// Both carry the same `tag` (derived from the edge's name): the forward
// message uses 2*tag, the gradient 2*tag+1. They talk through
// OpContext::peer_link and run on the engine's I/O threads.
#ifndef KVTRAIN_OPS_PEER_OPS_H_
#define KVTRAIN_OPS_PEER_OPS_H_

#include <cstdint>
#include <string>

#include "ops/operator.h"

namespace kvtrain {

// What the two ends share; parsed from the attributes `peer`, `tag` (and
// `shape` for _Recv).
struct PeerEdge {
  int peer = 0;
  uint64_t tag = 0;
  uint64_t forward_tag() const { return 2 * tag; }
  uint64_t backward_tag() const { return 2 * tag + 1; }
};

class SendOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListOutputs() const override { return {"sent"}; }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  // Backward reads only the token (so it runs after this pass's forward).
  BackwardNeeds DeclareBackwardNeeds() const override;
  ExecKind exec_kind() const override { return ExecKind::kBlockingIo; }
  bool always_backward() const override { return true; }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  explicit SendOp(PeerEdge edge) : edge_(edge) {}
  PeerEdge edge_;
};

class RecvOp : public Operator {
 public:
  static StatusOr<std::unique_ptr<Operator>> Create(const OpSpec& spec);

  std::vector<std::string> ListArguments() const override { return {}; }
  Status InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                    std::vector<Shape>* aux) const override;
  BackwardNeeds DeclareBackwardNeeds() const override;
  ExecKind exec_kind() const override { return ExecKind::kBlockingIo; }
  bool always_backward() const override { return true; }

 protected:
  Status ForwardCpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardCpu(const OpContext& ctx, BackwardArgs* args) override;
  Status ForwardGpu(const OpContext& ctx, ForwardArgs* args) override;
  Status BackwardGpu(const OpContext& ctx, BackwardArgs* args) override;

 private:
  RecvOp(PeerEdge edge, Shape shape) : edge_(edge), shape_(std::move(shape)) {}
  PeerEdge edge_;
  Shape shape_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_PEER_OPS_H_
