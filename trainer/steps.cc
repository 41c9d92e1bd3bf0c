// Module's step-by-step API (MXNet's mod.forward / backward / update): the
// parts of one Fit step, each run to its end.
#include "trainer/module.h"

#include <algorithm>
#include <memory>
#include <utility>

namespace kvtrain {

Status Module::PrepareSteps(KVStore* kv, const FitOptions& o) {
  if (kv == nullptr) return Status::InvalidArgument("PrepareSteps needs a KVStore");
  if (!kv->is_worker()) {
    return Status::FailedPrecondition(
        "the step-by-step API called in a " + std::string(RoleName(kv->role())) +
        " process; servers and the scheduler RunServer()");
  }
  if (execs_.empty()) return Status::FailedPrecondition("PrepareSteps before Bind and InitParams");
  KV_RETURN_IF_ERROR(Drain());
  KV_RETURN_IF_ERROR(SyncParams(kv));
  const bool levels = kv->SumsComeBackAsLevels() && kv->num_workers() > 1;
  KV_RETURN_IF_ERROR(SetUpOptimizer(kv, o, o.update_on_kvstore.value_or(!levels)));
  steps_kv_ = kv;
  step_state_ = StepState::kNone;
  return Status::OK();
}

Status Module::Forward(const Batch& batch, bool is_train) {
  if (execs_.empty()) return Status::FailedPrecondition("forward before bind");
  KV_RETURN_IF_ERROR(Drain());
  step_state_ = StepState::kNone;
  KV_RETURN_IF_ERROR(Feed(batch));
  for (auto& e : execs_) KV_RETURN_IF_ERROR(e->StartForward(is_train).status());
  for (auto& e : execs_) KV_RETURN_IF_ERROR(e->Wait());
  step_state_ = is_train ? StepState::kTrainForward : StepState::kForward;
  return Status::OK();
}

Status Module::Backward() {
  if (step_state_ != StepState::kTrainForward) {
    return Status::FailedPrecondition(
        step_state_ == StepState::kForward
            ? "backward after a forward with is_train=False (no gradients to compute)"
            : "backward without a forward of this step before it");
  }
  for (auto& e : execs_) KV_RETURN_IF_ERROR(e->StartBackward().status());
  for (auto& e : execs_) KV_RETURN_IF_ERROR(e->Wait());
  step_state_ = StepState::kBackward;
  return Status::OK();
}

Status Module::Update() {
  if (steps_kv_ == nullptr) {
    return Status::FailedPrecondition("update before init_optimizer (no store to update on)");
  }
  if (step_state_ != StepState::kBackward) {
    return Status::FailedPrecondition("update without a backward of this step before it");
  }
  step_state_ = StepState::kNone;
  auto handles = std::make_shared<std::vector<KVHandle>>(param_names_.size(), 0);
  std::vector<Engine::Var*> vars = PushStoreOps(steps_kv_, handles);
  KVStore* kv = steps_kv_;
  Engine::Fn results = [this, kv, handles] { return FinishStep(kv, *handles); };
  Completion done = engine_->Push(std::move(results), vars, vars, Device::CPU(),
                                  Engine::Queue::kInline, "kvstore results");
  KV_RETURN_IF_ERROR(done.Wait(kStepTimeout));
  return engine_->WaitForAll(kStepTimeout);
}

StatusOr<Tensor> Module::Outputs() const {
  if (output_index_ < 0) {
    return Status::FailedPrecondition("outputs on a rank without the graph's output");
  }
  if (step_state_ == StepState::kNone) {
    return Status::FailedPrecondition("get_outputs without a forward before it");
  }
  std::vector<Tensor> parts;
  std::vector<int64_t> dims;
  int64_t rows = 0;
  for (size_t d = 0; d < execs_.size(); ++d) {
    KV_ASSIGN_OR_RETURN(Tensor out, execs_[d]->outputs()[output_index_].CopyTo(Device::CPU()));
    dims = out.shape().dims();
    rows += out.ndim() > 0 ? out.dim(0) : 1;
    parts.push_back(std::move(out));
  }
  if (dims.empty()) dims.push_back(1);
  dims[0] = rows;
  Tensor result = Tensor::Empty(Shape(dims));
  float* dst = result.data<float>();
  for (const Tensor& t : parts) {
    dst = std::copy(t.data<float>(), t.data<float>() + t.size(), dst);
  }
  return result;
}

}  // namespace kvtrain
