// Optimizer update GPU kernels: one elementwise kernel per rule.
#include "ops/optimizer_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

__device__ float Clipped(const UpdateParams& p, float grad) {
  float g = p.rescale_grad * grad;
  if (p.clip_gradient > 0.0f) {
    g = fminf(fmaxf(g, -p.clip_gradient), p.clip_gradient);
  }
  return g;
}

__global__ void UpdateKernel(UpdateRule rule, UpdateParams p, int64_t n,
                             float* w, const float* grad, float* s0,
                             float* s1) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = Clipped(p, grad[i]);
    switch (rule) {
      case UpdateRule::kSgd:
        w[i] -= p.lr * (g + p.wd * w[i]);
        break;
      case UpdateRule::kSgdMom:
        s0[i] = p.momentum * s0[i] - p.lr * (g + p.wd * w[i]);
        w[i] += s0[i];
        break;
      case UpdateRule::kNag: {
        const float gw = g + p.wd * w[i];
        s0[i] = p.momentum * s0[i] + gw;
        w[i] -= p.lr * (gw + p.momentum * s0[i]);
        break;
      }
      case UpdateRule::kAdam: {
        const float gw = g + p.wd * w[i];
        s0[i] = p.beta1 * s0[i] + (1.0f - p.beta1) * gw;
        s1[i] = p.beta2 * s1[i] + (1.0f - p.beta2) * gw * gw;
        w[i] -= p.lr * s0[i] / (sqrtf(s1[i]) + p.epsilon);
        break;
      }
      case UpdateRule::kAdaGrad:
        s0[i] += g * g;
        w[i] -= p.lr * (g / sqrtf(s0[i] + p.epsilon) + p.wd * w[i]);
        break;
      case UpdateRule::kRmsProp: {
        const float gw = g + p.wd * w[i];
        s0[i] = (1.0f - p.gamma1) * gw * gw + p.gamma1 * s0[i];
        w[i] -= p.lr * gw / sqrtf(s0[i] + p.epsilon);
        break;
      }
      case UpdateRule::kFtrl: {
        const float n_new = s1[i] + g * g;
        s0[i] += g - (sqrtf(n_new) - sqrtf(s1[i])) / p.lr * w[i];
        s1[i] = n_new;
        const float z = s0[i];
        w[i] = fabsf(z) > p.lamda1
                   ? ((z > 0 ? p.lamda1 : -p.lamda1) - z) /
                         ((p.beta + sqrtf(n_new)) / p.lr + p.wd)
                   : 0.0f;
        break;
      }
      default:  // kSignSgd, kSignum, kAdamax, kAdaDelta
        UpdateNewerRule(rule, p, &w[i], grad[i], s0 == nullptr ? nullptr : &s0[i],
                        s1 == nullptr ? nullptr : &s1[i]);
        break;
    }
  }
}

}  // namespace

void Update(UpdateRule rule, const UpdateParams& p, int64_t n, float* w,
            const float* g, float* s0, float* s1, void* stream) {
  if (n == 0) return;
  const int64_t want = (n + 255) / 256;
  const int blocks = static_cast<int>(want < 4096 ? want : 4096);
  UpdateKernel<<<blocks, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      rule, p, n, w, g, s0, s1);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
