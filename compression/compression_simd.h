// Internal to the compression library: the AVX2 and F16C forms of its
// kernels, chosen at run time (HasAvx2, HasF16c) unless UsePortableKernels
// is on. Each gives the same bits as the portable code in compression.cc.
#ifndef KVTRAIN_COMPRESSION_COMPRESSION_SIMD_H_
#define KVTRAIN_COMPRESSION_COMPRESSION_SIMD_H_

#include <cstdint>
#include <cstring>

namespace kvtrain {
namespace kv {
namespace simd {

// Little-endian 32-bit words of the 2bit and 1bit codes.
inline void PutWord(char* out, uint32_t w) {
  const unsigned char b[4] = {
      static_cast<unsigned char>(w), static_cast<unsigned char>(w >> 8),
      static_cast<unsigned char>(w >> 16), static_cast<unsigned char>(w >> 24)};
  std::memcpy(out, b, 4);
}

inline uint32_t GetWord(const char* in) {
  unsigned char b[4];
  std::memcpy(b, in, 4);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 |
         uint32_t{b[3]} << 24;
}

bool HasAvx2();
bool HasF16c();

// IEEE halves, round to nearest even; `in`/`out` may be unaligned.
void FloatsToHalvesF16c(const float* in, int64_t n, char* out);
void HalvesToFloatsF16c(const char* in, int64_t n, float* out);
// sum[i] += the half in[i].
void AddHalvesF16c(const char* in, int64_t n, float* sum);
// sum[i] += v[i].
void AddIntoAvx(float* sum, const float* v, int64_t n);

// 2bit over whole words of 16 values: v = grad + residual, its code into
// `out`, what is not sent back into `residual`.
void TwoBitWordsAvx2(float t, const float* grad, float* residual, int64_t words,
                     char* out);
void TwoBitDecodeAvx2(float t, const char* in, int64_t words, float* out);
// 1bit's first pass over `n` (a multiple of 8) values: v = g + r into
// `residual`, |v| added to partial[i % 8]. Whether every v is finite.
bool OneBitSumAvx2(const float* grad, float* residual, int64_t n,
                   double* partial);
// 1bit's second pass over whole words of 32, v already in `residual`, the
// scale finite.
void OneBitWordsAvx2(float scale, float* residual, int64_t words, char* out);
void OneBitDecodeAvx2(float scale, const char* in, int64_t words, float* out);

// Level answers (compression.h), in blocks of 8 values: writes the indices
// into `table` (its `used` entries, compared bitwise) of v's blocks up to
// the first block holding a value the table lacks, and returns how many
// values that is (a multiple of 8; 0 for a table of more than 16).
int64_t LevelIndicesAvx2(const float* v, int64_t n, const uint32_t* table,
                         int used, int bits, uint8_t* idx);
// Decodes `blocks` blocks of 8 values of 1, 2 or 4 bits (`table`: at
// least 16 entries).
void LevelDecodeAvx2(const float* table, const uint8_t* idx, int64_t blocks,
                     int bits, float* out);

}  // namespace simd
}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_COMPRESSION_COMPRESSION_SIMD_H_
