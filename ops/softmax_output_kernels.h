// SoftmaxOutput's GPU kernels (compiled by nvcc from softmax_output_op.cu).
#ifndef KVTRAIN_OPS_SOFTMAX_OUTPUT_KERNELS_H_
#define KVTRAIN_OPS_SOFTMAX_OUTPUT_KERNELS_H_

#include <cstdint>

namespace kvtrain {
namespace gpu {

// prob (rows x classes) = softmax of each row of x.
void SoftmaxRows(const float* x, int64_t rows, int64_t classes, float* prob,
                 void* stream);
// dx (+)= scale * (prob - onehot(label)) per row; rows whose label equals
// ignore_label (when use_ignore) get zero. Labels are floats holding class
// indices; an index outside [0, classes) is counted in *bad (device int).
void SoftmaxGrad(const float* prob, const float* label, int64_t rows,
                 int64_t classes, float scale, bool use_ignore,
                 float ignore_label, float* dx, bool add, void* stream);
// Number of rows whose label is not ignore_label (for "valid"
// normalisation) and number of labels outside [0, classes); waits.
void CountLabels(const float* label, int64_t rows, int64_t classes,
                 bool use_ignore, float ignore_label, int64_t* valid,
                 int64_t* bad, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_SOFTMAX_OUTPUT_KERNELS_H_
