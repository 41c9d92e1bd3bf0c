// BatchNorm's GPU kernels (compiled by nvcc from batch_norm_op.cu). Data is
// (N, C, S) with S the product of the spatial dimensions; statistics are per
// channel over N and S.
#ifndef KVTRAIN_OPS_BATCH_NORM_KERNELS_H_
#define KVTRAIN_OPS_BATCH_NORM_KERNELS_H_

#include <cstdint>

namespace kvtrain {

struct BatchNormDims {
  int64_t n = 0, c = 0, s = 0;
};

namespace gpu {

// mean[c] and var[c] (biased) of the batch.
void BatchNormStats(const BatchNormDims& d, const float* x, float* mean,
                    float* var, void* stream);
// invstd[c] = 1 / sqrt(var[c] + eps) (var may alias invstd); when
// `momentum` >= 0 also
// moving = momentum * moving + (1 - momentum) * batch for mean and var.
void BatchNormFinishStats(int64_t c, const float* var, float eps,
                          float momentum, const float* mean, float* invstd,
                          float* moving_mean, float* moving_var, void* stream);
// The moving averages above with the batch variance recovered from
// invstd = 1 / sqrt(var + eps) (when cuDNN computed the statistics).
void BatchNormUpdateMoving(int64_t c, const float* mean, const float* invstd,
                           float eps, float momentum, float* moving_mean,
                           float* moving_var, void* stream);
// y (+)= gamma * (x - mean) * invstd + beta; gamma == null means 1.
void BatchNormForward(const BatchNormDims& d, const float* x,
                      const float* mean, const float* invstd,
                      const float* gamma, const float* beta, float* y,
                      bool add, void* stream);
// dgamma[c] = sum dy * xhat, dbeta[c] = sum dy (written, not added), and
// dx (+)= gamma * invstd * (dy - [batch_stats] (dbeta + xhat * dgamma) / M)
// where M = n * s. dx may be null.
void BatchNormBackward(const BatchNormDims& d, const float* x,
                       const float* dy, const float* mean,
                       const float* invstd, const float* gamma,
                       bool batch_stats, float* dgamma, float* dbeta,
                       float* dx, bool add_dx, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_BATCH_NORM_KERNELS_H_
