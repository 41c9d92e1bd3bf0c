// BLAS wrapper: OpenBLAS for CPU contexts, cuBLAS for GPU contexts.
#include "tensor/blas.h"

#include <algorithm>
#include <climits>
#include <memory>

#include <cblas.h>

#include "tensor/cpu_threads.h"

#ifdef KVTRAIN_CUDA
#include <cublas_v2.h>

#include "tensor/cuda_check.h"
#endif

extern "C" {
// OpenBLAS extensions (declared here: the multiarch cblas.h may not be
// OpenBLAS's own).
void openblas_set_num_threads(int num_threads);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

namespace kvtrain {
namespace blas {
namespace {

#ifdef KVTRAIN_CUDA
cublasHandle_t Handle(const DeviceContext* ctx) {
  KV_CUDA_CHECK(cudaSetDevice(ctx->device().id));
  return static_cast<cublasHandle_t>(ctx->cublas());
}
#endif

[[noreturn]] void NoCuda(const DeviceContext* ctx) {
  LOG(FATAL) << "BLAS call on " << ctx->device().ToString()
             << " but kvtrain was built without CUDA";
  abort();
}

// Level-1 cuBLAS takes int counts: larger vectors go in chunks.
constexpr int64_t kChunk = INT_MAX / 2;

// OpenBLAS runs single-threaded: its own pool spins after each call and
// would oversubscribe the cores beside the process's CPU pool
// (tensor/cpu_threads.h), which is where big GEMMs are split instead.
[[maybe_unused]] const bool kOpenBlasSingleThreaded = (openblas_set_num_threads(1), true);

// Below this many multiply-adds a GEMM runs on one thread: splitting it
// costs more than it saves.
constexpr int64_t kParallelGemmMacs = 1 << 18;
// Blocks are multiples of this many rows/columns (OpenBLAS's kernel tiles).
constexpr int kGemmAlign = 16;

void CpuGemmBlock(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta,
                  float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

// Splits C into blocks of rows (when m is the larger side) or columns and
// runs them on the CPU pool.
void CpuGemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
             const float* a, int lda, const float* b, int ldb, float beta,
             float* c, int ldc) {
  const int64_t macs = static_cast<int64_t>(m) * n * k;
  if (macs < kParallelGemmMacs || CpuThreads() == 1) {
    CpuGemmBlock(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                 ldc);
    return;
  }
  const bool split_rows = m >= n;
  const int64_t units = ((split_rows ? m : n) + kGemmAlign - 1) / kGemmAlign;
  ParallelFor(units, 1, [&](int64_t begin, int64_t end) {
    const int lo = static_cast<int>(begin * kGemmAlign);
    const int hi = std::min<int>(end * kGemmAlign, split_rows ? m : n);
    if (split_rows) {
      CpuGemmBlock(trans_a, trans_b, hi - lo, n, k, alpha,
                   trans_a ? a + lo : a + static_cast<int64_t>(lo) * lda, lda,
                   b, ldb, beta, c + static_cast<int64_t>(lo) * ldc, ldc);
    } else {
      CpuGemmBlock(trans_a, trans_b, m, hi - lo, k, alpha, a, lda,
                   trans_b ? b + static_cast<int64_t>(lo) * ldb : b + lo, ldb,
                   beta, c + lo, ldc);
    }
  });
}

}  // namespace

void Gemm(const DeviceContext* ctx, bool trans_a, bool trans_b, int m, int n,
          int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  if (ctx->device().is_cpu()) {
    CpuGemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#ifdef KVTRAIN_CUDA
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
  // operands and their roles.
  KV_CUBLAS_CHECK(cublasSgemm(Handle(ctx), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                              trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                              &alpha, b, ldb, a, lda, &beta, c, ldc));
#else
  NoCuda(ctx);
#endif
}

void GemmStridedBatched(const DeviceContext* ctx, bool trans_a, bool trans_b,
                        int m, int n, int k, float alpha, const float* a,
                        int lda, int64_t stride_a, const float* b, int ldb,
                        int64_t stride_b, float beta, float* c, int ldc,
                        int64_t stride_c, int batch) {
  if (ctx->device().is_cpu()) {
    for (int i = 0; i < batch; ++i) {
      Gemm(ctx, trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda,
           b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
    }
    return;
  }
#ifdef KVTRAIN_CUDA
  if (m == 0 || n == 0 || batch == 0) return;
  KV_CUBLAS_CHECK(cublasSgemmStridedBatched(
      Handle(ctx), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb, stride_b,
      a, lda, stride_a, &beta, c, ldc, stride_c, batch));
#else
  NoCuda(ctx);
#endif
}

void Axpy(const DeviceContext* ctx, int64_t n, float alpha, const float* x,
          float* y) {
  for (int64_t off = 0; off < n; off += kChunk) {
    const int len = static_cast<int>(std::min(kChunk, n - off));
    if (ctx->device().is_cpu()) {
      cblas_saxpy(len, alpha, x + off, 1, y + off, 1);
      continue;
    }
#ifdef KVTRAIN_CUDA
    KV_CUBLAS_CHECK(cublasSaxpy(Handle(ctx), len, &alpha, x + off, 1, y + off, 1));
#else
    NoCuda(ctx);
#endif
  }
}

void Scal(const DeviceContext* ctx, int64_t n, float alpha, float* x) {
  for (int64_t off = 0; off < n; off += kChunk) {
    const int len = static_cast<int>(std::min(kChunk, n - off));
    if (ctx->device().is_cpu()) {
      cblas_sscal(len, alpha, x + off, 1);
      continue;
    }
#ifdef KVTRAIN_CUDA
    KV_CUBLAS_CHECK(cublasSscal(Handle(ctx), len, &alpha, x + off, 1));
#else
    NoCuda(ctx);
#endif
  }
}

float Dot(const DeviceContext* ctx, int64_t n, const float* x,
          const float* y) {
  double sum = 0;
  for (int64_t off = 0; off < n; off += kChunk) {
    const int len = static_cast<int>(std::min(kChunk, n - off));
    if (ctx->device().is_cpu()) {
      sum += cblas_sdot(len, x + off, 1, y + off, 1);
      continue;
    }
#ifdef KVTRAIN_CUDA
    float part = 0;
    KV_CUBLAS_CHECK(cublasSdot(Handle(ctx), len, x + off, 1, y + off, 1, &part));
    sum += part;
#else
    NoCuda(ctx);
#endif
  }
  return static_cast<float>(sum);
}

namespace {

Status CheckFloat(const Tensor& t, const char* op, const char* name) {
  if (!t.defined()) {
    return Status::InvalidArgument(std::string(op) + ": " + name +
                                   " is undefined");
  }
  if (t.dtype() != DType::kFloat32) {
    return Status::InvalidArgument(std::string(op) + ": " + name + " is " +
                                   DTypeName(t.dtype()) +
                                   ", only float32 is supported");
  }
  return Status::OK();
}

Status CheckSameDevice(const Tensor& a, const Tensor& b, const char* op) {
  if (a.device() != b.device()) {
    return Status::InvalidArgument(std::string(op) + ": operands on " +
                                   a.device().ToString() + " and " +
                                   b.device().ToString());
  }
  return Status::OK();
}

Shape OpShape(const Tensor& t, bool trans) {
  return trans ? Shape{t.dim(1), t.dim(0)} : Shape{t.dim(0), t.dim(1)};
}

}  // namespace

Status Gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
            float alpha, float beta, Tensor* c) {
  KV_RETURN_IF_ERROR(CheckFloat(a, "gemm", "A"));
  KV_RETURN_IF_ERROR(CheckFloat(b, "gemm", "B"));
  KV_RETURN_IF_ERROR(CheckFloat(*c, "gemm", "C"));
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(c)}) {
    if (t->ndim() != 2) {
      return Status::InvalidArgument("gemm: operands must be 2-D, got " +
                                     t->shape().ToString());
    }
  }
  KV_RETURN_IF_ERROR(CheckSameDevice(a, b, "gemm"));
  KV_RETURN_IF_ERROR(CheckSameDevice(a, *c, "gemm"));
  const Shape sa = OpShape(a, trans_a), sb = OpShape(b, trans_b);
  if (sa[1] != sb[0]) {
    return Status::InvalidArgument(
        "gemm: op(A) is " + sa.ToString() + " but op(B) is " + sb.ToString() +
        ": inner dimensions " + std::to_string(sa[1]) + " and " +
        std::to_string(sb[0]) + " differ");
  }
  const Shape want{sa[0], sb[1]};
  if (c->shape() != want) {
    return Status::InvalidArgument("gemm: C is " + c->shape().ToString() +
                                   " but op(A) op(B) is " + want.ToString());
  }
  for (int64_t d : {sa[0], sa[1], sb[1]}) {
    if (d > INT_MAX) {
      return Status::InvalidArgument("gemm: dimension " + std::to_string(d) +
                                     " exceeds the BLAS int range");
    }
  }
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(a.device()));
  Gemm(ctx, trans_a, trans_b, static_cast<int>(sa[0]),
       static_cast<int>(sb[1]), static_cast<int>(sa[1]), alpha,
       a.data<float>(), static_cast<int>(a.dim(1)), b.data<float>(),
       static_cast<int>(b.dim(1)), beta, c->data<float>(),
       static_cast<int>(c->dim(1)));
  return Status::OK();
}

Status Axpy(float alpha, const Tensor& x, Tensor* y) {
  KV_RETURN_IF_ERROR(CheckFloat(x, "axpy", "x"));
  KV_RETURN_IF_ERROR(CheckFloat(*y, "axpy", "y"));
  KV_RETURN_IF_ERROR(CheckSameShapeAndType(x, *y, "axpy"));
  KV_RETURN_IF_ERROR(CheckSameDevice(x, *y, "axpy"));
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(x.device()));
  Axpy(ctx, x.size(), alpha, x.data<float>(), y->data<float>());
  return Status::OK();
}

Status Scal(float alpha, Tensor* x) {
  KV_RETURN_IF_ERROR(CheckFloat(*x, "scal", "x"));
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(x->device()));
  Scal(ctx, x->size(), alpha, x->data<float>());
  return Status::OK();
}

StatusOr<float> Dot(const Tensor& x, const Tensor& y) {
  KV_RETURN_IF_ERROR(CheckFloat(x, "dot", "x"));
  KV_RETURN_IF_ERROR(CheckFloat(y, "dot", "y"));
  KV_RETURN_IF_ERROR(CheckSameShapeAndType(x, y, "dot"));
  KV_RETURN_IF_ERROR(CheckSameDevice(x, y, "dot"));
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(x.device()));
  return Dot(ctx, x.size(), x.data<float>(), y.data<float>());
}

std::string CpuBlasDescription() {
  return std::string(openblas_get_config()) + " (" + openblas_get_corename() +
         " kernels)";
}

}  // namespace blas
}  // namespace kvtrain
