// Greedy interval allocation: in-place chains merge into one group; groups
// are placed in start order into the best-fitting free block of their
// device, freed blocks become reusable after their group's last step.
#include "engine/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kvtrain {
namespace {

struct Group {
  int64_t bytes = 0;
  Device device;
  int first = 0, last = 0;
  bool pinned = false;
};

int Root(std::vector<int>* parent, int i) {
  while ((*parent)[i] != i) i = (*parent)[i] = (*parent)[(*parent)[i]];
  return i;
}

}  // namespace

int64_t MemoryPlan::TotalBytes() const {
  return std::accumulate(block_bytes.begin(), block_bytes.end(), int64_t{0});
}

namespace {

// Merges in-place chains into groups with the union of their lifetimes;
// group_of[i] is request i's group.
std::vector<Group> MergeInplace(const std::vector<BufferRequest>& requests,
                                std::vector<int>* group_of) {
  const int n = static_cast<int>(requests.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  for (int i = 0; i < n; ++i) {
    if (requests[i].inplace_of >= 0) {
      parent[Root(&parent, i)] = Root(&parent, requests[i].inplace_of);
    }
  }
  group_of->assign(n, -1);
  std::vector<Group> groups;
  for (int i = 0; i < n; ++i) {
    const int r = Root(&parent, i);
    if ((*group_of)[r] < 0) {
      (*group_of)[r] = static_cast<int>(groups.size());
      groups.push_back({0, requests[r].device, requests[r].first_step,
                        requests[r].last_step, false});
    }
    Group& g = groups[(*group_of)[r]];
    g.bytes = std::max(g.bytes, requests[i].bytes);
    g.first = std::min(g.first, requests[i].first_step);
    g.last = std::max(g.last, requests[i].last_step);
    g.pinned = g.pinned || requests[i].pinned;
    (*group_of)[i] = (*group_of)[r];
  }
  return groups;
}

// The free block of `device` that fits `bytes` most tightly, else the
// largest one (to be grown), else -1.
int BestFreeBlock(const MemoryPlan& plan, const std::vector<int>& free_blocks,
                  const Device& device, int64_t bytes) {
  int best = -1;
  for (int b : free_blocks) {
    if (plan.block_device[b] != device) continue;
    if (best < 0) {
      best = b;
      continue;
    }
    const bool fits = plan.block_bytes[b] >= bytes;
    const bool best_fits = plan.block_bytes[best] >= bytes;
    if (fits && (!best_fits || plan.block_bytes[b] < plan.block_bytes[best])) {
      best = b;
    } else if (!fits && !best_fits &&
               plan.block_bytes[b] > plan.block_bytes[best]) {
      best = b;
    }
  }
  return best;
}

}  // namespace

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, bool share) {
  const int n = static_cast<int>(requests.size());
  MemoryPlan plan;
  plan.block_of.assign(n, -1);
  if (!share) {
    for (int i = 0; i < n; ++i) {
      plan.block_of[i] = i;
      plan.block_bytes.push_back(requests[i].bytes);
      plan.block_device.push_back(requests[i].device);
    }
    return plan;
  }
  std::vector<int> group_of;
  const std::vector<Group> groups = MergeInplace(requests, &group_of);
  std::vector<int> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return groups[a].first < groups[b].first;
  });
  std::vector<int> block_of_group(groups.size(), -1);
  // Blocks in use: (last step of the group holding it, block).
  std::vector<std::pair<int, int>> busy;
  std::vector<int> free_blocks;
  for (int gi : order) {
    const Group& g = groups[gi];
    // Blocks whose groups ended before this one starts become free.
    for (size_t k = 0; k < busy.size();) {
      if (busy[k].first < g.first) {
        free_blocks.push_back(busy[k].second);
        busy[k] = busy.back();
        busy.pop_back();
      } else {
        ++k;
      }
    }
    int best = g.pinned ? -1 : BestFreeBlock(plan, free_blocks, g.device, g.bytes);
    if (best >= 0) {
      free_blocks.erase(std::find(free_blocks.begin(), free_blocks.end(), best));
      plan.block_bytes[best] = std::max(plan.block_bytes[best], g.bytes);
    } else {
      best = static_cast<int>(plan.block_bytes.size());
      plan.block_bytes.push_back(g.bytes);
      plan.block_device.push_back(g.device);
    }
    block_of_group[gi] = best;
    // Pinned groups keep their block for good.
    busy.emplace_back(g.pinned ? INT32_MAX : g.last, best);
  }
  for (int i = 0; i < n; ++i) plan.block_of[i] = block_of_group[group_of[i]];
  return plan;
}

}  // namespace kvtrain
