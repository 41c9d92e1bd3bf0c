// The level answers of compression/compression.h (LevelBits and the rest): a
// dist_sync step's summed 2bit or 1bit codes as a table of values and a few
// bits per element, and the sizes and decoding of every kind of push-pull
// answer.
#include <algorithm>
#include <cstring>
#include <string>

#include "compression/compression.h"
#include "compression/compression_simd.h"

namespace kvtrain {
namespace kv {

int LevelBits(CompressionType type, int num_workers) {
  // The sum takes at most 2^k distinct values: k = 2N (2bit) or N (1bit).
  int k;
  switch (type) {
    case proto::GradientCompression::TWO_BIT:
      k = 2 * num_workers;
      break;
    case proto::GradientCompression::ONE_BIT:
      k = num_workers;
      break;
    default:
      return 0;
  }
  if (num_workers < 1) return 0;
  for (int bits : {1, 2, 4, 8}) {
    if (k <= bits) return bits;
  }
  return 0;
}

size_t LevelBytes(int bits, int64_t n) {
  return (static_cast<size_t>(4) << bits) + (static_cast<size_t>(n) * bits + 7) / 8;
}

bool ValidLevelBits(int64_t bits) { return bits == 1 || bits == 2 || bits == 4 || bits == 8; }

namespace {

// EncodeLevels for one width (a constant, so that packing is shifts).
template <int kBits>
Status EncodeLevelsOf(const float* v, int64_t n, char* out) {
  constexpr int kCap = 1 << kBits, kPerByte = 8 / kBits;
  // Table entries by value, found through an open-addressed hash of the
  // value's bits (at most a quarter full): one probe nearly always.
  constexpr int kSlots = 1024;
  struct Slot {
    uint32_t bits;
    int32_t index;  // -1: empty
  };
  Slot slots[kSlots];
  for (Slot& slot : slots) slot.index = -1;
  uint32_t table[kCap] = {};
  int used = 0;
  uint8_t* idx = reinterpret_cast<uint8_t*>(out) + 4 * kCap;
  auto index = [&](int64_t i, int* k) -> bool {
    uint32_t b;
    std::memcpy(&b, v + i, 4);
    uint32_t h = (b * 2654435761u) >> 22;
    while (slots[h].index >= 0 && slots[h].bits != b) h = (h + 1) & (kSlots - 1);
    if (slots[h].index < 0) {
      if (used == kCap) return false;
      table[used] = b;
      slots[h] = {b, used++};
    }
    *k = slots[h].index;
    return true;
  };
  // With AVX2, blocks of 8 values whose values are all in the table
  // already (of at most 16 values) are indexed by comparing them with every
  // entry; a block with a new value goes through the hash, in order, so the
  // table is the same as without.
  const bool vector = simd::HasAvx2();
  for (int64_t at = 0; at < n;) {
    if (vector && used <= 16) {
      at += simd::LevelIndicesAvx2(v + at, n - at, table, used, kBits,
                                   idx + at / kPerByte);
      if (at >= n) break;
    }
    const int64_t block_end =
        vector && used <= 16 ? std::min<int64_t>(at + 8, n) : n;
    for (; at < block_end; at += kPerByte) {
      uint8_t byte = 0;
      const int m = static_cast<int>(std::min<int64_t>(kPerByte, n - at));
      for (int j = 0; j < m; ++j) {
        int k;
        if (!index(at + j, &k)) {
          return Status::InvalidArgument("more than " + std::to_string(kCap) +
                                         " distinct values (levels of " +
                                         std::to_string(kBits) + " bits)");
        }
        byte = static_cast<uint8_t>(byte | (k << (kBits * j)));
      }
      idx[at / kPerByte] = byte;
    }
  }
  std::memcpy(out, table, sizeof(table));
  return Status::OK();
}

}  // namespace

Status EncodeLevels(const float* v, int64_t n, int bits, char* out) {
  switch (bits) {
    case 1:
      return EncodeLevelsOf<1>(v, n, out);
    case 2:
      return EncodeLevelsOf<2>(v, n, out);
    case 4:
      return EncodeLevelsOf<4>(v, n, out);
    case 8:
      return EncodeLevelsOf<8>(v, n, out);
    default:
      return Status::InvalidArgument("levels of " + std::to_string(bits) +
                                     " bits (valid: 1, 2, 4, 8)");
  }
}

Status DecodeLevels(const char* in, size_t bytes, int64_t n, int bits, float* out) {
  if (!ValidLevelBits(bits)) {
    return Status::DataLoss("levels of " + std::to_string(bits) + " bits (valid: 1, 2, 4, 8)");
  }
  if (bytes != LevelBytes(bits, n)) {
    return Status::DataLoss("a level answer of " + std::to_string(bytes) + " bytes for " +
                            std::to_string(n) + " values of " + std::to_string(bits) +
                            " bits (expected " + std::to_string(LevelBytes(bits, n)) + ")");
  }
  const int cap = 1 << bits, per_byte = 8 / bits, mask = cap - 1;
  float table[256];
  std::memcpy(table, in, 4 * static_cast<size_t>(cap));
  // The vector decode reads 8 or 16 entries; those past the table are never
  // chosen.
  std::fill(table + cap, table + std::max(cap, 16), 0.0f);
  const uint8_t* idx = reinterpret_cast<const uint8_t*>(in) + 4 * cap;
  if (bits <= 4 && simd::HasAvx2()) {
    const int64_t blocks = n / 8;
    simd::LevelDecodeAvx2(table, idx, blocks, bits, out);
    for (int64_t i = 8 * blocks; i < n; ++i) {
      out[i] = table[(idx[i / per_byte] >> (bits * (i % per_byte))) & mask];
    }
    return Status::OK();
  }
  if (bits == 4) {
    // Two per byte, the common case (2 workers, 2bit).
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
      const uint8_t b = idx[i / 2];
      out[i] = table[b & 15];
      out[i + 1] = table[b >> 4];
    }
    if (i < n) out[i] = table[idx[i / 2] & 15];
    return Status::OK();
  }
  if (bits == 8) {
    for (int64_t i = 0; i < n; ++i) out[i] = table[idx[i]];
    return Status::OK();
  }
  for (int64_t i = 0; i < n; ++i) {
    out[i] = table[(idx[i / per_byte] >> (bits * (i % per_byte))) & mask];
  }
  return Status::OK();
}

size_t AnswerBytes(int64_t n, bool half, int level_bits) {
  if (level_bits > 0) return LevelBytes(level_bits, n);
  return static_cast<size_t>(n) * (half ? 2 : 4);
}

Status DecodeAnswer(const char* in, int64_t n, bool half, int level_bits, float* out) {
  if (level_bits > 0) return DecodeLevels(in, LevelBytes(level_bits, n), n, level_bits, out);
  if (half) {
    HalvesToFloats(reinterpret_cast<const uint16_t*>(in), n, out);
  } else {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
  }
  return Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
