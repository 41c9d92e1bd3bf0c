// The AVX2 and F16C kernels of gradient compression (see compression_simd.h).
#include "compression/compression_simd.h"

#include <atomic>
#include <limits>

#include "compression/compression.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kvtrain {
namespace kv {

namespace {
std::atomic<bool> portable_only{false};
}  // namespace

void UsePortableKernels(bool on) { portable_only = on; }

namespace simd {

#if defined(__x86_64__)
// IEEE halves with the CPU's F16C instructions where it has them (round to
// nearest even, as the portable code); `in`/`out` may be unaligned.
__attribute__((target("f16c"))) void FloatsToHalvesF16c(const float* in,
                                                        int64_t n, char* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = FloatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

__attribute__((target("avx"))) void AddIntoAvx(float* sum, const float* v,
                                               int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(sum + i, _mm256_add_ps(_mm256_loadu_ps(sum + i),
                                            _mm256_loadu_ps(v + i)));
  }
  for (; i < n; ++i) sum[i] += v[i];
}

__attribute__((target("f16c"))) void AddHalvesF16c(const char* in, int64_t n,
                                                   float* sum) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(
        sum + i, _mm256_add_ps(_mm256_loadu_ps(sum + i), _mm256_cvtph_ps(h)));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    sum[i] += HalfToFloat(h);
  }
}

__attribute__((target("f16c"))) void HalvesToFloatsF16c(const char* in,
                                                        int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

// AVX2 forms of the 2bit and 1bit loops over whole words: the same float
// operations as the portable code, 8 values at a time, so the same bits.
__attribute__((target("avx2"))) void TwoBitWordsAvx2(float t, const float* grad,
                                                     float* residual,
                                                     int64_t words, char* out) {
  const __m256 vt = _mm256_set1_ps(t), vnt = _mm256_set1_ps(-t);
  const __m256 max = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i three = _mm256_set1_epi32(3), two = _mm256_set1_epi32(2),
                one = _mm256_set1_epi32(1);
  const __m256i shift_lo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i shift_hi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t w = 0; w < words; ++w) {
    __m256i packed = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const int64_t i = 16 * w + 8 * half;
      const __m256 v = _mm256_add_ps(_mm256_loadu_ps(grad + i),
                                     _mm256_loadu_ps(residual + i));
      const __m256 finite =
          _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), max, _CMP_LE_OQ);
      const __m256 pos = _mm256_cmp_ps(v, vt, _CMP_GE_OQ);
      const __m256 neg = _mm256_cmp_ps(v, vnt, _CMP_LE_OQ);
      const __m256 sent =
          _mm256_or_ps(_mm256_and_ps(pos, vt), _mm256_and_ps(neg, vnt));
      _mm256_storeu_ps(residual + i,
                       _mm256_and_ps(finite, _mm256_sub_ps(v, sent)));
      __m256i code =
          _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(pos), three),
                          _mm256_and_si256(_mm256_castps_si256(neg), two));
      code = _mm256_blendv_epi8(one, code, _mm256_castps_si256(finite));
      packed = _mm256_or_si256(
          packed, _mm256_sllv_epi32(code, half ? shift_hi : shift_lo));
    }
    __m128i x = _mm_or_si128(_mm256_castsi256_si128(packed),
                             _mm256_extracti128_si256(packed, 1));
    x = _mm_or_si128(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    x = _mm_or_si128(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
    PutWord(out + 4 * w, static_cast<uint32_t>(_mm_cvtsi128_si32(x)));
  }
}

__attribute__((target("avx2"))) void TwoBitDecodeAvx2(float t, const char* in,
                                                      int64_t words,
                                                      float* out) {
  const __m256 vt = _mm256_set1_ps(t), vnt = _mm256_set1_ps(-t);
  const __m256 nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  const __m256i three = _mm256_set1_epi32(3), two = _mm256_set1_epi32(2),
                one = _mm256_set1_epi32(1);
  const __m256i shift_lo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  const __m256i shift_hi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t w = 0; w < words; ++w) {
    const __m256i word =
        _mm256_set1_epi32(static_cast<int>(GetWord(in + 4 * w)));
    for (int half = 0; half < 2; ++half) {
      const __m256i code = _mm256_and_si256(
          _mm256_srlv_epi32(word, half ? shift_hi : shift_lo), three);
      const __m256 p = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, three));
      const __m256 n = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, two));
      const __m256 q = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, one));
      const __m256 v = _mm256_or_ps(
          _mm256_or_ps(_mm256_and_ps(p, vt), _mm256_and_ps(n, vnt)),
          _mm256_and_ps(q, nan));
      _mm256_storeu_ps(out + 16 * w + 8 * half, v);
    }
  }
}

// 1bit's first pass over `n` (a multiple of 8) values: v = g + r into
// `residual`, |v| added to partial[i % 8]. Whether every v is finite.
__attribute__((target("avx2"))) bool OneBitSumAvx2(const float* grad,
                                                   float* residual, int64_t n,
                                                   double* partial) {
  const __m256 max = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 v =
        _mm256_add_ps(_mm256_loadu_ps(grad + i), _mm256_loadu_ps(residual + i));
    _mm256_storeu_ps(residual + i, v);
    const __m256 a = _mm256_and_ps(v, abs_mask);
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, max, _CMP_LE_OQ));
    lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
    hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
  }
  _mm256_storeu_pd(partial, lo);
  _mm256_storeu_pd(partial + 4, hi);
  return _mm256_movemask_ps(finite) == 0xff;
}

// 1bit's second pass over whole words, v already in `residual`, the scale
// finite.
__attribute__((target("avx2"))) void OneBitWordsAvx2(float scale,
                                                     float* residual,
                                                     int64_t words, char* out) {
  const __m256 s = _mm256_set1_ps(scale), ns = _mm256_set1_ps(-scale);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t w = 0; w < words; ++w) {
    uint32_t word = 0;
    for (int q = 0; q < 4; ++q) {
      float* r = residual + 32 * w + 8 * q;
      const __m256 v = _mm256_loadu_ps(r);
      const __m256 pos = _mm256_cmp_ps(v, zero, _CMP_GE_OQ);
      _mm256_storeu_ps(r, _mm256_sub_ps(v, _mm256_blendv_ps(ns, s, pos)));
      word |= static_cast<uint32_t>(_mm256_movemask_ps(pos)) << (8 * q);
    }
    PutWord(out + 4 * w, word);
  }
}

__attribute__((target("avx2"))) void OneBitDecodeAvx2(float scale,
                                                      const char* in,
                                                      int64_t words,
                                                      float* out) {
  const __m256 s = _mm256_set1_ps(scale), ns = _mm256_set1_ps(-scale);
  const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  for (int64_t w = 0; w < words; ++w) {
    const uint32_t word = GetWord(in + 4 * w);
    for (int q = 0; q < 4; ++q) {
      const __m256i b =
          _mm256_set1_epi32(static_cast<int>((word >> (8 * q)) & 0xffu));
      const __m256 set = _mm256_castsi256_ps(
          _mm256_cmpeq_epi32(_mm256_and_si256(b, bits), bits));
      _mm256_storeu_ps(out + 32 * w + 8 * q, _mm256_blendv_ps(ns, s, set));
    }
  }
}

// Level answers: 8 values per block, whose indices fill kBits whole
// bytes, element j at bits kBits * j of the block's little-endian bytes.
// Tables of more than 16 values (8 bits only) are left to the caller.
template <int kBits>
__attribute__((target("avx2"))) int64_t LevelIndicesOf(const float* v,
                                                       int64_t n,
                                                       const uint32_t* table,
                                                       int used, uint8_t* idx) {
  __m256i entry[16], index[16];
  if (used > 16) return 0;
  for (int k = 0; k < used; ++k) {
    entry[k] = _mm256_set1_epi32(static_cast<int>(table[k]));
    index[k] = _mm256_set1_epi32(k);
  }
  const __m256i shift =
      _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits,
                        6 * kBits, 7 * kBits);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i));
    // A lane takes the index of the entry it equals (the entries are
    // distinct); one equal to none keeps -1.
    __m256i k8 = _mm256_set1_epi32(-1);
    for (int k = 0; k < used; ++k) {
      k8 = _mm256_blendv_epi8(k8, index[k], _mm256_cmpeq_epi32(x, entry[k]));
    }
    if (_mm256_movemask_ps(_mm256_castsi256_ps(k8)) != 0) break;
    if constexpr (kBits == 8) {
      // Each lane's low byte, 4 from each half.
      const __m256i low = _mm256_shuffle_epi8(
          k8, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                               -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1,
                               -1, -1, -1, -1, -1, -1));
      const uint32_t half[2] = {
          static_cast<uint32_t>(_mm256_cvtsi256_si32(low)),
          static_cast<uint32_t>(_mm256_extract_epi32(low, 4))};
      std::memcpy(idx + i, half, 8);  // little-endian
    } else {
      // Each index moved to its bits, then the 8 lanes OR-ed into one word.
      __m256i w = _mm256_sllv_epi32(k8, shift);
      w = _mm256_or_si256(w, _mm256_permute2x128_si256(w, w, 1));
      w = _mm256_or_si256(w, _mm256_shuffle_epi32(w, 0x4e));
      w = _mm256_or_si256(w, _mm256_shuffle_epi32(w, 0xb1));
      const uint32_t word = static_cast<uint32_t>(_mm256_cvtsi256_si32(w));
      std::memcpy(idx + i / 8 * kBits, &word, kBits);  // little-endian
    }
  }
  return i;
}

template <int kBits>
__attribute__((target("avx2"))) void LevelDecodeOf(const float* table,
                                                   const uint8_t* idx,
                                                   int64_t blocks, float* out) {
  const __m256i shift =
      _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits,
                        6 * kBits, 7 * kBits);
  const __m256i mask = _mm256_set1_epi32((1 << kBits) - 1);
  // Entries 8-15 (4 bits) come from the table's upper half.
  const __m256 lo = _mm256_loadu_ps(table);
  const __m256 hi = _mm256_loadu_ps(table + 8);
  for (int64_t b = 0; b < blocks; ++b) {
    uint32_t word = 0;
    std::memcpy(&word, idx + b * kBits, kBits);  // little-endian
    const __m256i k = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shift),
        mask);
    __m256 got = _mm256_permutevar8x32_ps(lo, k);
    if (kBits == 4) {
      const __m256 upper = _mm256_castsi256_ps(_mm256_slli_epi32(k, 28));
      got = _mm256_blendv_ps(got, _mm256_permutevar8x32_ps(hi, k), upper);
    }
    _mm256_storeu_ps(out + 8 * b, got);
  }
}

int64_t LevelIndicesAvx2(const float* v, int64_t n, const uint32_t* table,
                         int used, int bits, uint8_t* idx) {
  switch (bits) {
    case 1:
      return LevelIndicesOf<1>(v, n, table, used, idx);
    case 2:
      return LevelIndicesOf<2>(v, n, table, used, idx);
    case 4:
      return LevelIndicesOf<4>(v, n, table, used, idx);
    case 8:
      return LevelIndicesOf<8>(v, n, table, used, idx);
    default:
      return 0;
  }
}

void LevelDecodeAvx2(const float* table, const uint8_t* idx, int64_t blocks,
                     int bits, float* out) {
  switch (bits) {
    case 1:
      return LevelDecodeOf<1>(table, idx, blocks, out);
    case 2:
      return LevelDecodeOf<2>(table, idx, blocks, out);
    case 4:
      return LevelDecodeOf<4>(table, idx, blocks, out);
    default:
      return;
  }
}

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has && !portable_only.load(std::memory_order_relaxed);
}

bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c");
  return has && !portable_only.load(std::memory_order_relaxed);
}
#else
bool HasF16c() { return false; }
bool HasAvx2() { return false; }
void TwoBitWordsAvx2(float, const float*, float*, int64_t, char*) {}
void TwoBitDecodeAvx2(float, const char*, int64_t, float*) {}
void OneBitWordsAvx2(float, float*, int64_t, char*) {}
bool OneBitSumAvx2(const float*, float*, int64_t, double*) { return true; }
void OneBitDecodeAvx2(float, const char*, int64_t, float*) {}
void FloatsToHalvesF16c(const float*, int64_t, char*) {}
void HalvesToFloatsF16c(const char*, int64_t, float*) {}
void AddHalvesF16c(const char*, int64_t, float*) {}
void AddIntoAvx(float*, const float*, int64_t) {}
int64_t LevelIndicesAvx2(const float*, int64_t, const uint32_t*, int, int,
                         uint8_t*) {
  return 0;
}
void LevelDecodeAvx2(const float*, const uint8_t*, int64_t, int, float*) {}
#endif

}  // namespace simd
}  // namespace kv
}  // namespace kvtrain
