// Where a key's value lives on the servers. Arrays of at least the big-array
// bound are split evenly across all servers; smaller ones go whole to the
// server holding the fewest bytes so far (ties: lowest rank), larger arrays
// placed first. Every worker places the same keys in the same calls, so
// placements agree without talking.
#ifndef KVTRAIN_KVSTORE_PLACEMENT_H_
#define KVTRAIN_KVSTORE_PLACEMENT_H_

#include <cstdint>
#include <vector>

namespace kvtrain {
namespace kv {

// One server's slice of a key: elements [offset, offset + count).
struct Part {
  int server = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

// Not thread-safe (the store serialises Init calls).
class Placement {
 public:
  Placement(int num_servers, int64_t bigarray_bound);

  // Places keys with these element counts (one Init call); returns each
  // key's parts, in server order, in the order of `sizes`.
  std::vector<std::vector<Part>> Place(const std::vector<int64_t>& sizes);

  // Bytes placed on each server so far.
  const std::vector<int64_t>& server_bytes() const { return bytes_; }

 private:
  const int num_servers_;
  const int64_t bound_;
  std::vector<int64_t> bytes_;
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_PLACEMENT_H_
