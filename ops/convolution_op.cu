// Convolution GPU kernels: im2col, col2im (one thread per input element, no
// atomics), and the scatter/gather between the column layout and NCHW.
#include "ops/convolution_kernels.h"
#include "tensor/cuda_check.h"

namespace kvtrain {
namespace gpu {
namespace {

#define KV_GRID_LOOP(i, n)                                                  \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) +          \
                   threadIdx.x;                                             \
       i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

int Blocks(int64_t n) {
  const int64_t want = (n + 255) / 256;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

// One thread per column-matrix element.
__global__ void Im2ColKernel(ConvGeometry geo, const float* data, int g,
                             float* col) {
  const int64_t P = geo.P(), cols = g * P, total = geo.K() * cols;
  KV_GRID_LOOP(idx, total) {
    const int64_t row = idx / cols, colx = idx % cols;
    const int j = static_cast<int>(colx / P);
    const int p = static_cast<int>(colx % P);
    const int kj = static_cast<int>(row % geo.kw);
    const int ki = static_cast<int>((row / geo.kw) % geo.kh);
    const int c = static_cast<int>(row / (geo.kw * geo.kh));
    const int iy = (p / geo.ow) * geo.sh - geo.ph + ki;
    const int ix = (p % geo.ow) * geo.sw - geo.pw + kj;
    float v = 0.0f;
    if (iy >= 0 && iy < geo.h && ix >= 0 && ix < geo.w) {
      v = data[j * geo.image_size() + (static_cast<int64_t>(c) * geo.h + iy) *
                                          geo.w + ix];
    }
    col[idx] = v;
  }
}

// One thread per input element: sums every column entry that read it.
__global__ void Col2ImKernel(ConvGeometry geo, const float* col, int g,
                             float* data, bool add) {
  const int64_t P = geo.P(), cols = g * P;
  const int64_t total = g * geo.image_size();
  KV_GRID_LOOP(idx, total) {
    const int j = static_cast<int>(idx / geo.image_size());
    const int64_t rest = idx % geo.image_size();
    const int c = static_cast<int>(rest / (geo.h * geo.w));
    const int iy = static_cast<int>((rest / geo.w) % geo.h);
    const int ix = static_cast<int>(rest % geo.w);
    float sum = 0.0f;
    for (int ki = 0; ki < geo.kh; ++ki) {
      const int ty = iy + geo.ph - ki;
      if (ty < 0 || ty % geo.sh != 0 || ty / geo.sh >= geo.oh) continue;
      for (int kj = 0; kj < geo.kw; ++kj) {
        const int tx = ix + geo.pw - kj;
        if (tx < 0 || tx % geo.sw != 0 || tx / geo.sw >= geo.ow) continue;
        const int64_t row = (static_cast<int64_t>(c) * geo.kh + ki) * geo.kw + kj;
        const int64_t p = (ty / geo.sh) * geo.ow + tx / geo.sw;
        sum += col[row * cols + j * P + p];
      }
    }
    data[idx] = add ? data[idx] + sum : sum;
  }
}

__global__ void ScatterBiasKernel(const float* tmp, const float* bias, int g,
                                  int filters, int64_t P, float* out,
                                  bool add) {
  const int64_t total = static_cast<int64_t>(g) * filters * P;
  KV_GRID_LOOP(idx, total) {
    const int j = static_cast<int>(idx / (filters * P));
    const int f = static_cast<int>((idx / P) % filters);
    const int64_t p = idx % P;
    float v = tmp[f * g * P + j * P + p];
    if (bias != nullptr) v += bias[f];
    out[idx] = add ? out[idx] + v : v;
  }
}

__global__ void GatherKernel(const float* dout, int g, int filters, int64_t P,
                             float* tmp) {
  const int64_t total = static_cast<int64_t>(g) * filters * P;
  KV_GRID_LOOP(idx, total) {
    const int j = static_cast<int>(idx / (filters * P));
    const int f = static_cast<int>((idx / P) % filters);
    const int64_t p = idx % P;
    tmp[f * g * P + j * P + p] = dout[idx];
  }
}

__global__ void AddBiasKernel(const float* bias, int n, int filters,
                              int64_t P, float* out) {
  const int64_t total = static_cast<int64_t>(n) * filters * P;
  KV_GRID_LOOP(idx, total) { out[idx] += bias[(idx / P) % filters]; }
}

// One block per filter: a block-wide sum over the batch and positions.
__global__ void BiasGradKernel(const float* dout, int n, int filters,
                               int64_t P, float* db, bool add) {
  __shared__ float partial[256];
  const int f = blockIdx.x;
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float* row = dout + (static_cast<int64_t>(j) * filters + f) * P;
    for (int64_t p = threadIdx.x; p < P; p += blockDim.x) sum += row[p];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[f] = add ? db[f] + partial[0] : partial[0];
}

}  // namespace

void AddBias(const float* bias, int n, int filters, int64_t P, float* out,
             void* stream) {
  AddBiasKernel<<<Blocks(static_cast<int64_t>(n) * filters * P), 256, 0,
                  static_cast<cudaStream_t>(stream)>>>(bias, n, filters, P,
                                                       out);
  KV_CUDA_LAUNCH_CHECK();
}

void BiasGrad(const float* dout, int n, int filters, int64_t P, float* db,
              bool add, void* stream) {
  BiasGradKernel<<<filters, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      dout, n, filters, P, db, add);
  KV_CUDA_LAUNCH_CHECK();
}

void Im2Col(const ConvGeometry& geo, const float* data, int g, float* col,
            void* stream) {
  Im2ColKernel<<<Blocks(geo.K() * g * geo.P()), 256, 0,
                 static_cast<cudaStream_t>(stream)>>>(geo, data, g, col);
  KV_CUDA_LAUNCH_CHECK();
}

void Col2Im(const ConvGeometry& geo, const float* col, int g, float* data,
            bool add, void* stream) {
  Col2ImKernel<<<Blocks(g * geo.image_size()), 256, 0,
                 static_cast<cudaStream_t>(stream)>>>(geo, col, g, data, add);
  KV_CUDA_LAUNCH_CHECK();
}

void ScatterBias(const float* tmp, const float* bias, int g, int filters,
                 int64_t P, float* out, bool add, void* stream) {
  ScatterBiasKernel<<<Blocks(static_cast<int64_t>(g) * filters * P), 256, 0,
                      static_cast<cudaStream_t>(stream)>>>(tmp, bias, g,
                                                           filters, P, out,
                                                           add);
  KV_CUDA_LAUNCH_CHECK();
}

void Gather(const float* dout, int g, int filters, int64_t P, float* tmp,
            void* stream) {
  GatherKernel<<<Blocks(static_cast<int64_t>(g) * filters * P), 256, 0,
                 static_cast<cudaStream_t>(stream)>>>(dout, g, filters, P,
                                                      tmp);
  KV_CUDA_LAUNCH_CHECK();
}

}  // namespace gpu
}  // namespace kvtrain
