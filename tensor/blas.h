// The one BLAS wrapper: every matrix product and level-1 vector op in kvtrain
// goes through here, on OpenBLAS (CPU) or cuBLAS (GPU) depending on the
// device context. Matrices are row-major; leading dimensions are row strides.
#ifndef KVTRAIN_TENSOR_BLAS_H_
#define KVTRAIN_TENSOR_BLAS_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "tensor/device.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace blas {

// C (m x n) = alpha * op(A) * op(B) + beta * C, where op(A) is m x k and
// op(B) is k x n. Pointers live on ctx's device. Sizes are the caller's
// responsibility (a bad size is a programmer bug).
void Gemm(const DeviceContext* ctx, bool trans_a, bool trans_b, int m, int n,
          int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);

// `batch` independent products C_i = alpha * op(A_i) * op(B_i) + beta * C_i,
// where X_i = x + i * stride_x.
void GemmStridedBatched(const DeviceContext* ctx, bool trans_a, bool trans_b,
                        int m, int n, int k, float alpha, const float* a,
                        int lda, int64_t stride_a, const float* b, int ldb,
                        int64_t stride_b, float beta, float* c, int ldc,
                        int64_t stride_c, int batch);

// y += alpha * x.
void Axpy(const DeviceContext* ctx, int64_t n, float alpha, const float* x,
          float* y);
// x *= alpha.
void Scal(const DeviceContext* ctx, int64_t n, float alpha, float* x);
// sum_i x_i * y_i (waits for the result on GPUs).
float Dot(const DeviceContext* ctx, int64_t n, const float* x, const float* y);

// Checked tensor forms: 2-D float32 tensors on one device; errors name the
// shapes, e.g. "gemm: op(A) is (2, 3) but op(B) is (4, 5): inner dimensions
// 3 and 4 differ".
Status Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
            float alpha, float beta, Tensor* c);
Status Axpy(float alpha, const Tensor& x, Tensor* y);
Status Scal(float alpha, Tensor* x);
StatusOr<float> Dot(const Tensor& x, const Tensor& y);

// "OpenBLAS 0.3.21 ... (Haswell kernels)": the BLAS library and the kernel
// set it picked for this CPU (OPENBLAS_CORETYPE, read by OpenBLAS when it
// loads, overrides the pick).
std::string CpuBlasDescription();

}  // namespace blas
}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_BLAS_H_
