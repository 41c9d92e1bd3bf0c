// Update rules on the CPU, the device dispatch shared with Optimizer, and the
// update ops.
#include "ops/optimizer_op.h"

#include <algorithm>
#include <cmath>

#include "ops/op_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"

namespace kvtrain {
namespace {

// Elements per chunk when an update is split across CPU threads.
constexpr int64_t kUpdateGrain = 1 << 15;

// The rule's loop over [b, e). Scalars are copied into locals and the
// arrays marked __restrict so the compiler vectorises (the params struct
// could otherwise alias the arrays).
void UpdateRange(UpdateRule rule, const UpdateParams& p, int64_t b, int64_t e,
                 float* __restrict w, const float* __restrict grad,
                 float* __restrict s0, float* __restrict s1) {
  const float lr = p.lr, wd = p.wd, rescale = p.rescale_grad;
  const float mu = p.momentum, b1 = p.beta1, b2 = p.beta2, eps = p.epsilon;
  const bool clip = p.clip_gradient > 0.0f;
  const float c = clip ? p.clip_gradient : 0.0f;
  auto g_at = [&](int64_t i) {
    const float g = rescale * grad[i];
    return clip ? std::min(std::max(g, -c), c) : g;
  };
  switch (rule) {
    case UpdateRule::kSgd:
      for (int64_t i = b; i < e; ++i) w[i] -= lr * (g_at(i) + wd * w[i]);
      break;
    case UpdateRule::kSgdMom:
      for (int64_t i = b; i < e; ++i) {
        s0[i] = mu * s0[i] - lr * (g_at(i) + wd * w[i]);
        w[i] += s0[i];
      }
      break;
    case UpdateRule::kNag:
      for (int64_t i = b; i < e; ++i) {
        const float gw = g_at(i) + wd * w[i];
        s0[i] = mu * s0[i] + gw;
        w[i] -= lr * (gw + mu * s0[i]);
      }
      break;
    case UpdateRule::kAdam:
      for (int64_t i = b; i < e; ++i) {
        const float gw = g_at(i) + wd * w[i];
        s0[i] = b1 * s0[i] + (1.0f - b1) * gw;
        s1[i] = b2 * s1[i] + (1.0f - b2) * gw * gw;
        w[i] -= lr * s0[i] / (std::sqrt(s1[i]) + eps);
      }
      break;
    case UpdateRule::kAdaGrad:
      for (int64_t i = b; i < e; ++i) {
        const float g = g_at(i);
        s0[i] += g * g;
        w[i] -= lr * (g / std::sqrt(s0[i] + eps) + wd * w[i]);
      }
      break;
    case UpdateRule::kRmsProp: {
      const float g1 = p.gamma1;
      for (int64_t i = b; i < e; ++i) {
        const float gw = g_at(i) + wd * w[i];
        s0[i] = (1.0f - g1) * gw * gw + g1 * s0[i];
        w[i] -= lr * gw / std::sqrt(s0[i] + eps);
      }
      break;
    }
    case UpdateRule::kFtrl: {
      const float l1 = p.lamda1, beta = p.beta;
      for (int64_t i = b; i < e; ++i) {
        const float g = g_at(i);
        const float n_new = s1[i] + g * g;
        s0[i] += g - (std::sqrt(n_new) - std::sqrt(s1[i])) / lr * w[i];
        s1[i] = n_new;
        const float z = s0[i];
        w[i] = std::fabs(z) > l1
                   ? ((z > 0 ? l1 : -l1) - z) / ((beta + std::sqrt(n_new)) / lr + wd)
                   : 0.0f;
      }
      break;
    }
    case UpdateRule::kSignSgd:
    case UpdateRule::kSignum:
    case UpdateRule::kAdamax:
    case UpdateRule::kAdaDelta:
      for (int64_t i = b; i < e; ++i) {
        UpdateNewerRule(rule, p, &w[i], grad[i], s0 == nullptr ? nullptr : &s0[i],
                        s1 == nullptr ? nullptr : &s1[i]);
      }
      break;
  }
}

}  // namespace

void UpdateCpu(UpdateRule rule, const UpdateParams& p, int64_t n, float* w,
               const float* g, float* s0, float* s1) {
  ParallelFor(n, kUpdateGrain, [&](int64_t b, int64_t e) {
    UpdateRange(rule, p, b, e, w, g, s0, s1);
  });
}

Status ApplyUpdate(UpdateRule rule, const UpdateParams& params,
                   const Tensor& weight, const Tensor& grad,
                   const std::vector<Tensor>& states, const std::string& what) {
  KV_RETURN_IF_ERROR(CheckSameShapeAndType(weight, grad, what + ": gradient"));
  if (weight.dtype() != DType::kFloat32) {
    return Status::InvalidArgument(what + ": weight is " +
                                   DTypeName(weight.dtype()) +
                                   "; updates take float32");
  }
  if (static_cast<int>(states.size()) != NumUpdateStates(rule)) {
    return Status::Internal(what + ": wrong number of optimizer states");
  }
  for (const Tensor* t : {&grad}) {
    if (t->device() != weight.device()) {
      return Status::InvalidArgument(what + ": weight on " +
                                     weight.device().ToString() +
                                     " but gradient on " +
                                     t->device().ToString());
    }
  }
  for (const Tensor& s : states) {
    KV_RETURN_IF_ERROR(CheckSameShapeAndType(weight, s, what + ": state"));
  }
  float* s0 = states.size() > 0 ? states[0].data<float>() : nullptr;
  float* s1 = states.size() > 1 ? states[1].data<float>() : nullptr;
  if (weight.device().is_cpu()) {
    UpdateCpu(rule, params, weight.size(), weight.data<float>(),
              grad.data<float>(), s0, s1);
    return Status::OK();
  }
#ifdef KVTRAIN_CUDA
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx,
                      DeviceContext::Get(weight.device()));
  gpu::Update(rule, params, weight.size(), weight.data<float>(),
              grad.data<float>(), s0, s1, ctx->stream());
  return Status::OK();
#else
  return CheckDevice(weight.device());
#endif
}

StatusOr<std::unique_ptr<Operator>> UpdateOp::CreateFor(UpdateRule rule,
                                                        const OpSpec& spec) {
  auto op = std::unique_ptr<UpdateOp>(new UpdateOp);
  op->rule_ = rule;
  UpdateParams& p = op->params_;
  AttrReader r(spec.Describe(), spec.attrs);
  double lr = -1, wd, rescale, clip, momentum = 0, beta1, beta2, eps;
  KV_RETURN_IF_ERROR(r.Float("lr", &lr, 0, 1e9, -1));
  if (lr <= 0) {
    return Status::InvalidArgument(spec.Describe() +
                                   ": attribute lr (> 0) is required");
  }
  KV_RETURN_IF_ERROR(r.Float("wd", &wd, 0, 1e9, 0));
  KV_RETURN_IF_ERROR(r.Float("rescale_grad", &rescale, -1e30, 1e30, 1));
  KV_RETURN_IF_ERROR(r.Float("clip_gradient", &clip, -1e30, 1e30, -1));
  if (rule == UpdateRule::kSgdMom || rule == UpdateRule::kNag || rule == UpdateRule::kSignum) {
    KV_RETURN_IF_ERROR(r.Float("momentum", &momentum, 0, 1, 0));
  }
  double wd_lh = 0;
  if (rule == UpdateRule::kSignum) {
    KV_RETURN_IF_ERROR(r.Float("wd_lh", &wd_lh, 0, 1e9, 0));
  }
  double lamda1 = 0.01, beta = 1, gamma1 = 0.9;
  if (rule == UpdateRule::kRmsProp) {
    KV_RETURN_IF_ERROR(r.Float("gamma1", &gamma1, 0, 0.999999, 0.9));
  }
  if (rule == UpdateRule::kFtrl) {
    KV_RETURN_IF_ERROR(r.Float("lamda1", &lamda1, 0, 1e9, 0.01));
    KV_RETURN_IF_ERROR(r.Float("beta", &beta, 0, 1e9, 1));
  }
  KV_RETURN_IF_ERROR(r.Float("beta1", &beta1, 0, 1, 0.9));
  KV_RETURN_IF_ERROR(r.Float("beta2", &beta2, 0, 1, 0.999));
  KV_RETURN_IF_ERROR(r.Float("epsilon", &eps, 0, 1,
                             rule == UpdateRule::kAdaGrad ? 1e-7 : 1e-8));
  KV_RETURN_IF_ERROR(r.Finish());
  p.lr = static_cast<float>(lr);
  p.wd = static_cast<float>(wd);
  p.rescale_grad = static_cast<float>(rescale);
  p.clip_gradient = static_cast<float>(clip);
  p.momentum = static_cast<float>(momentum);
  p.beta1 = static_cast<float>(beta1);
  p.beta2 = static_cast<float>(beta2);
  p.epsilon = static_cast<float>(eps);
  p.lamda1 = static_cast<float>(lamda1);
  p.beta = static_cast<float>(beta);
  p.gamma1 = static_cast<float>(gamma1);
  p.wd_lh = static_cast<float>(wd_lh);
  return std::unique_ptr<Operator>(std::move(op));
}

std::vector<std::string> UpdateOp::ListAuxiliaryStates() const {
  switch (rule_) {
    case UpdateRule::kSgd:
    case UpdateRule::kSignSgd:
      return {};
    case UpdateRule::kAdam:
      return {"mean", "var"};
    case UpdateRule::kAdaGrad:
      return {"history"};
    case UpdateRule::kFtrl:
      return {"z", "n"};
    case UpdateRule::kRmsProp:
      return {"n"};
    default:
      return {"momentum"};
  }
}

Status UpdateOp::InferShape(std::vector<Shape>* in, std::vector<Shape>* out,
                            std::vector<Shape>* aux) const {
  Shape w = (*in)[0].ndim() ? (*in)[0] : (*in)[1];
  if (w.ndim() == 0) return Error("the weight shape is unknown");
  KV_RETURN_IF_ERROR(op_util::Assign(Describe(), input_name(0), &(*in)[0], w));
  KV_RETURN_IF_ERROR(op_util::Assign(Describe(), input_name(1), &(*in)[1], w));
  (*out)[0] = w;
  for (Shape& s : *aux) s = w;
  return Status::OK();
}

Status UpdateOp::ForwardCpu(const OpContext& ctx, ForwardArgs* args) {
  if (args->req[0] == OpReq::kNull) return Status::OK();
  if (args->req[0] == OpReq::kAdd) {
    return Error("cannot add an update to its output (write request kAdd)");
  }
  // Update a copy when the output does not share the weight's memory.
  op_util::CopyReq(ctx, OpReq::kWrite, op_util::Ptr(args->in[0]),
                   op_util::Ptr(args->out[0]), args->in[0].size());
  return ApplyUpdate(rule_, params_, args->out[0], args->in[1], args->aux,
                     Describe());
}

Status UpdateOp::ForwardGpu(const OpContext& ctx, ForwardArgs* args) {
  return ForwardCpu(ctx, args);
}

KV_REGISTER_OP("sgd_update", UpdateOp::Create<UpdateRule::kSgd>);
KV_REGISTER_OP("sgd_mom_update", UpdateOp::Create<UpdateRule::kSgdMom>);
KV_REGISTER_OP("nag_mom_update", UpdateOp::Create<UpdateRule::kNag>);
KV_REGISTER_OP("adam_update", UpdateOp::Create<UpdateRule::kAdam>);
KV_REGISTER_OP("adagrad_update", UpdateOp::Create<UpdateRule::kAdaGrad>);
KV_REGISTER_OP("ftrl_update", UpdateOp::Create<UpdateRule::kFtrl>);
KV_REGISTER_OP("rmsprop_update", UpdateOp::Create<UpdateRule::kRmsProp>);
KV_REGISTER_OP("signsgd_update", UpdateOp::Create<UpdateRule::kSignSgd>);
KV_REGISTER_OP("signum_update", UpdateOp::Create<UpdateRule::kSignum>);

}  // namespace kvtrain
