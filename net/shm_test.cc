#include "net/shm.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace kvtrain {
namespace net {
namespace {

std::vector<char> Bytes(size_t n, int seed) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 7 + seed) & 0xff);
  return v;
}

std::unique_ptr<ShmArena> NewArena(uint64_t bytes) {
  StatusOr<std::unique_ptr<ShmArena>> a = ShmArena::Create(bytes);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? std::move(*a) : nullptr;
}

TEST(ShmTest, AFrameIsReadInPlaceAndItsSlotFreedWithItsLastReference) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  const std::vector<char> in = Bytes(100000, 3);
  ShmRef ref;
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &ref));
  EXPECT_EQ(ref.pid, getpid());
  EXPECT_EQ(ref.size, in.size());
  EXPECT_EQ(ref.offset % 64, 0u);
  EXPECT_EQ(arena->slots_in_use(), 1u);

  ShmMaps maps;
  StatusOr<ShmMaps::View> v = maps.Open(ref);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->size, in.size());
  EXPECT_EQ(std::memcmp(v->data, in.data(), in.size()), 0);
  std::shared_ptr<const void> copy = v->owner;
  v->owner.reset();
  EXPECT_EQ(arena->slots_in_use(), 1u);  // a copy still holds it
  copy.reset();
  EXPECT_EQ(arena->slots_in_use(), 0u);
  EXPECT_EQ(maps.mapped(), 1u);
}

TEST(ShmTest, AFullArenaRefusesAndTakesFramesAgainOnceFreed) {
  auto arena = NewArena(256 << 10);
  ASSERT_NE(arena, nullptr);
  const std::vector<char> in = Bytes(150000, 1);
  ShmRef a, b;
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &a));
  EXPECT_FALSE(arena->Put(in.data(), in.size(), &b));
  EXPECT_FALSE(arena->Put(in.data(), 300 << 10, &b));  // larger than the arena
  EXPECT_FALSE(arena->Put(in.data(), 0, &b));
  ShmMaps maps;
  {
    StatusOr<ShmMaps::View> v = maps.Open(a);
    ASSERT_TRUE(v.ok()) << v.status();
  }
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &b));
  EXPECT_EQ(b.offset, a.offset);
}

TEST(ShmTest, FreedSlotsAreReusedWhileAnEarlierOneIsHeld) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  const std::vector<char> in = Bytes(200000, 5);
  ShmMaps maps;
  ShmRef held, second;
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &held));
  StatusOr<ShmMaps::View> kept = maps.Open(held);  // as a server keeps a push
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &second));
  for (int i = 0; i < 50; ++i) {
    ShmRef r;
    ASSERT_TRUE(arena->Put(in.data(), in.size(), &r)) << "round " << i;
    StatusOr<ShmMaps::View> v = maps.Open(r);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(std::memcmp(v->data, in.data(), in.size()), 0);
  }
  EXPECT_EQ(arena->slots_in_use(), 2u);
  EXPECT_EQ(std::memcmp(kept->data, in.data(), in.size()), 0);
}

TEST(ShmTest, AReservedSlotIsHandedWithoutACopyAndFreedByBothSides) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  ShmReserved slot;
  ASSERT_TRUE(arena->Reserve(100000, &slot));
  const std::vector<char> in = Bytes(100000, 5);
  std::memcpy(slot.data, in.data(), in.size());
  ShmMaps maps;
  ShmRef ref, reserved;
  ASSERT_TRUE(arena->Put(in.data(), 64, &ref));  // a copied frame beside it
  EXPECT_FALSE(arena->Hand(slot.data, 100, &reserved));        // not its size
  EXPECT_FALSE(arena->Hand(slot.data + 64, 1000, &reserved));  // not its start
  EXPECT_FALSE(
      arena->Hand(in.data(), in.size(), &reserved));  // not in the arena
  EXPECT_EQ(arena->slots_in_use(), 2u);

  ASSERT_TRUE(arena->Hand(slot.data, in.size(), &reserved));
  EXPECT_FALSE(arena->Hand(slot.data, in.size(), &ref));  // handed once only
  StatusOr<ShmMaps::View> v = maps.Open(reserved);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::memcmp(v->data, in.data(), in.size()), 0);
  // The same memory, not a copy (a sender must not write after Hand; the
  // test does, to show it).
  slot.data[0] = static_cast<char>(in[0] + 1);
  EXPECT_EQ(v->data[0], static_cast<char>(in[0] + 1));
  // The receiver done, the sender still holding: the slot stays.
  v->owner.reset();
  EXPECT_EQ(arena->slots_in_use(), 2u);
  slot.owner.reset();
  EXPECT_EQ(arena->slots_in_use(), 1u);

  // Dropped without being handed: free again; and the sender's owner keeps
  // the memory mapped after the arena is gone.
  ShmReserved unsent, outlives;
  ASSERT_TRUE(arena->Reserve(5000, &unsent));
  ASSERT_TRUE(arena->Reserve(5000, &outlives));
  EXPECT_EQ(arena->slots_in_use(), 3u);
  unsent.owner.reset();
  EXPECT_EQ(arena->slots_in_use(), 2u);
  EXPECT_FALSE(arena->Reserve(2 << 20, &unsent));  // larger than the arena
  EXPECT_FALSE(arena->Reserve(0, &unsent));
  arena.reset();
  std::memset(outlives.data, 7, 5000);
  EXPECT_EQ(outlives.data[4999], 7);
}

TEST(ShmTest, AReservedSlotIsRefusedUntilHanded) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  ShmReserved slot;
  ASSERT_TRUE(arena->Reserve(70000, &slot));
  std::memset(slot.data, 1, 70000);
  // A descriptor of the reserved slot (the arena's first: its frame lies
  // past the arena's and the slot's headers, at 128), as a forger would
  // make it from a copied frame's.
  ShmRef ref;
  ASSERT_TRUE(arena->Put(slot.data, 70000, &ref));
  ShmRef forged = ref;
  forged.offset = 128;
  ShmMaps maps;
  StatusOr<ShmMaps::View> v = maps.Open(forged);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("not a slot in use"), std::string::npos)
      << v.status();
  ShmRef handed;
  ASSERT_TRUE(arena->Hand(slot.data, 70000, &handed));
  EXPECT_EQ(handed.offset, 128u);
  EXPECT_TRUE(maps.Open(handed).ok());
}

TEST(ShmTest, AnotherProcessReadsTheFrameAndFreesItsSlot) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  const std::vector<char> in = Bytes(300000, 9);
  ShmRef ref;
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &ref));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A fresh reader, as in the receiving process: it maps the arena by
    // the sender's /proc entry and answers through its exit status.
    ShmMaps maps;
    StatusOr<ShmMaps::View> v = maps.Open(ref);
    int code = 0;
    if (!v.ok()) {
      code = 2;
    } else if (v->size != in.size() || std::memcmp(v->data, in.data(), in.size()) != 0) {
      code = 3;
    }
    _exit(code);  // the view goes with the process: no slot freed
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // _exit ran no destructor, so the slot is still in use...
  EXPECT_EQ(arena->slots_in_use(), 1u);

  // ...and a child that drops its view frees it.
  const pid_t second = fork();
  ASSERT_GE(second, 0);
  if (second == 0) {
    int code = 2;
    {
      ShmMaps maps;
      StatusOr<ShmMaps::View> v = maps.Open(ref);
      if (v.ok()) code = 0;
    }  // the view and the mapping go here
    _exit(code);
  }
  ASSERT_EQ(waitpid(second, &status, 0), second);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(arena->slots_in_use(), 0u);
}

// Another user cannot map an arena, even with its descriptor in hand.
TEST(ShmTest, AnotherUserCannotOpenAnArena) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as nobody";
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  const std::vector<char> in = Bytes(20000, 4);
  ShmRef ref;
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &ref));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(4);
    ShmMaps maps;
    StatusOr<ShmMaps::View> v = maps.Open(ref);
    if (v.ok()) _exit(1);
    if (v.status().code() != Status::Code::kUnavailable) _exit(2);
    _exit(v.status().message().find("Permission denied") != std::string::npos ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: opened; 2: another error; 3: another message";
  EXPECT_EQ(arena->slots_in_use(), 1u);
}

TEST(ShmTest, DescriptorsThatNameNoArenaOfOursAreRefused) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  const std::vector<char> in = Bytes(50000, 2);
  ShmRef ref;
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &ref));
  ShmMaps maps;

  ShmRef wrong_id = ref;
  wrong_id.arena_id ^= 1;
  StatusOr<ShmMaps::View> v = maps.Open(wrong_id);
  EXPECT_EQ(v.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(v.status().message().find("does not hold the arena"), std::string::npos)
      << v.status();

  ShmRef outside = ref;
  outside.offset = ref.arena_bytes - 64;
  outside.size = 4096;
  v = maps.Open(outside);
  EXPECT_EQ(v.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(v.status().message().find("does not fit"), std::string::npos) << v.status();

  ShmRef wrong_size = ref;
  wrong_size.size = ref.size - 1;
  v = maps.Open(wrong_size);
  EXPECT_EQ(v.status().code(), Status::Code::kInvalidArgument) << v.status();

  ShmRef no_fd = ref;
  no_fd.fd = 100000;
  v = maps.Open(no_fd);
  EXPECT_EQ(v.status().code(), Status::Code::kUnavailable);
  EXPECT_NE(v.status().message().find("/proc/" + std::to_string(getpid()) + "/fd/100000"),
            std::string::npos)
      << v.status();

  ShmRef not_an_arena = ref;
  not_an_arena.fd = 0;  // stdin: not a memfd of this size
  v = maps.Open(not_an_arena);
  EXPECT_FALSE(v.ok());

  // A slot already freed is not a frame any more.
  {
    StatusOr<ShmMaps::View> once = maps.Open(ref);
    ASSERT_TRUE(once.ok()) << once.status();
  }
  v = maps.Open(ref);
  EXPECT_EQ(v.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(v.status().message().find("not a slot in use"), std::string::npos) << v.status();
}

// A sender could shrink memory a reader has mapped, and the reader's next
// access would fault (SIGBUS). An arena's size is sealed for good, and a
// reader maps only memory sealed so.
TEST(ShmTest, OnlyMemorySealedAgainstShrinkingIsMapped) {
  auto arena = NewArena(1 << 20);
  ASSERT_NE(arena, nullptr);
  ShmRef ref;
  const std::vector<char> in = Bytes(1000, 3);
  ASSERT_TRUE(arena->Put(in.data(), in.size(), &ref));
  EXPECT_NE(ftruncate(ref.fd, 0), 0) << "an arena's size could be cut";
  EXPECT_EQ(errno, EPERM);
  // The same bytes in memory that can still shrink: refused, named.
  const int loose = memfd_create("loose", MFD_CLOEXEC);
  ASSERT_GE(loose, 0);
  ASSERT_EQ(ftruncate(loose, static_cast<off_t>(ref.arena_bytes)), 0);
  std::string path;
  StatusOr<char*> mapped =
      MapPeerSharedMemory(getpid(), loose, ref.arena_bytes, "shared-memory arena", &path);
  EXPECT_EQ(mapped.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(mapped.status().message().find("sealed against resizing"), std::string::npos)
      << mapped.status();
  close(loose);
}

TEST(ShmTest, TheTableRoundTripsAndMalformedOnesAreNamed) {
  ShmRef arena;
  arena.pid = 1234;
  arena.fd = 17;
  arena.arena_id = 0x0123456789abcdefull;
  arena.arena_bytes = 1 << 26;
  const std::vector<ShmPlaced> placed = {{2, 128, 70000}, {4, 70208, 16384}};
  const std::string t = EncodeShmTable(arena, placed);
  ShmRef back;
  std::vector<ShmPlaced> got;
  ASSERT_TRUE(DecodeShmTable(t.data(), t.size(), &back, &got).ok());
  EXPECT_EQ(back.pid, 1234);
  EXPECT_EQ(back.fd, 17);
  EXPECT_EQ(back.arena_id, arena.arena_id);
  EXPECT_EQ(back.arena_bytes, arena.arena_bytes);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].frame, 4u);
  EXPECT_EQ(got[1].offset, 70208u);
  EXPECT_EQ(got[1].size, 16384u);

  Status s = DecodeShmTable(t.data(), t.size() - 1, &back, &got);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(s.message().find("does not hold 2 frames"), std::string::npos) << s;
  const std::string junk = "hello world, no table here at all";
  s = DecodeShmTable(junk.data(), junk.size(), &back, &got);
  EXPECT_NE(s.message().find("no shared-memory table"), std::string::npos) << s;
  s = DecodeShmTable(t.data(), 3, &back, &got);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
