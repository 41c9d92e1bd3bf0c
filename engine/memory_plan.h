// Memory planning for an executor (private to engine/): given the buffers a
// graph needs (bytes, device, the steps between which they are live, and
// which buffer an in-place output takes over), assigns them to storage
// blocks so buffers whose lifetimes do not overlap share memory.
#ifndef KVTRAIN_ENGINE_MEMORY_PLAN_H_
#define KVTRAIN_ENGINE_MEMORY_PLAN_H_

#include <cstdint>
#include <vector>

#include "tensor/device.h"

namespace kvtrain {

struct BufferRequest {
  int64_t bytes = 0;
  Device device;
  // Live from the step that writes it first to the last step that reads it
  // (inclusive).
  int first_step = 0;
  int last_step = 0;
  // Never shared (graph outputs, head gradients).
  bool pinned = false;
  // Another buffer whose memory this one takes over in place (same bytes
  // and device, and that buffer is not read after this one is written), or
  // -1.
  int inplace_of = -1;
};

struct MemoryPlan {
  // Storage block of each request.
  std::vector<int> block_of;
  // Bytes and device of each block.
  std::vector<int64_t> block_bytes;
  std::vector<Device> block_device;

  int64_t TotalBytes() const;
};

// With `share` false every buffer gets its own block (and in-place requests
// are ignored): the baseline the planned layout is measured against.
MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, bool share);

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_MEMORY_PLAN_H_
