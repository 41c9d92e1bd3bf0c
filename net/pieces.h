// One body, several frames: how both transports cut a body larger than a
// frame may carry (kMaxFramePayloadBytes, net/curve.h) and how a receiver
// checks the frames that came. Every piece but the last is exactly
// kMaxFramePayloadBytes long; the last holds the rest; an empty body is one
// empty frame.
#ifndef KVTRAIN_NET_PIECES_H_
#define KVTRAIN_NET_PIECES_H_

#include <algorithm>
#include <cstddef>

#include "net/curve.h"

namespace kvtrain {
namespace net {

inline constexpr size_t kPieceBytes = static_cast<size_t>(kMaxFramePayloadBytes);

// The frames a body of `size` bytes travels in.
inline size_t PieceCount(size_t size) {
  return size == 0 ? 1 : (size + kPieceBytes - 1) / kPieceBytes;
}

// Piece i (< PieceCount(size)) of a body of `size` bytes.
struct Piece {
  size_t offset;
  size_t length;
  bool last;
};
inline Piece PieceOf(size_t size, size_t i) {
  const size_t offset = i * kPieceBytes;
  const size_t length = std::min(kPieceBytes, size - std::min(size, offset));
  return {offset, length, i + 1 == PieceCount(size)};
}

// Whether `n` frames, frame i `length(i)` bytes long, are the pieces of one
// body as PieceOf cuts it.
template <typename Length>
bool ArePieces(size_t n, Length length) {
  if (n == 0) return false;
  for (size_t i = 0; i + 1 < n; ++i) {
    if (length(i) != kPieceBytes) return false;
  }
  const size_t last = length(n - 1);
  return last <= kPieceBytes && (n == 1 || last > 0);
}

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_PIECES_H_
