// Optimizer: spec validation, per-key state, the learning-rate schedule, and
// state save/load.
#include "ops/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "ops/optimizer_op.h"

namespace kvtrain {
namespace {

using proto::LrSchedule;
using proto::OptimizerSpec;

Status Bad(const std::string& msg) {
  return Status::InvalidArgument("optimizer: " + msg);
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

Status CheckSchedule(const LrSchedule& s) {
  if (s.warmup_steps() < 0) {
    return Bad("lr_schedule.warmup_steps " + std::to_string(s.warmup_steps()) +
               " must be >= 0");
  }
  if (!(s.warmup_begin_lr() >= 0) || !std::isfinite(s.warmup_begin_lr())) {
    return Bad("lr_schedule.warmup_begin_lr " + Num(s.warmup_begin_lr()) + " must be >= 0");
  }
  if (s.type() == LrSchedule::CONSTANT) return Status::OK();
  if (s.type() == LrSchedule::POLY || s.type() == LrSchedule::COSINE) {
    if (s.max_update() <= s.warmup_steps()) {
      return Bad("lr_schedule.max_update " + std::to_string(s.max_update()) +
                 " must be more than warmup_steps " + std::to_string(s.warmup_steps()));
    }
    if (s.type() == LrSchedule::POLY && !(s.power() > 0 && std::isfinite(s.power()))) {
      return Bad("lr_schedule.power " + Num(s.power()) + " must be > 0");
    }
    if (!(s.final_lr() >= 0) || !std::isfinite(s.final_lr())) {
      return Bad("lr_schedule.final_lr " + Num(s.final_lr()) + " must be >= 0");
    }
    return Status::OK();
  }
  if (!(s.factor() > 0 && s.factor() <= 1)) {
    return Bad("lr_schedule.factor " + Num(s.factor()) +
               " must be in (0, 1]");
  }
  if (!(s.min_lr() >= 0)) {
    return Bad("lr_schedule.min_lr " + Num(s.min_lr()) + " must be >= 0");
  }
  if (s.type() == LrSchedule::FACTOR) {
    if (s.step() < 1) {
      return Bad("lr_schedule.step " + std::to_string(s.step()) +
                 " must be >= 1");
    }
    return Status::OK();
  }
  if (s.type() == LrSchedule::MULTI_FACTOR) {
    if (s.steps().empty()) return Bad("lr_schedule.steps is empty");
    for (int i = 0; i < s.steps_size(); ++i) {
      if (s.steps(i) < 1 || (i > 0 && s.steps(i) <= s.steps(i - 1))) {
        return Bad("lr_schedule.steps must be positive and increasing, got " +
                   std::to_string(s.steps(i)) + " at position " +
                   std::to_string(i));
      }
    }
    return Status::OK();
  }
  return Bad("unknown lr_schedule.type " + std::to_string(s.type()));
}

Status CheckSpec(const OptimizerSpec& s) {
  if (s.type() == OptimizerSpec::TYPE_UNSPECIFIED ||
      !OptimizerSpec::Type_IsValid(s.type())) {
    return Bad("type is unspecified; expected one of SGD, NAG, ADAM, ADAGRAD, FTRL, RMSPROP, "
               "SIGNUM, ADAMAX, ADADELTA");
  }
  if (!(s.learning_rate() > 0) || !std::isfinite(s.learning_rate())) {
    return Bad("learning_rate " + Num(s.learning_rate()) + " must be > 0");
  }
  if (!(s.momentum() >= 0 && s.momentum() < 1)) {
    return Bad("momentum " + Num(s.momentum()) + " must be in [0, 1)");
  }
  if (s.momentum() != 0 && (s.type() == OptimizerSpec::ADAM ||
                            s.type() == OptimizerSpec::ADAGRAD ||
                            s.type() == OptimizerSpec::FTRL ||
                            s.type() == OptimizerSpec::ADAMAX ||
                            s.type() == OptimizerSpec::ADADELTA)) {
    return Bad("momentum is not used by " + OptimizerSpec::Type_Name(s.type()) +
               "; leave it 0");
  }
  if (!(s.weight_decay() >= 0) || !std::isfinite(s.weight_decay())) {
    return Bad("weight_decay " + Num(s.weight_decay()) + " must be >= 0");
  }
  if (s.has_rescale_grad() && !std::isfinite(s.rescale_grad())) {
    return Bad("rescale_grad must be finite");
  }
  if (s.has_beta1() && !(s.beta1() >= 0 && s.beta1() < 1)) {
    return Bad("beta1 " + Num(s.beta1()) + " must be in [0, 1)");
  }
  if (s.has_beta2() && !(s.beta2() >= 0 && s.beta2() < 1)) {
    return Bad("beta2 " + Num(s.beta2()) + " must be in [0, 1)");
  }
  if (s.has_epsilon() && !(s.epsilon() > 0)) {
    return Bad("epsilon " + Num(s.epsilon()) + " must be > 0");
  }
  if (s.has_lamda1() && !(s.lamda1() >= 0 && std::isfinite(s.lamda1()))) {
    return Bad("lamda1 " + Num(s.lamda1()) + " must be >= 0");
  }
  if (s.has_beta() && !(s.beta() >= 0 && std::isfinite(s.beta()))) {
    return Bad("beta " + Num(s.beta()) + " must be >= 0");
  }
  if (s.has_gamma1() && !(s.gamma1() >= 0 && s.gamma1() < 1)) {
    return Bad("gamma1 " + Num(s.gamma1()) + " must be in [0, 1)");
  }
  for (const auto* mults : {&s.lr_mult(), &s.wd_mult()}) {
    for (const auto& [name, m] : *mults) {
      if (!(m >= 0) || !std::isfinite(m)) {
        return Bad(std::string(mults == &s.lr_mult() ? "lr_mult" : "wd_mult") + " of key \"" +
                   name + "\" is " + Num(m) + "; it must be finite and >= 0");
      }
    }
  }
  if (s.has_rho() && !(s.rho() >= 0 && s.rho() < 1)) {
    return Bad("rho " + Num(s.rho()) + " must be in [0, 1)");
  }
  if (!(s.wd_lh() >= 0) || !std::isfinite(s.wd_lh())) {
    return Bad("wd_lh " + Num(s.wd_lh()) + " must be >= 0");
  }
  if (s.wd_lh() != 0 && !(s.type() == OptimizerSpec::SIGNUM && s.momentum() > 0)) {
    return Bad("wd_lh is Signum's decoupled decay with momentum > 0 (signSGD decays by "
               "weight_decay); leave it 0");
  }
  return CheckSchedule(s.lr_schedule());
}

}  // namespace

Optimizer::Optimizer(const OptimizerSpec& spec) : spec_(spec) {
  switch (spec.type()) {
    case OptimizerSpec::NAG:
      rule_ = UpdateRule::kNag;
      break;
    case OptimizerSpec::ADAM:
      rule_ = UpdateRule::kAdam;
      break;
    case OptimizerSpec::ADAGRAD:
      rule_ = UpdateRule::kAdaGrad;
      break;
    case OptimizerSpec::FTRL:
      rule_ = UpdateRule::kFtrl;
      break;
    case OptimizerSpec::RMSPROP:
      rule_ = UpdateRule::kRmsProp;
      break;
    case OptimizerSpec::SIGNUM:
      rule_ = spec.momentum() > 0 ? UpdateRule::kSignum : UpdateRule::kSignSgd;
      break;
    case OptimizerSpec::ADAMAX:
      rule_ = UpdateRule::kAdamax;
      break;
    case OptimizerSpec::ADADELTA:
      rule_ = UpdateRule::kAdaDelta;
      break;
    default:
      rule_ = spec.momentum() > 0 ? UpdateRule::kSgdMom : UpdateRule::kSgd;
      break;
  }
  base_.lr = spec.learning_rate();
  base_.wd = spec.weight_decay();
  base_.rescale_grad = spec.has_rescale_grad() ? spec.rescale_grad() : 1.0f;
  base_.clip_gradient = spec.clip_gradient() > 0 ? spec.clip_gradient() : -1;
  base_.momentum = spec.momentum();
  base_.beta1 = spec.has_beta1() ? spec.beta1() : 0.9f;
  base_.beta2 = spec.has_beta2() ? spec.beta2() : 0.999f;
  base_.epsilon = spec.has_epsilon()                 ? spec.epsilon()
                  : rule_ == UpdateRule::kAdaGrad   ? 1e-7f
                  : rule_ == UpdateRule::kAdaDelta ? 1e-5f
                                                    : 1e-8f;
  base_.lamda1 = spec.has_lamda1() ? spec.lamda1() : 0.01f;
  base_.beta = spec.has_beta() ? spec.beta() : 1.0f;
  base_.gamma1 = spec.has_gamma1() ? spec.gamma1() : 0.9f;
  base_.wd_lh = spec.wd_lh();
  base_.rho = spec.has_rho() ? spec.rho() : 0.9f;
}

StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(
    const OptimizerSpec& spec) {
  KV_RETURN_IF_ERROR(CheckSpec(spec));
  return std::unique_ptr<Optimizer>(new Optimizer(spec));
}

float Optimizer::LearningRateAt(int64_t t) const {
  const LrSchedule& s = spec_.lr_schedule();
  if (t < s.warmup_steps()) {
    if (s.warmup_constant()) return s.warmup_begin_lr();
    return static_cast<float>(s.warmup_begin_lr() +
                              (spec_.learning_rate() - s.warmup_begin_lr()) *
                                  static_cast<double>(t) / s.warmup_steps());
  }
  if (s.type() == LrSchedule::POLY || s.type() == LrSchedule::COSINE) {
    const double n = static_cast<double>(s.max_update() - s.warmup_steps());
    const double u = static_cast<double>(std::min(t, s.max_update()) - s.warmup_steps());
    const double shape = s.type() == LrSchedule::POLY
                             ? std::pow(1.0 - u / n, s.power())
                             : (1.0 + std::cos(M_PI * u / n)) / 2.0;
    return static_cast<float>(s.final_lr() + (spec_.learning_rate() - s.final_lr()) * shape);
  }
  int64_t decays = 0;
  if (s.type() == LrSchedule::FACTOR) {
    decays = (std::max<int64_t>(t, 1) - 1) / s.step();
  } else if (s.type() == LrSchedule::MULTI_FACTOR) {
    for (int64_t step : s.steps()) decays += t > step;
  } else {
    return spec_.learning_rate();
  }
  const double lr = spec_.learning_rate() * std::pow(s.factor(), decays);
  return static_cast<float>(std::max<double>(lr, s.min_lr()));
}

UpdateParams Optimizer::StepParams(int64_t t, int64_t count) const {
  UpdateParams p = base_;
  p.lr = LearningRateAt(t);
  if (rule_ == UpdateRule::kAdam) {
    const double c = static_cast<double>(count);
    p.lr = static_cast<float>(p.lr * std::sqrt(1 - std::pow(p.beta2, c)) /
                              (1 - std::pow(p.beta1, c)));
  } else if (rule_ == UpdateRule::kAdamax) {
    p.lr = static_cast<float>(p.lr / (1 - std::pow(p.beta1, static_cast<double>(count))));
  }
  return p;
}

Optimizer::KeyMults Optimizer::MultsFor(const std::string& name) const {
  KeyMults m;
  if (auto it = spec_.lr_mult().find(name); it != spec_.lr_mult().end()) m.lr = it->second;
  if (auto it = spec_.wd_mult().find(name); it != spec_.wd_mult().end()) m.wd = it->second;
  return m;
}

float Optimizer::CurrentLearningRate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LearningRateAt(num_update_ + 1);
}

int64_t Optimizer::num_update() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_update_;
}

StatusOr<Optimizer::KeyState*> Optimizer::StateFor(int64_t key,
                                                   const Tensor& weight) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<KeyState>& state = states_[key];
  if (state == nullptr) {
    state = std::make_unique<KeyState>();
    for (int i = 0; i < NumUpdateStates(rule_); ++i) {
      KV_ASSIGN_OR_RETURN(Tensor t,
                          Tensor::CreateZeros(weight.shape(), DType::kFloat32,
                                              weight.device()));
      state->arrays.push_back(std::move(t));
    }
  }
  for (Tensor& t : state->arrays) {
    if (t.shape() != weight.shape()) {
      return Status::InvalidArgument(
          "optimizer key " + std::to_string(key) + ": weight is " +
          weight.shape().ToString() + " but its optimizer state is " +
          t.shape().ToString());
    }
    if (t.device() != weight.device()) {
      KV_ASSIGN_OR_RETURN(t, t.CopyTo(weight.device()));
    }
  }
  ++state->count;
  num_update_ = std::max(num_update_, state->count);
  return state.get();
}

Status Optimizer::Update(int64_t key, const Tensor& weight,
                         const Tensor& grad, Wait wait, float step_scale,
                         KeyMults mults) {
  const std::string what = "optimizer key " + std::to_string(key);
  if (!(step_scale > 0) || !std::isfinite(step_scale)) {
    return Status::InvalidArgument(what + ": step scale " + std::to_string(step_scale) +
                                   " must be finite and > 0");
  }
  if (!weight.defined() || !grad.defined()) {
    return Status::InvalidArgument(what + ": undefined weight or gradient");
  }
  KV_RETURN_IF_ERROR(CheckSameShapeAndType(weight, grad, what));
  if (weight.device() != grad.device()) {
    return Status::InvalidArgument(what + ": weight on " +
                                   weight.device().ToString() +
                                   " but gradient on " +
                                   grad.device().ToString());
  }
  KV_ASSIGN_OR_RETURN(KeyState * state, StateFor(key, weight));
  int64_t t = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t = num_update_;
  }
  UpdateParams p = StepParams(t, state->count);
  p.lr *= mults.lr;
  p.wd *= mults.wd;
  if (step_scale != 1.0f) {
    // The effective step lr / (1 - momentum) times step_scale: momentum
    // lowered first, (1 - m') = (1 - m) / step_scale up to 1, and the
    // learning rate for what momentum cannot absorb.
    const float m = p.momentum;
    const float keep = std::min(1.0f, (1.0f - m) / step_scale);
    p.lr *= step_scale * keep / (1.0f - m);
    p.momentum = 1.0f - keep;
    if (m == 0.0f) p.momentum = 0.0f;
  }
  KV_RETURN_IF_ERROR(ApplyUpdate(rule_, p, weight, grad, state->arrays, what));
  if (wait == Wait::kQueued || !weight.device().is_gpu()) return Status::OK();
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(weight.device()));
  return ctx->Synchronize();
}

StatusOr<std::string> Optimizer::SaveStates() const {
  proto::OptimizerStates out;
  std::lock_guard<std::mutex> lock(mu_);
  out.set_type(spec_.type());
  out.set_num_update(num_update_);
  out.set_key_numbering(kKeyNumbering);
  for (const auto& [key, state] : states_) {
    proto::KeyState* ks = out.add_keys();
    ks->set_key(key);
    ks->set_count(state->count);
    for (const Tensor& t : state->arrays) {
      proto::TensorData* td = ks->add_arrays();
      for (int64_t d : t.shape().dims()) td->add_shape(d);
      KV_ASSIGN_OR_RETURN(Tensor host, t.CopyTo(Device::CPU()));
      td->set_data(host.raw_data(), host.nbytes());
    }
  }
  return out.SerializeAsString();
}

Status Optimizer::LoadStates(const std::string& bytes) {
  proto::OptimizerStates in;
  if (!in.ParseFromString(bytes)) {
    return Status::DataLoss("optimizer states: cannot parse " +
                            std::to_string(bytes.size()) + " bytes");
  }
  if (in.type() != spec_.type()) {
    return Status::InvalidArgument(
        "optimizer states were saved by " +
        OptimizerSpec::Type_Name(in.type()) + " but this optimizer is " +
        OptimizerSpec::Type_Name(spec_.type()));
  }
  if (in.keys_size() > 0 && in.key_numbering() != kKeyNumbering) {
    // Restoring them would leave every key's state fresh, silently.
    return Status::InvalidArgument(
        "optimizer states numbered " + std::to_string(in.key_numbering()) +
        " (written by an earlier kvtrain) cannot be restored: this kvtrain keys them by " +
        "store key id (numbering " + std::to_string(kKeyNumbering) +
        "); resume from the params alone, without the states");
  }
  std::map<int64_t, std::unique_ptr<KeyState>> loaded;
  for (const proto::KeyState& ks : in.keys()) {
    if (ks.arrays_size() != NumUpdateStates(rule_)) {
      return Status::InvalidArgument(
          "optimizer states: key " + std::to_string(ks.key()) + " has " +
          std::to_string(ks.arrays_size()) + " arrays, expected " +
          std::to_string(NumUpdateStates(rule_)));
    }
    auto state = std::make_unique<KeyState>();
    state->count = ks.count();
    for (const proto::TensorData& td : ks.arrays()) {
      const Shape shape(std::vector<int64_t>(td.shape().begin(),
                                             td.shape().end()));
      if (!shape.IsValid() ||
          static_cast<size_t>(shape.NumElements()) * sizeof(float) !=
              td.data().size()) {
        return Status::DataLoss("optimizer states: key " +
                                std::to_string(ks.key()) + ": shape " +
                                shape.ToString() + " does not match " +
                                std::to_string(td.data().size()) + " bytes");
      }
      KV_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(shape));
      if (t.nbytes() > 0) std::memcpy(t.raw_data(), td.data().data(), t.nbytes());
      state->arrays.push_back(std::move(t));
    }
    loaded[ks.key()] = std::move(state);
  }
  std::lock_guard<std::mutex> lock(mu_);
  states_ = std::move(loaded);
  num_update_ = in.num_update();
  return Status::OK();
}

}  // namespace kvtrain
