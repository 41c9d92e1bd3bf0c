// Convolution's im2col layout and its GPU kernels (compiled by nvcc from
// convolution_op.cu); the CPU versions live in convolution_op.cc.
#ifndef KVTRAIN_OPS_CONVOLUTION_KERNELS_H_
#define KVTRAIN_OPS_CONVOLUTION_KERNELS_H_

#include <cstdint>

#include "ops/host_device.h"

namespace kvtrain {

// One image's geometry. The column matrix of g images has K = c * kh * kw
// rows (channel-major, then kernel row, then kernel column) and g * P
// columns (image-major, then output row, then output column), P = oh * ow.
struct ConvGeometry {
  int c = 0, h = 0, w = 0;    // input channels and size
  int kh = 0, kw = 0;         // kernel
  int sh = 1, sw = 1;         // stride
  int ph = 0, pw = 0;         // zero padding
  int oh = 0, ow = 0;         // output size
  KV_HOST_DEVICE int64_t K() const {
    return static_cast<int64_t>(c) * kh * kw;
  }
  KV_HOST_DEVICE int64_t P() const { return static_cast<int64_t>(oh) * ow; }
  KV_HOST_DEVICE int64_t image_size() const {
    return static_cast<int64_t>(c) * h * w;
  }
};

// The CPU versions for one image (convolution_op.cc): its column block (K
// rows of P, row stride ld) from the image, and added back onto it.
void Im2ColImageCpu(const ConvGeometry& g, const float* data, float* col, int64_t ld);
void Col2ImImageCpu(const ConvGeometry& g, const float* col, int64_t ld, float* data);

namespace gpu {

// col (K x g*P) from g consecutive images starting at `data`.
void Im2Col(const ConvGeometry& geo, const float* data, int g, float* col,
            void* stream);
// data (g images) = (or +=, when `add`) the sum of col's patches.
void Col2Im(const ConvGeometry& geo, const float* col, int g, float* data,
            bool add, void* stream);
// out[j][f][p] = (or +=) tmp[f][j*P + p] + bias[f] (bias may be null), for
// j < g, f < filters.
void ScatterBias(const float* tmp, const float* bias, int g, int filters,
                 int64_t P, float* out, bool add, void* stream);
// tmp[f][j*P + p] = dout[j][f][p].
void Gather(const float* dout, int g, int filters, int64_t P, float* tmp,
            void* stream);
// out[j][f][p] += bias[f] for j < n (the cuDNN path's bias).
void AddBias(const float* bias, int n, int filters, int64_t P, float* out,
             void* stream);
// db[f] = (or +=, when `add`) the sum over j < n and p of dout[j][f][p].
void BiasGrad(const float* dout, int n, int filters, int64_t P, float* db,
              bool add, void* stream);

}  // namespace gpu
}  // namespace kvtrain

#endif  // KVTRAIN_OPS_CONVOLUTION_KERNELS_H_
