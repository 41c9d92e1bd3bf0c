// Where a key's value lives on the servers. Arrays of at least the big-array
// bound are split evenly across all servers; smaller ones go whole to the
// server holding the fewest bytes so far (ties: lowest rank), larger arrays
// placed first. Each server's slice is then cut into pieces of about the
// piece size (see kPiecesPerSlice), which travel and update on their own,
// so one piece's transfer overlaps another's update and the answer of a
// third. Every worker places the same keys in the same calls, so placements
// agree without talking.
#ifndef KVTRAIN_KVSTORE_PLACEMENT_H_
#define KVTRAIN_KVSTORE_PLACEMENT_H_

#include <cstdint>
#include <vector>

namespace kvtrain {
namespace kv {

// One piece of a key: elements [offset, offset + count) of the key, held by
// `server`; `piece` counts the key's pieces on that server from 0.
struct Part {
  int server = 0;
  int64_t offset = 0;
  int64_t count = 0;
  int piece = 0;
};

// Not thread-safe (the store serialises Init calls).
class Placement {
 public:
  // A slice is cut into pieces of at least piece_elements, into at most
  // pieces_per_slice of them (kPiecesPerSlice unless given: pipelining gains
  // little beyond that, and each message costs), yet never pieces above
  // kMaxPieceElements (the transport's 4 MiB frame: larger ones are joined
  // by a copy on receipt), and never more than kMaxPieces.
  static constexpr int kPiecesPerSlice = 4;
  static constexpr int64_t kMaxPieceElements = int64_t{1} << 20;
  static constexpr int kMaxPieces = 1024;

  // piece_elements: smallest piece (0: a server's slice is one piece).
  Placement(int num_servers, int64_t bigarray_bound, int64_t piece_elements = 0,
            int pieces_per_slice = kPiecesPerSlice);

  // Places keys with these element counts (one Init call); returns each
  // key's parts in element order (so in server order), in the order of
  // `sizes`. piece_elements, when given, holds each key's smallest piece in
  // place of the constructor's (0: one piece per slice), e.g. larger for a
  // key whose values travel compressed.
  std::vector<std::vector<Part>> Place(
      const std::vector<int64_t>& sizes,
      const std::vector<int64_t>& piece_elements = {});

  // Bytes placed on each server so far.
  const std::vector<int64_t>& server_bytes() const { return bytes_; }

 private:
  const int num_servers_;
  const int64_t bound_;
  const int64_t piece_;
  const int pieces_per_slice_;
  std::vector<int64_t> bytes_;
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_PLACEMENT_H_
