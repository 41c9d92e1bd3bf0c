// Gradient compression (KVStore::SetGradientCompression): how a worker
// encodes a gradient array for the wire and how the receiver decodes it.
//
//   2bit  4-byte float threshold t, then ceil(n/16) little-endian 32-bit
//         words; value i is the 2-bit code at bits 2(i%16) of word i/16:
//         0 -> 0, 3 -> +t, 2 -> -t, 1 -> NaN. With the residual r (error
//         feedback, kept by the worker): v = g + r; v >= t sends +t,
//         v <= -t sends -t, else 0; r becomes v minus what was sent.
//   1bit  4-byte float scale s = mean |v| over the array (v = g + r; |v| summed
//         in double, element i into partial sum i%8, those added in order), then
//         ceil(n/32) words; bit i%32 of word i/32 is 1 for v >= 0 (+s),
//         0 for v < 0 (-s); r becomes v minus what was sent.
//   fp16  n IEEE halves (2n bytes), rounded to nearest even; no residual.
//         Servers answer a push-pull's weights as halves too.
//
// Non-finite values: a NaN or infinite v arrives as NaN (2bit: code 1, that
// element only; 1bit: the scale is NaN, so the whole array is NaN), as it
// would make an uncompressed update non-finite; its residual restarts at 0.
// fp16 keeps NaN and infinities, and values beyond +-65504 become +-Inf.
#ifndef KVTRAIN_COMPRESSION_COMPRESSION_H_
#define KVTRAIN_COMPRESSION_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace kv {

using CompressionType = proto::GradientCompression::Type;

// "none", "2bit", "1bit", "fp16".
std::string CompressionName(CompressionType type);
// A spec from the flag form: type "none" | "2bit" | "1bit" | "fp16", the
// 2bit threshold, min_bytes, and what push-pulls bring back: pull "" (the
// type's default) | "float32" | "fp16". Checked as CheckCompression does.
StatusOr<proto::GradientCompression> ParseCompression(const std::string& type,
                                                      float threshold, int64_t min_bytes = 0,
                                                      const std::string& pull = "");
// The same with the threshold as text: a number, or "auto"
// (GradientCompression.auto_threshold; 2bit only).
StatusOr<proto::GradientCompression> ParseCompression(const std::string& type,
                                                      const std::string& threshold,
                                                      int64_t min_bytes = 0,
                                                      const std::string& pull = "");
// An unknown type, a 2bit threshold that is not a finite value > 0, a
// negative min_bytes, an unknown pull, or pull fp16 with type none is an
// error naming it.
Status CheckCompression(const proto::GradientCompression& spec);
// Whether push-pulls of the spec's compressed keys are answered as halves.
bool HalfPulls(const proto::GradientCompression& spec);
// Whether a push-pull of an array of `size` elements is answered as halves
// (HalfPulls, and the array is not below min_bytes).
bool AnswersHalves(const proto::GradientCompression& spec, int64_t size);
// Rounds `n` floats in place to what a half answer carries (each to the
// nearest half, as FloatsToHalves then HalvesToFloats).
void RoundToHalves(float* v, int64_t n);
// Level answers: where dist_sync's servers hold the step's summed gradients
// (no optimizer on the servers: the workers run it), a push-pull of a 2bit
// or 1bit key is answered with that sum exactly, in a few bits per value. A
// worker's decoded push takes at most 4 distinct values (2bit: 0, +t, -t,
// NaN) or 2 (1bit: +s and -s, or NaN throughout), and a server sums a
// step's pushes in one order for every element, so the sum of N workers'
// pushes takes at most 4^N (2bit) or 2^N (1bit) distinct values. The answer
// is a table of 2^bits floats (entries past the last used are 0), then one
// `bits`-bit table index per element: element i at bits
// bits * (i % (8 / bits)) of byte i * bits / 8 (bits is 1, 2, 4 or 8).
//
// The bits that always hold the sum of `num_workers` pushes of `type`; 0
// when more than 8 would be needed, or the type has no levels.
int LevelBits(CompressionType type, int num_workers);
// 1, 2, 4 or 8.
bool ValidLevelBits(int64_t bits);
// Bytes of a level answer of `n` values (bits valid).
size_t LevelBytes(int bits, int64_t n);
// Encodes `n` floats; more than 2^bits distinct values (bitwise) is an
// error saying so, and `bits` must be 1, 2, 4 or 8.
Status EncodeLevels(const float* v, int64_t n, int bits, char* out);
// Decodes `n` floats; a byte count that does not match is a DataLoss error.
Status DecodeLevels(const char* in, size_t bytes, int64_t n, int bits, float* out);
// Bytes of a push-pull's answer of `n` values: levels (level_bits > 0),
// IEEE halves, or float32.
size_t AnswerBytes(int64_t n, bool half, int level_bits);
// Decodes such an answer (AnswerBytes(n, half, level_bits) bytes at `in`).
Status DecodeAnswer(const char* in, int64_t n, bool half, int level_bits, float* out);

// "float32", "fp16", or "" for PULL_DEFAULT.
std::string PullName(proto::GradientCompression::Pull pull);

// Whether the type keeps a residual per array on the worker.
bool HasResidual(CompressionType type);
// Bytes of an encoded array of `n` floats (n itself for NONE: 4n).
size_t EncodedBytes(CompressionType type, int64_t n);
// Encodes `grad` (n floats) into `out` (EncodedBytes bytes). `residual`
// (n floats) is added to the gradient first and then holds what was not
// sent; it may be null for types without one. `threshold`: 2bit only.
void Encode(CompressionType type, float threshold, const float* grad, float* residual,
            int64_t n, char* out);
// Decodes an array of `n` floats. The byte count, and a 2bit header that is
// not a finite threshold > 0, are checked (a DataLoss error says which).
Status Decode(CompressionType type, const char* in, size_t bytes, int64_t n, float* out);
// 2bit with a threshold of the array's own (GradientCompression.auto_threshold):
// kAutoThresholdScale times mean |g + r| over the finite values (1 where
// that is 0), then encoded as 2bit with it (the threshold is in the
// encoding, so the receiver decodes it as any other). Returns the
// threshold. (Measured on the MLP, docs/kvstore.md: 1x and 4x the mean
// train worse than 2x.)
inline constexpr double kAutoThresholdScale = 2.0;
float EncodeTwoBitAuto(const float* grad, float* residual, int64_t n, char* out);
// Adds the decoded array to `sum` (n floats), each value in float32: the
// same bits as Decode into a scratch array and adding it, in one pass for
// fp16 and float32. The same checks as Decode.
Status DecodeAdd(CompressionType type, const char* in, size_t bytes, int64_t n, float* sum);

// Tests: the portable loops even where the CPU has AVX2 and F16C (the
// kernels use them when it does; both give the same bits).
void UsePortableKernels(bool on);

// IEEE 754 binary16, round to nearest even.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
void FloatsToHalves(const float* in, int64_t n, uint16_t* out);
void HalvesToFloats(const uint16_t* in, int64_t n, float* out);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_COMPRESSION_COMPRESSION_H_
