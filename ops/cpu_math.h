// Vectorised elementwise math for CPU kernels (exp, tanh, sigmoid over
// arrays). Built for AVX-512, AVX2 and the baseline ISA and picked at load
// time, so one binary runs fast on each. Accuracy: a few float ulps.
#ifndef KVTRAIN_OPS_CPU_MATH_H_
#define KVTRAIN_OPS_CPU_MATH_H_

#include <cstdint>

// Builds a function for AVX-512, AVX2 and the baseline ISA, picked when the
// program loads (GCC on x86-64; elsewhere a plain function).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define KV_MULTI_ISA \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KV_MULTI_ISA
#endif

namespace kvtrain {
namespace cpu_math {

// y[i] = exp(x[i]); inputs are clamped to [-87, 88].
void Exp(const float* x, float* y, int64_t n);
// y[i] = tanh(x[i]).
void Tanh(const float* x, float* y, int64_t n);
// y[i] = 1 / (1 + exp(-x[i])).
void Sigmoid(const float* x, float* y, int64_t n);
// y may be x (in place) in all three; no other overlap.

}  // namespace cpu_math
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_CPU_MATH_H_
