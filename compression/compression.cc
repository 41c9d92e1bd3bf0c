// Gradient compression kernels (see compression.h for the formats).
#include "compression/compression.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "compression/compression_simd.h"

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

// A float as %g: "0.5", "1e-09", "nan".
std::string Fmt(float f) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", static_cast<double>(f));
  return buf;
}

int64_t Words(int64_t n, int per_word) { return (n + per_word - 1) / per_word; }

// One value of a 2bit word: its code, and the residual that stays. Written
// without branches (selects), so that the compiler vectorizes the loops.
inline uint32_t TwoBitCode(float t, float v, float* residual) {
  const bool finite = std::fabs(v) <= std::numeric_limits<float>::max();
  const bool pos = v >= t, neg = v <= -t;
  const float sent = pos ? t : (neg ? -t : 0.0f);
  *residual = finite ? v - sent : 0.0f;  // a non-finite value restarts at 0
  const uint32_t code = pos ? 3u : (neg ? 2u : 0u);
  return finite ? code : 1u;
}

void EncodeTwoBit(float t, const float* grad, float* residual, int64_t n, char* out) {
  std::memcpy(out, &t, 4);
  char* words = out + 4;
  const int64_t full = n / 16;
  int64_t w = 0;
  if (simd::HasAvx2()) {
    simd::TwoBitWordsAvx2(t, grad, residual, full, words);
    w = full;
  }
  for (; w < full; ++w) {
    const float* g = grad + 16 * w;
    float* r = residual + 16 * w;
    uint32_t word = 0;
    for (int j = 0; j < 16; ++j) word |= TwoBitCode(t, g[j] + r[j], &r[j]) << (2 * j);
    simd::PutWord(words + 4 * w, word);
  }
  if (n % 16 != 0) {
    uint32_t word = 0;
    for (int64_t i = 16 * full; i < n; ++i) {
      word |= TwoBitCode(t, grad[i] + residual[i], &residual[i]) << (2 * (i - 16 * full));
    }
    simd::PutWord(words + 4 * full, word);
  }
}

void EncodeOneBit(const float* grad, float* residual, int64_t n, char* out) {
  // First pass: v = g + r, kept in the residual, and mean |v|: summed in
  // double, element i into partial sum i % 8 (so that 8 lanes add at once),
  // the partial sums added in order.
  double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  bool finite = true;
  int64_t i = 0;
  if (simd::HasAvx2()) {
    i = n / 8 * 8;
    finite = simd::OneBitSumAvx2(grad, residual, i, partial);
  }
  for (; i < n; ++i) {
    const float v = grad[i] + residual[i];
    residual[i] = v;
    finite = finite && std::fabs(v) <= std::numeric_limits<float>::max();
    partial[i % 8] += std::fabs(v);
  }
  double sum = 0;
  for (double p : partial) sum += p;
  const float scale = !finite ? std::numeric_limits<float>::quiet_NaN()
                              : n == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(n));
  std::memcpy(out, &scale, 4);
  char* words = out + 4;
  int64_t w = 0;
  if (finite && simd::HasAvx2()) {
    simd::OneBitWordsAvx2(scale, residual, n / 32, words);
    w = n / 32;
  }
  for (; w < (n + 31) / 32; ++w) {
    uint32_t word = 0;
    const int64_t begin = 32 * w, count = std::min<int64_t>(32, n - begin);
    float* r = residual + begin;
    for (int64_t j = 0; j < count; ++j) {
      const float v = r[j];
      const bool positive = v >= 0.0f;
      word |= static_cast<uint32_t>(positive) << j;
      if (finite) {
        r[j] = v - (positive ? scale : -scale);
      } else {
        // Every element arrives as NaN: nothing of a finite one was sent.
        r[j] = std::fabs(v) <= std::numeric_limits<float>::max() ? v : 0.0f;
      }
    }
    simd::PutWord(words + 4 * w, word);
  }
}


void EncodeHalves(const float* in, int64_t n, char* out) {
  if (simd::HasF16c()) return simd::FloatsToHalvesF16c(in, n, out);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void DecodeHalves(const char* in, int64_t n, float* out) {
  if (simd::HasF16c()) return simd::HalvesToFloatsF16c(in, n, out);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

// sum += v, element by element.
void AddInto(float* sum, const float* v, int64_t n) {
  if (simd::HasAvx2()) return simd::AddIntoAvx(sum, v, n);
  for (int64_t i = 0; i < n; ++i) sum[i] += v[i];
}

}  // namespace

void RoundToHalves(float* v, int64_t n) {
  constexpr int64_t kChunk = 4096;
  uint16_t halves[kChunk];
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t m = std::min(kChunk, n - at);
    FloatsToHalves(v + at, m, halves);
    HalvesToFloats(halves, m, v + at);
  }
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
    case proto::GradientCompression::FP16:
      // Halves may sit at any even offset of the message.
      return EncodeHalves(grad, n, out);
    default:
      std::memcpy(out, grad, 4 * static_cast<size_t>(n));
  }
}

float EncodeTwoBitAuto(const float* grad, float* residual, int64_t n, char* out) {
  // One reading pass for the threshold; the encoding (vectorized) adds the
  // residual again as it goes.
  double sum = 0;
  int64_t finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::fabs(grad[i] + residual[i]);
    const bool ok = v <= std::numeric_limits<float>::max();
    sum += ok ? v : 0.0f;
    finite += ok;
  }
  float t = finite > 0 ? static_cast<float>(kAutoThresholdScale * sum / static_cast<double>(finite)) : 0.0f;
  // Nothing to send (all zero, or nothing finite): any valid threshold.
  if (!(t > 0.0f) || !std::isfinite(t)) t = 1.0f;
  EncodeTwoBit(t, grad, residual, n, out);
  return t;
}

namespace {

// Decode's and DecodeAdd's size check.
Status CheckEncodedBytes(CompressionType type, size_t bytes, int64_t n) {
  const size_t want = EncodedBytes(type, n);
  if (bytes == want) return Status::OK();
  return Status::DataLoss(CompressionName(type) + "-encoded array of " + std::to_string(n) +
                          " values takes " + std::to_string(want) + " bytes but " +
                          std::to_string(bytes) + " arrived");
}

}  // namespace

Status Decode(CompressionType type, const char* in, size_t bytes, int64_t n, float* out) {
  KV_RETURN_IF_ERROR(CheckEncodedBytes(type, bytes, n));
  switch (type) {
    case proto::GradientCompression::TWO_BIT: {
      float t;
      std::memcpy(&t, in, 4);
      if (!(t > 0.0f) || !std::isfinite(t)) {
        return Status::DataLoss("2bit-encoded array with threshold " + Fmt(t) +
                                " (must be a finite value > 0)");
      }
      const float table[4] = {0.0f, std::numeric_limits<float>::quiet_NaN(), -t, t};
      int64_t w = 0;
      if (simd::HasAvx2()) {
        simd::TwoBitDecodeAvx2(t, in + 4, n / 16, out);
        w = n / 16;
      }
      for (; w < Words(n, 16); ++w) {
        const uint32_t word = simd::GetWord(in + 4 + 4 * w);
        const int64_t end = std::min<int64_t>(n, (w + 1) * 16);
        for (int64_t i = w * 16; i < end; ++i) out[i] = table[(word >> (2 * (i - w * 16))) & 3];
      }
      return Status::OK();
    }
    case proto::GradientCompression::ONE_BIT: {
      float s;
      std::memcpy(&s, in, 4);
      int64_t w = 0;
      if (simd::HasAvx2()) {
        simd::OneBitDecodeAvx2(s, in + 4, n / 32, out);
        w = n / 32;
      }
      for (; w < Words(n, 32); ++w) {
        const uint32_t word = simd::GetWord(in + 4 + 4 * w);
        const int64_t begin = 32 * w, count = std::min<int64_t>(32, n - begin);
        float* o = out + begin;
        for (int64_t j = 0; j < count; ++j) o[j] = (word >> j) & 1u ? s : -s;
      }
      return Status::OK();
    }
    case proto::GradientCompression::FP16:
      DecodeHalves(in, n, out);
      return Status::OK();
    default:
      std::memcpy(out, in, bytes);
      return Status::OK();
  }
}

Status DecodeAdd(CompressionType type, const char* in, size_t bytes, int64_t n, float* sum) {
  switch (type) {
    case proto::GradientCompression::FP16:
    case proto::GradientCompression::NONE: {
      KV_RETURN_IF_ERROR(CheckEncodedBytes(type, bytes, n));
      if (type == proto::GradientCompression::NONE) {
        for (int64_t i = 0; i < n; ++i) {
          float v;
          std::memcpy(&v, in + 4 * i, 4);
          sum[i] += v;
        }
      } else if (simd::HasF16c()) {
        simd::AddHalvesF16c(in, n, sum);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          uint16_t h;
          std::memcpy(&h, in + 2 * i, 2);
          sum[i] += HalfToFloat(h);
        }
      }
      return Status::OK();
    }
    default: {
      thread_local std::vector<float> scratch;
      if (scratch.size() < static_cast<size_t>(n)) scratch.resize(static_cast<size_t>(n));
      float* decoded = scratch.data();
      KV_RETURN_IF_ERROR(Decode(type, in, bytes, n, decoded));
      AddInto(sum, decoded, n);
      return Status::OK();
    }
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
  EncodeHalves(in, n, reinterpret_cast<char*>(out));
}

void HalvesToFloats(const uint16_t* in, int64_t n, float* out) {
  DecodeHalves(reinterpret_cast<const char*>(in), n, out);
}

}  // namespace kv
}  // namespace kvtrain
