// Initializers: a counter-based generator keyed by (seed, name), so values do
// not depend on initialisation order; values are made on the host and copied.
#include "ops/initializer.h"

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace kvtrain {
namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a: a fixed hash, unlike std::hash, so seeds mean the same everywhere.
uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform in (0, 1) for index i of the stream.
double Uniform01(uint64_t stream, uint64_t i) {
  const uint64_t z = Mix(stream + (i + 1) * 0x9E3779B97F4A7C15ull);
  return (static_cast<double>(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Status CopyIn(const std::vector<float>& values, Tensor* t) {
  Tensor host = Tensor::FromVector(values, t->shape());
  return t->CopyFrom(host);
}

}  // namespace

StatusOr<InitializerOptions> ParseInitializer(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ':')) parts.push_back(part);
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("initializer \"" + text + "\": " + why +
                                   " (expected uniform[:scale], "
                                   "normal[:sigma], xavier[:uniform|"
                                   "gaussian[:avg|in|out[:magnitude]]], "
                                   "orthogonal[:gain[:uniform|gaussian]], bilinear or "
                                   "constant:value)");
  };
  auto number = [&](const std::string& s, float* out) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
      return false;
    }
    *out = static_cast<float>(v);
    return true;
  };
  InitializerOptions o;
  if (parts.empty()) return bad("empty");
  if (parts[0] == "uniform" || parts[0] == "normal") {
    o.type = parts[0] == "uniform" ? InitializerOptions::Type::kUniform
                                   : InitializerOptions::Type::kNormal;
    if (parts.size() > 2) return bad("too many fields");
    float* target = parts[0] == "uniform" ? &o.scale : &o.sigma;
    if (parts.size() == 2 && !number(parts[1], target)) {
      return bad("\"" + parts[1] + "\" is not a positive number");
    }
    return o;
  }
  if (parts[0] == "constant") {
    o.type = InitializerOptions::Type::kConstant;
    char* end = nullptr;
    const double v = parts.size() == 2 ? std::strtod(parts[1].c_str(), &end) : 0;
    if (parts.size() != 2 || parts[1].empty() || *end != '\0' || !std::isfinite(v)) {
      return bad("constant needs one finite value");
    }
    o.value = static_cast<float>(v);
    return o;
  }
  if (parts[0] == "bilinear") {
    if (parts.size() > 1) return bad("bilinear takes no fields");
    o.type = InitializerOptions::Type::kBilinear;
    return o;
  }
  if (parts[0] == "orthogonal") {
    o.type = InitializerOptions::Type::kOrthogonal;
    if (parts.size() > 3) return bad("too many fields");
    if (parts.size() > 1 && !number(parts[1], &o.gain)) {
      return bad("\"" + parts[1] + "\" is not a positive number");
    }
    if (parts.size() > 2) {
      if (parts[2] == "uniform") {
        o.distribution = InitializerOptions::Distribution::kUniform;
      } else if (parts[2] == "gaussian") {
        o.distribution = InitializerOptions::Distribution::kGaussian;
      } else {
        return bad("unknown distribution \"" + parts[2] + "\"");
      }
    }
    return o;
  }
  if (parts[0] != "xavier") return bad("unknown type \"" + parts[0] + "\"");
  o.type = InitializerOptions::Type::kXavier;
  if (parts.size() > 4) return bad("too many fields");
  if (parts.size() > 1) {
    if (parts[1] == "uniform") {
      o.distribution = InitializerOptions::Distribution::kUniform;
    } else if (parts[1] == "gaussian") {
      o.distribution = InitializerOptions::Distribution::kGaussian;
    } else {
      return bad("unknown distribution \"" + parts[1] + "\"");
    }
  }
  if (parts.size() > 2) {
    if (parts[2] == "avg") {
      o.factor = InitializerOptions::Factor::kAvg;
    } else if (parts[2] == "in") {
      o.factor = InitializerOptions::Factor::kIn;
    } else if (parts[2] == "out") {
      o.factor = InitializerOptions::Factor::kOut;
    } else {
      return bad("unknown factor \"" + parts[2] + "\"");
    }
  }
  if (parts.size() > 3 && !number(parts[3], &o.magnitude)) {
    return bad("\"" + parts[3] + "\" is not a positive number");
  }
  return o;
}

StatusOr<Initializer> Initializer::Create(const InitializerOptions& o) {
  if (!(o.scale > 0) || !(o.sigma > 0) || !(o.magnitude > 0)) {
    return Status::InvalidArgument(
        "initializer: scale, sigma and magnitude must be > 0");
  }
  return Initializer(o);
}

Status Initializer::Init(const std::string& name, Tensor* t) const {
  if (EndsWith(name, "_bias") || EndsWith(name, "_beta") ||
      EndsWith(name, "_moving_mean")) {
    return t->Fill(0.0);
  }
  if (EndsWith(name, "_gamma") || EndsWith(name, "_moving_var")) {
    return t->Fill(1.0);
  }
  return Fill(name, t);
}

Status Initializer::Fill(const std::string& name, Tensor* t) const {
  if (!t->defined() || t->dtype() != DType::kFloat32) {
    return Status::InvalidArgument("initializer: " + name +
                                   " is not a defined float32 tensor");
  }
  const InitializerOptions& o = options_;
  if (o.type == InitializerOptions::Type::kConstant) return t->Fill(o.value);
  if (o.type == InitializerOptions::Type::kBilinear) {
    const Shape& s = t->shape();
    if (s.ndim() != 4) {
      return Status::InvalidArgument(
          "initializer: bilinear needs a 4-D weight (a Deconvolution's), but " + name + " is " +
          s.ToString());
    }
    const double f = std::ceil(s[3] / 2.0);
    const double c = (2 * f - 1 - std::fmod(f, 2.0)) / (2 * f);
    std::vector<float> v(static_cast<size_t>(t->size()));
    for (int64_t i = 0; i < t->size(); ++i) {
      const double x = static_cast<double>(i % s[3]), y = static_cast<double>((i / s[3]) % s[2]);
      v[static_cast<size_t>(i)] =
          static_cast<float>((1 - std::fabs(x / f - c)) * (1 - std::fabs(y / f - c)));
    }
    return CopyIn(v, t);
  }
  const uint64_t stream = Mix(o.seed ^ Mix(HashName(name)));
  const int64_t n = t->size();
  bool gaussian = o.type == InitializerOptions::Type::kNormal;
  double scale = o.type == InitializerOptions::Type::kNormal ? o.sigma : o.scale;
  if (o.type == InitializerOptions::Type::kXavier) {
    const Shape& s = t->shape();
    if (s.ndim() < 2) {
      return Status::InvalidArgument(
          "initializer: xavier needs a weight of 2 or more dimensions, but " +
          name + " is " + s.ToString());
    }
    const double field = static_cast<double>(s.Product(2, s.ndim()));
    const double fan_in = s[1] * field, fan_out = s[0] * field;
    const double fan = o.factor == InitializerOptions::Factor::kIn    ? fan_in
                       : o.factor == InitializerOptions::Factor::kOut ? fan_out
                                                     : (fan_in + fan_out) / 2;
    scale = std::sqrt(o.magnitude / std::max(fan, 1.0));
    gaussian = o.distribution == InitializerOptions::Distribution::kGaussian;
  }
  if (o.type == InitializerOptions::Type::kOrthogonal) {
    gaussian = o.distribution == InitializerOptions::Distribution::kGaussian;
    scale = 1;
  }
  std::vector<double> d(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (!gaussian) {
      d[i] = scale * (2 * Uniform01(stream, i) - 1);
      continue;
    }
    // Box-Muller on the element's own pair of draws.
    const double u1 = Uniform01(stream, 2 * i), u2 = Uniform01(stream, 2 * i + 1);
    d[i] = scale * std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
  if (o.type == InitializerOptions::Type::kOrthogonal) {
    const Shape& s = t->shape();
    if (s.ndim() < 2) {
      return Status::InvalidArgument(
          "initializer: orthogonal needs a weight of 2 or more dimensions, but " + name +
          " is " + s.ToString());
    }
    KV_RETURN_IF_ERROR(Orthonormalize(s[0], n / s[0], &d));
    for (double& x : d) x *= o.gain;
  }
  std::vector<float> v(d.begin(), d.end());
  return CopyIn(v, t);
}

Status Initializer::Orthonormalize(int64_t rows, int64_t cols, std::vector<double>* m) {
  // The shorter side's vectors (rows of a wide matrix, columns of a tall
  // one) made orthonormal by modified Gram-Schmidt, twice over for
  // precision: Q of the random matrix's QR, as SVD's U or V would be.
  const bool by_rows = rows <= cols;
  const int64_t k = by_rows ? rows : cols, len = by_rows ? cols : rows;
  auto at = [&](int64_t vec, int64_t j) -> double& {
    return by_rows ? (*m)[static_cast<size_t>(vec * cols + j)]
                   : (*m)[static_cast<size_t>(j * cols + vec)];
  };
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t a = 0; a < k; ++a) {
      for (int64_t b = 0; b < a; ++b) {
        double dot = 0;
        for (int64_t j = 0; j < len; ++j) dot += at(a, j) * at(b, j);
        for (int64_t j = 0; j < len; ++j) at(a, j) -= dot * at(b, j);
      }
      double norm = 0;
      for (int64_t j = 0; j < len; ++j) norm += at(a, j) * at(a, j);
      norm = std::sqrt(norm);
      if (!(norm > 1e-12)) {
        return Status::Internal("initializer: orthogonal drew dependent vectors");
      }
      for (int64_t j = 0; j < len; ++j) at(a, j) /= norm;
    }
  }
  return Status::OK();
}

}  // namespace kvtrain
