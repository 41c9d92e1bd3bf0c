// Optimizer update kernels on plain pointers: the CPU versions (in
// optimizer_op.cc) and the GPU ones (nvcc, optimizer_op.cu). The update ops
// and the Optimizer class both call these.
#ifndef KVTRAIN_OPS_OPTIMIZER_KERNELS_H_
#define KVTRAIN_OPS_OPTIMIZER_KERNELS_H_

#include <cmath>
#include <cstdint>

#include "ops/host_device.h"

namespace kvtrain {

enum class UpdateRule : int {
  kSgd = 0,      // no state
  kSgdMom = 1,   // state: momentum
  kNag = 2,      // state: momentum
  kAdam = 3,     // state: mean, var
  kAdaGrad = 4,  // state: history
  kFtrl = 5,     // state: z, n
  kRmsProp = 6,  // state: mean square
  kSignSgd = 7,  // no state
  kSignum = 8,   // state: momentum
  kAdamax = 9,   // state: mean, infinity norm
  kAdaDelta = 10,  // state: mean square of gradients, of steps
};

// Scalars of one update step (see proto/optimizer.proto for the formulas).
struct UpdateParams {
  float lr = 0.01f;             // for Adam: the bias-corrected lr_t
  float wd = 0.0f;
  float rescale_grad = 1.0f;
  float clip_gradient = -1.0f;  // <= 0: no clipping
  float momentum = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float lamda1 = 0.01f;         // FTRL
  float beta = 1.0f;            // FTRL
  float gamma1 = 0.9f;          // RMSProp
  float wd_lh = 0.0f;           // Signum
  float rho = 0.9f;             // AdaDelta
};

// Number of state arrays `rule` keeps per weight.
inline int NumUpdateStates(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::kSgd:
    case UpdateRule::kSignSgd:
      return 0;
    case UpdateRule::kAdam:
    case UpdateRule::kFtrl:
    case UpdateRule::kAdamax:
    case UpdateRule::kAdaDelta:
      return 2;
    default:
      return 1;
  }
}

// The formulas the CPU and GPU loops share for the newer rules (one element;
// `grad` is the raw gradient).

KV_HOST_DEVICE inline float OptSign(float x) { return static_cast<float>((x > 0.0f) - (x < 0.0f)); }

KV_HOST_DEVICE inline float OptClip(const UpdateParams& p, float g) {
  if (p.clip_gradient > 0.0f) {
    g = g < -p.clip_gradient ? -p.clip_gradient : (g > p.clip_gradient ? p.clip_gradient : g);
  }
  return g;
}

// kSignSgd, kSignum, kAdamax, kAdaDelta (see proto/optimizer.proto).
KV_HOST_DEVICE inline void UpdateNewerRule(UpdateRule rule, const UpdateParams& p, float* w, float grad,
                               float* s0, float* s1) {
  switch (rule) {
    case UpdateRule::kSignSgd:
      *w = (1.0f - p.lr * p.wd) * *w - p.lr * OptSign(grad);
      break;
    case UpdateRule::kSignum: {
      const float g = OptClip(p, p.rescale_grad * grad);
      *s0 = p.momentum * *s0 - (1.0f - p.momentum) * (g + p.wd * *w);
      *w = (1.0f - p.lr * p.wd_lh) * *w + p.lr * OptSign(*s0);
      break;
    }
    case UpdateRule::kAdamax: {
      const float g = OptClip(p, p.rescale_grad * grad + p.wd * *w);
      *s0 = p.beta1 * *s0 + (1.0f - p.beta1) * g;
      const float decayed = p.beta2 * *s1, size = g < 0.0f ? -g : g;
      *s1 = decayed > size ? decayed : size;
      if (*s1 > 0.0f) *w -= p.lr * *s0 / *s1;
      break;
    }
    case UpdateRule::kAdaDelta: {
      const float g = OptClip(p, p.rescale_grad * grad);
      *s0 = p.rho * *s0 + (1.0f - p.rho) * g * g;
      const float d = std::sqrt(*s1 + p.epsilon) / std::sqrt(*s0 + p.epsilon) * g;
      *s1 = p.rho * *s1 + (1.0f - p.rho) * d * d;
      *w -= d + p.wd * *w;
      break;
    }
    default:
      break;
  }
}

// w[0, n) updated in place from g; s0/s1 are the rule's states (unused ones
// may be null).
void UpdateCpu(UpdateRule rule, const UpdateParams& p, int64_t n, float* w,
               const float* g, float* s0, float* s1);

namespace gpu {

// As UpdateCpu, on `stream` (a cudaStream_t).
void Update(UpdateRule rule, const UpdateParams& p, int64_t n, float* w,
            const float* g, float* s0, float* s1, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_OPTIMIZER_KERNELS_H_
