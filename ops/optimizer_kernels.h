// Optimizer update kernels on plain pointers: the CPU versions (in
// optimizer_op.cc) and the GPU ones (nvcc, optimizer_op.cu). The update ops
// and the Optimizer class both call these.
#ifndef KVTRAIN_OPS_OPTIMIZER_KERNELS_H_
#define KVTRAIN_OPS_OPTIMIZER_KERNELS_H_

#include <cstdint>

namespace kvtrain {

enum class UpdateRule : int {
  kSgd = 0,      // no state
  kSgdMom = 1,   // state: momentum
  kNag = 2,      // state: momentum
  kAdam = 3,     // state: mean, var
  kAdaGrad = 4,  // state: history
  kFtrl = 5,     // state: z, n
  kRmsProp = 6,  // state: mean square
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
};

// Number of state arrays `rule` keeps per weight.
inline int NumUpdateStates(UpdateRule rule) {
  return rule == UpdateRule::kSgd
             ? 0
             : (rule == UpdateRule::kAdam || rule == UpdateRule::kFtrl ? 2 : 1);
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
