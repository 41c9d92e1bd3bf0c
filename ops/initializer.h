// Weight initializers: uniform, normal, Xavier, orthogonal, constant and
// bilinear (upsampling kernels), seeded and deterministic
// (an array's values depend only on the seed, its name and its shape, not on
// the order arrays are initialised in or the device they live on).
#ifndef KVTRAIN_OPS_INITIALIZER_H_
#define KVTRAIN_OPS_INITIALIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {

struct InitializerOptions {
  // kBilinear: a 4-D weight (.., .., kh, kw) whose every kernel is the
  // bilinear interpolation filter, (1 - |x / f - c|) (1 - |y / f - c|) with
  // f = ceil(kw / 2), c = (2 f - 1 - f mod 2) / (2 f) (MXNet's Bilinear: a
  // Deconvolution of stride f upsamples by f).
  enum class Type { kUniform, kNormal, kXavier, kConstant, kOrthogonal, kBilinear };
  enum class Distribution { kUniform, kGaussian };
  enum class Factor { kAvg, kIn, kOut };

  // Which rule fills weights.
  Type type = Type::kUniform;
  // kUniform: U(-scale, scale).
  float scale = 0.07f;
  // kNormal: N(0, sigma^2).
  float sigma = 0.01f;
  // kXavier: s = sqrt(magnitude / fan), fan = (fan_in + fan_out) / 2, fan_in
  // or fan_out (fan_in = shape[1] * receptive field, fan_out = shape[0] *
  // receptive field); values from U(-s, s) or N(0, s^2).
  Distribution distribution = Distribution::kUniform;
  Factor factor = Factor::kAvg;
  float magnitude = 3.0f;
  // kConstant: every weight is `value` (MXNet's Zero, One, Constant).
  float value = 0.0f;
  // kOrthogonal: the weight as a matrix (shape[0], the rest) is `gain`
  // times one with orthonormal rows (or columns, when it has more rows than
  // columns), made from random values drawn as `distribution` says (MXNet's
  // Orthogonal, whose scale defaults to sqrt(2)).
  float gain = 1.41421356f;
  // Seed of every array's stream.
  uint64_t seed = 0;
};

// Parses "uniform", "uniform:0.1", "normal:0.01", "xavier",
// "xavier:gaussian:in:2" (distribution, factor, magnitude; each optional),
// "constant:V" (any finite V), "orthogonal", "orthogonal:GAIN",
// "orthogonal:GAIN:uniform|gaussian", "bilinear".
StatusOr<InitializerOptions> ParseInitializer(const std::string& text);

// Immutable after Create; thread-safe.
class Initializer {
 public:
  static StatusOr<Initializer> Create(const InitializerOptions& options);

  // Fills `t` (float32, any device) by its name: names ending in _bias,
  // _beta or _moving_mean get 0, _gamma and _moving_var get 1, anything
  // else (weights) gets the rule.
  Status Init(const std::string& name, Tensor* t) const;
  // Fills `t` with the rule regardless of the name.
  Status Fill(const std::string& name, Tensor* t) const;

  const InitializerOptions& options() const { return options_; }

 private:
  explicit Initializer(const InitializerOptions& o) : options_(o) {}
  // The rows (rows <= cols) or the columns of the row-major matrix `m`
  // made orthonormal.
  static Status Orthonormalize(int64_t rows, int64_t cols, std::vector<double>* m);

  InitializerOptions options_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_OPS_INITIALIZER_H_
