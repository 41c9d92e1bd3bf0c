// Deterministic placement of keys on servers.
#include "kvstore/placement.h"

#include <algorithm>
#include <numeric>

namespace kvtrain {
namespace kv {

Placement::Placement(int num_servers, int64_t bigarray_bound)
    : num_servers_(num_servers), bound_(bigarray_bound), bytes_(num_servers, 0) {}

std::vector<std::vector<Part>> Placement::Place(const std::vector<int64_t>& sizes) {
  std::vector<std::vector<Part>> out(sizes.size());
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first balances better; the stable sort keeps call order on ties.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  for (size_t i : order) {
    const int64_t n = sizes[i];
    if (n >= bound_ && num_servers_ > 1) {
      // Even split; the first n % servers parts take one element more.
      const int64_t base = n / num_servers_, extra = n % num_servers_;
      int64_t offset = 0;
      for (int s = 0; s < num_servers_; ++s) {
        const int64_t count = base + (s < extra ? 1 : 0);
        if (count == 0) continue;
        out[i].push_back(Part{s, offset, count});
        bytes_[s] += count * 4;
        offset += count;
      }
      continue;
    }
    const int s = static_cast<int>(
        std::min_element(bytes_.begin(), bytes_.end()) - bytes_.begin());
    out[i].push_back(Part{s, 0, n});
    bytes_[s] += n * 4;
  }
  return out;
}

}  // namespace kv
}  // namespace kvtrain
