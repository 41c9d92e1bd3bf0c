// Optimizer: applies an OptimizerSpec (proto/optimizer.proto) to weights by
// key, keeping each key's state (momentum, Adam moments, AdaGrad history) and
// the learning-rate schedule; states save to and load from bytes. Used both
// by a worker's local updater and by the parameter servers; it depends on
// ops only (no engine).
#ifndef KVTRAIN_OPS_OPTIMIZER_H_
#define KVTRAIN_OPS_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "ops/optimizer_kernels.h"
#include "tensor/tensor.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {

// One key's multipliers of the learning rate and the weight decay.
struct OptimizerKeyMults {
  float lr = 1.0f, wd = 1.0f;
};

// Thread-safe: Update may be called concurrently for different keys (the
// servers do); calls for the same key must not overlap. Save/Load may run
// concurrently with updates of other keys.
class Optimizer {
 public:
  // proto::OptimizerStates.key_numbering of the states SaveStates writes
  // (callers key them by kvstore/keys.h StateKey); LoadStates refuses others.
  static constexpr int kKeyNumbering = 1;

  // Checks the spec; a bad one is an error naming the field and value, e.g.
  // "optimizer: momentum 1.5 must be in [0, 1)".
  static StatusOr<std::unique_ptr<Optimizer>> Create(
      const proto::OptimizerSpec& spec);

  // How Update returns when the weight is on a GPU.
  enum class Wait {
    kDone,    // once the weight is updated
    kQueued,  // once the update is queued on the device's stream: for
              // callers whose next use of the weight is ordered by that
              // stream (the engine's ops on that GPU) or synchronises it
  };

  // One step: weight -= f(grad, state). `weight` and `grad` must have the
  // same shape and device; the key's state is created (zeros, on the
  // weight's device) on first use and moved there if it was loaded
  // elsewhere. Runs on the weight's device. `step_scale` (finite, > 0)
  // scales this update's effective step, lr / (1 - momentum) (an
  // asynchronous server's staleness-aware updates): by lowering the
  // momentum first, 1 - m' = (1 - m) / step_scale up to 1 (asynchrony acts
  // as momentum of its own: Mitliagkas et al., "Asynchrony begets
  // momentum", 2016), then the learning rate for the rest; without
  // momentum, the learning rate alone (Zhang et al., IJCAI'16).
  // `mults`: the key's multipliers of the learning rate and weight decay
  // (MultsFor its name).
  using KeyMults = OptimizerKeyMults;
  Status Update(int64_t key, const Tensor& weight, const Tensor& grad,
                Wait wait = Wait::kDone, float step_scale = 1.0f, KeyMults mults = {});
  // The spec's lr_mult and wd_mult for a key named `name` (1 when unlisted).
  KeyMults MultsFor(const std::string& name) const;

  // The rule and the scalars of an update at schedule count `t` of an array
  // updated `count` times, this update included (Adam's bias correction):
  // for callers that apply the rule themselves with UpdateCpu, e.g. a
  // sparse table updating only the rows a step touched.
  UpdateRule rule() const { return rule_; }
  UpdateParams StepParams(int64_t t, int64_t count) const;

  // The learning rate the next update will use.
  float CurrentLearningRate() const EXCLUDES(mu_);
  // Updates counted by the schedule (the largest per-key count).
  int64_t num_update() const EXCLUDES(mu_);
  const proto::OptimizerSpec& spec() const { return spec_; }

  // Serialized proto::OptimizerStates (every key's state, copied to host).
  StatusOr<std::string> SaveStates() const EXCLUDES(mu_);
  // Replaces all states with saved ones; errors if the bytes are corrupt,
  // were saved by another rule, or hold arrays of the wrong count.
  Status LoadStates(const std::string& bytes) EXCLUDES(mu_);

 private:
  struct KeyState {
    int64_t count = 0;
    std::vector<Tensor> arrays;
  };

  explicit Optimizer(const proto::OptimizerSpec& spec);
  float LearningRateAt(int64_t t) const;
  // The key's state, created or moved to `weight`'s device and shape.
  StatusOr<KeyState*> StateFor(int64_t key, const Tensor& weight)
      EXCLUDES(mu_);

  const proto::OptimizerSpec spec_;
  UpdateRule rule_ = UpdateRule::kSgd;
  UpdateParams base_;

  mutable std::mutex mu_;
  std::map<int64_t, std::unique_ptr<KeyState>> states_ GUARDED_BY(mu_);
  int64_t num_update_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_OPTIMIZER_H_
