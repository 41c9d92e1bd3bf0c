// Gradient compression kernels (see compression.h for the formats).
#include "kvstore/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvtrain {
namespace kv {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void PutWord(char* out, uint32_t w) {
  const unsigned char b[4] = {static_cast<unsigned char>(w), static_cast<unsigned char>(w >> 8),
                              static_cast<unsigned char>(w >> 16),
                              static_cast<unsigned char>(w >> 24)};
  std::memcpy(out, b, 4);
}

uint32_t GetWord(const char* in) {
  unsigned char b[4];
  std::memcpy(b, in, 4);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

int64_t Words(int64_t n, int per_word) { return (n + per_word - 1) / per_word; }

void EncodeTwoBit(float t, const float* grad, float* residual, int64_t n, char* out) {
  std::memcpy(out, &t, 4);
  char* words = out + 4;
  for (int64_t w = 0; w < Words(n, 16); ++w) {
    uint32_t word = 0;
    const int64_t end = std::min<int64_t>(n, (w + 1) * 16);
    for (int64_t i = w * 16; i < end; ++i) {
      const float v = grad[i] + residual[i];
      uint32_t code;
      float sent;
      if (!std::isfinite(v)) {
        code = 1;
        sent = v;  // the residual restarts at 0
      } else if (v >= t) {
        code = 3;
        sent = t;
      } else if (v <= -t) {
        code = 2;
        sent = -t;
      } else {
        code = 0;
        sent = 0.0f;
      }
      residual[i] = code == 1 ? 0.0f : v - sent;
      word |= code << (2 * (i - w * 16));
    }
    PutWord(words + 4 * w, word);
  }
}

void EncodeOneBit(const float* grad, float* residual, int64_t n, char* out) {
  double sum = 0;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const float v = grad[i] + residual[i];
    finite = finite && std::isfinite(v);
    sum += std::fabs(v);
  }
  const float scale = !finite ? std::numeric_limits<float>::quiet_NaN()
                              : n == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(n));
  std::memcpy(out, &scale, 4);
  char* words = out + 4;
  for (int64_t w = 0; w < Words(n, 32); ++w) {
    uint32_t word = 0;
    const int64_t end = std::min<int64_t>(n, (w + 1) * 32);
    for (int64_t i = w * 32; i < end; ++i) {
      const float v = grad[i] + residual[i];
      const bool positive = v >= 0.0f;
      if (!finite) {
        // Every element arrives as NaN: nothing of a finite one was sent.
        residual[i] = std::isfinite(v) ? v : 0.0f;
      } else {
        residual[i] = v - (positive ? scale : -scale);
      }
      word |= static_cast<uint32_t>(positive) << (i - w * 32);
    }
    PutWord(words + 4 * w, word);
  }
}

}  // namespace

std::string CompressionName(CompressionType type) {
  switch (type) {
    case proto::GradientCompression::NONE:
      return "none";
    case proto::GradientCompression::TWO_BIT:
      return "2bit";
    case proto::GradientCompression::ONE_BIT:
      return "1bit";
    case proto::GradientCompression::FP16:
      return "fp16";
    default:
      return "type " + std::to_string(static_cast<int>(type));
  }
}

Status CheckCompression(const proto::GradientCompression& spec) {
  switch (spec.type()) {
    case proto::GradientCompression::NONE:
    case proto::GradientCompression::ONE_BIT:
    case proto::GradientCompression::FP16:
      return Status::OK();
    case proto::GradientCompression::TWO_BIT:
      if (!(spec.threshold() > 0.0f) || !std::isfinite(spec.threshold())) {
        return Status::InvalidArgument("gradient compression 2bit: threshold " +
                                       std::to_string(spec.threshold()) +
                                       " must be a finite value > 0 (MXNet's default is 0.5)");
      }
      return Status::OK();
    default:
      return Status::InvalidArgument("gradient compression: unknown type " +
                                     std::to_string(static_cast<int>(spec.type())) +
                                     " (valid: none, 2bit, 1bit, fp16)");
  }
}

StatusOr<proto::GradientCompression> ParseCompression(const std::string& type,
                                                      float threshold) {
  proto::GradientCompression spec;
  if (type == "none" || type.empty()) {
    spec.set_type(proto::GradientCompression::NONE);
  } else if (type == "2bit") {
    spec.set_type(proto::GradientCompression::TWO_BIT);
    spec.set_threshold(threshold);
  } else if (type == "1bit") {
    spec.set_type(proto::GradientCompression::ONE_BIT);
  } else if (type == "fp16") {
    spec.set_type(proto::GradientCompression::FP16);
  } else {
    return Status::InvalidArgument("gradient compression: unknown type '" + type +
                                   "' (valid: none, 2bit, 1bit, fp16)");
  }
  KV_RETURN_IF_ERROR(CheckCompression(spec));
  return spec;
}

bool HasResidual(CompressionType type) {
  return type == proto::GradientCompression::TWO_BIT ||
         type == proto::GradientCompression::ONE_BIT;
}

size_t EncodedBytes(CompressionType type, int64_t n) {
  switch (type) {
    case proto::GradientCompression::TWO_BIT:
      return 4 + 4 * static_cast<size_t>(Words(n, 16));
    case proto::GradientCompression::ONE_BIT:
      return 4 + 4 * static_cast<size_t>(Words(n, 32));
    case proto::GradientCompression::FP16:
      return 2 * static_cast<size_t>(n);
    default:
      return 4 * static_cast<size_t>(n);
  }
}

void Encode(CompressionType type, float threshold, const float* grad, float* residual,
            int64_t n, char* out) {
  switch (type) {
    case proto::GradientCompression::TWO_BIT:
      return EncodeTwoBit(threshold, grad, residual, n, out);
    case proto::GradientCompression::ONE_BIT:
      return EncodeOneBit(grad, residual, n, out);
    case proto::GradientCompression::FP16: {
      // Halves may sit at any even offset of the message: go through a
      // properly aligned value.
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = FloatToHalf(grad[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    }
    default:
      std::memcpy(out, grad, 4 * static_cast<size_t>(n));
  }
}

Status Decode(CompressionType type, const char* in, size_t bytes, int64_t n, float* out) {
  const size_t want = EncodedBytes(type, n);
  if (bytes != want) {
    return Status::DataLoss(CompressionName(type) + "-encoded array of " + std::to_string(n) +
                            " values takes " + std::to_string(want) + " bytes but " +
                            std::to_string(bytes) + " arrived");
  }
  switch (type) {
    case proto::GradientCompression::TWO_BIT: {
      float t;
      std::memcpy(&t, in, 4);
      if (!(t > 0.0f) || !std::isfinite(t)) {
        return Status::DataLoss("2bit-encoded array with threshold " + std::to_string(t) +
                                " (must be a finite value > 0)");
      }
      const float table[4] = {0.0f, std::numeric_limits<float>::quiet_NaN(), -t, t};
      for (int64_t w = 0; w < Words(n, 16); ++w) {
        const uint32_t word = GetWord(in + 4 + 4 * w);
        const int64_t end = std::min<int64_t>(n, (w + 1) * 16);
        for (int64_t i = w * 16; i < end; ++i) out[i] = table[(word >> (2 * (i - w * 16))) & 3];
      }
      return Status::OK();
    }
    case proto::GradientCompression::ONE_BIT: {
      float s;
      std::memcpy(&s, in, 4);
      for (int64_t w = 0; w < Words(n, 32); ++w) {
        const uint32_t word = GetWord(in + 4 + 4 * w);
        const int64_t end = std::min<int64_t>(n, (w + 1) * 32);
        for (int64_t i = w * 32; i < end; ++i) out[i] = (word >> (i - w * 32)) & 1 ? s : -s;
      }
      return Status::OK();
    }
    case proto::GradientCompression::FP16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = HalfToFloat(h);
      }
      return Status::OK();
    default:
      std::memcpy(out, in, bytes);
      return Status::OK();
  }
}

uint16_t FloatToHalf(float f) {
  uint32_t x = Bits(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t o;
  if (x >= (127u + 16u) << 23) {
    // 65536 or more (or Inf, NaN): Inf; NaN stays a (quiet) NaN.
    o = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (x < 113u << 23) {
    // Below 2^-14: a subnormal half or zero. Adding 0.5 shifts the value's
    // bits to the half's mantissa position, and the FPU rounds to nearest
    // even on the way.
    const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    o = Bits(FromBits(x) + FromBits(magic)) - magic;
  } else {
    const uint32_t odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xfffu + odd;  // rebias, round half to even
    o = x >> 13;  // a carry into the exponent makes 65520.. Inf
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    return FromBits(Bits(v) | sign);
  }
  if (exp == 31) return FromBits(sign | 0x7f800000u | (mant << 13));
  return FromBits(sign | ((exp + 112u) << 23) | (mant << 13));
}

void FloatsToHalves(const float* in, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(const uint16_t* in, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace kv
}  // namespace kvtrain
