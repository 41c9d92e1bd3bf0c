// The memory planner: reuse of dead buffers, in-place chains, pinned
// buffers, devices kept apart, and the unshared baseline.
#include "engine/memory_plan.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

BufferRequest Req(int64_t bytes, int first, int last) {
  BufferRequest r;
  r.bytes = bytes;
  r.first_step = first;
  r.last_step = last;
  return r;
}

TEST(MemoryPlanTest, ChainReusesDeadBuffers) {
  // a -> b -> c -> d, each read only by the next step.
  std::vector<BufferRequest> rs = {Req(100, 0, 1), Req(100, 1, 2),
                                   Req(100, 2, 3), Req(100, 3, 4)};
  const MemoryPlan shared = PlanMemory(rs, true);
  EXPECT_EQ(shared.TotalBytes(), 200);
  EXPECT_EQ(shared.block_of[0], shared.block_of[2]);
  EXPECT_EQ(shared.block_of[1], shared.block_of[3]);
  EXPECT_NE(shared.block_of[0], shared.block_of[1]);
  EXPECT_EQ(PlanMemory(rs, false).TotalBytes(), 400);
}

TEST(MemoryPlanTest, InPlaceSharesAndBestFitGrows) {
  std::vector<BufferRequest> rs = {Req(100, 0, 1), Req(100, 1, 3),
                                   Req(40, 2, 3), Req(150, 4, 5)};
  rs[1].inplace_of = 0;
  const MemoryPlan p = PlanMemory(rs, true);
  EXPECT_EQ(p.block_of[0], p.block_of[1]);
  EXPECT_NE(p.block_of[2], p.block_of[0]);
  // At step 4 both blocks are free: the larger one grows to 150.
  EXPECT_EQ(p.block_of[3], p.block_of[0]);
  EXPECT_EQ(p.TotalBytes(), 150 + 40);
}

TEST(MemoryPlanTest, PinnedAndDevicesAreNeverShared) {
  std::vector<BufferRequest> rs = {Req(64, 0, 0), Req(64, 1, 1),
                                   Req(64, 2, 2), Req(64, 3, 3)};
  rs[0].pinned = true;
  rs[2].device = Device::GPU(0);
  rs[3].device = Device::GPU(0);
  const MemoryPlan p = PlanMemory(rs, true);
  EXPECT_NE(p.block_of[1], p.block_of[0]);
  EXPECT_EQ(p.block_of[3], p.block_of[2]);
  EXPECT_NE(p.block_of[2], p.block_of[1]);
  EXPECT_EQ(p.block_device[p.block_of[2]], Device::GPU(0));
}

}  // namespace
}  // namespace kvtrain
