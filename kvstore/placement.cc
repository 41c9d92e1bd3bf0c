// Deterministic placement of keys on servers.
#include "kvstore/placement.h"

#include <algorithm>
#include <numeric>

namespace kvtrain {
namespace kv {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Cuts [offset, offset + count) on `server` into pieces of at least `piece`
// elements, at most `per_slice` of them, of even sizes (the first
// count % pieces one element larger).
void AddPieces(int server, int64_t offset, int64_t count, int64_t piece,
               int per_slice, std::vector<Part>* out) {
  int64_t n = 1;
  if (piece > 0) {
    n = std::min<int64_t>(CeilDiv(count, piece), per_slice);
    n = std::max(n, CeilDiv(count, Placement::kMaxPieceElements));
  }
  n = std::max<int64_t>(1, std::min<int64_t>(n, Placement::kMaxPieces));
  const int64_t base = count / n, extra = count % n;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t c = base + (j < extra ? 1 : 0);
    out->push_back(Part{server, offset, c, static_cast<int>(j)});
    offset += c;
  }
}

}  // namespace

Placement::Placement(int num_servers, int64_t bigarray_bound,
                     int64_t piece_elements, int pieces_per_slice)
    : num_servers_(num_servers),
      bound_(bigarray_bound),
      piece_(piece_elements),
      pieces_per_slice_(std::max(1, pieces_per_slice)),
      bytes_(num_servers, 0) {}

std::vector<std::vector<Part>> Placement::Place(
    const std::vector<int64_t>& sizes,
    const std::vector<int64_t>& piece_elements) {
  std::vector<std::vector<Part>> out(sizes.size());
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first balances better; the stable sort keeps call order on ties.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  for (size_t i : order) {
    const int64_t n = sizes[i];
    const int64_t piece =
        i < piece_elements.size() ? piece_elements[i] : piece_;
    if (n >= bound_ && num_servers_ > 1) {
      // Even split; the first n % servers parts take one element more.
      const int64_t base = n / num_servers_, extra = n % num_servers_;
      int64_t offset = 0;
      for (int s = 0; s < num_servers_; ++s) {
        const int64_t count = base + (s < extra ? 1 : 0);
        if (count == 0) continue;
        AddPieces(s, offset, count, piece, pieces_per_slice_, &out[i]);
        bytes_[s] += count * 4;
        offset += count;
      }
      continue;
    }
    const int s = static_cast<int>(
        std::min_element(bytes_.begin(), bytes_.end()) - bytes_.begin());
    AddPieces(s, 0, n, piece, pieces_per_slice_, &out[i]);
    bytes_[s] += n * 4;
  }
  return out;
}

}  // namespace kv
}  // namespace kvtrain
