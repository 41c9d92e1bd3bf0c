// Shared-memory frames for same-host links. Between two processes of one
// host, a large frame need not cross a socket at all: the sender copies it
// into an arena of shared memory (a memfd, ShmArena) and sends only where it
// lies (a ShmRef); the receiver maps the sender's arena through
// /proc/PID/fd/FD (ShmMaps) and reads the frame in place, and the slot is
// free again once the receiver drops its last reference. This saves the
// kernel's copy through the socket and the wake-ups of both sides' I/O
// threads for every socket buffer's worth of bytes.
//
// Who can read an arena: the kernel lets a process open another's
// /proc/PID/fd/FD only if it may inspect that process (the same user id, as
// the same-host socket already requires). The arena's random id, which only
// descriptors sent over the same-host socket carry, must match what the
// mapped arena holds, so a descriptor from anywhere else names nothing.
#ifndef KVTRAIN_NET_SHM_H_
#define KVTRAIN_NET_SHM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"

namespace kvtrain {
namespace net {

// Where one frame lies: in the arena `arena_id` (arena_bytes long) that
// process `pid` holds open as file descriptor `fd`, at [offset, offset +
// size).
struct ShmRef {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t arena_id = 0;
  uint64_t arena_bytes = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// What arenas and rings (net/shm_ring.h) are made of: a fresh memfd of
// `bytes` named `name`, mode 0600 (only this user may open it, and the
// kernel lets no other user reach it through /proc/PID/fd), closed on exec,
// mapped shared; and a random nonzero id for its header. Unavailable names
// `noun` ("shared-memory arena") and the failing call.
struct SharedMemory {
  int fd = -1;
  char* base = nullptr;
  uint64_t id = 0;
};
StatusOr<SharedMemory> CreateSharedMemory(const char* name, uint64_t bytes,
                                          const std::string& noun);
// Maps the memfd `fd` of `bytes` that process `pid` holds open, through
// /proc/PID/fd/FD (*path). Unavailable: it cannot be opened or mapped;
// InvalidArgument: it is no regular file of this user of that size. The
// messages name `noun` and the path.
StatusOr<char*> MapPeerSharedMemory(int32_t pid, int32_t fd, uint64_t bytes,
                                    const std::string& noun, std::string* path);

// Arena sizes a receiver accepts (a sender's descriptor names its size).
inline constexpr uint64_t kMaxShmArenaBytes = uint64_t{1} << 32;

// A slot reserved for the sender to fill (ShmArena::Reserve): `data` is
// writable, `owner` keeps the slot and its mapping while the sender holds it.
struct ShmReserved {
  char* data = nullptr;
  std::shared_ptr<const void> owner;
};

// The sender's side: one arena per outgoing same-host connection. Slots are
// placed first-fit and come back free when the receiver releases them; a
// frame that does not fit is the caller's to send another way. Not
// thread-safe: the caller serialises Put, Reserve and Hand.
class ShmArena {
 public:
  // A fresh arena of `bytes` (rounded up to 4 KiB) of shared memory, closed
  // on exec. Pages are allocated as they are first written.
  static StatusOr<std::unique_ptr<ShmArena>> Create(uint64_t bytes);
  ~ShmArena();
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  // Copies [data, data + size) into a free slot and describes it in *ref;
  // false (nothing copied) when no slot of that size is free.
  bool Put(const void* data, size_t size, ShmRef* ref);
  // A slot of `size` bytes for the caller to write a frame into, to send
  // without a copy (Hand); false when none is free. Until handed, the slot
  // is the sender's: a receiver refuses a descriptor of it. It is free again
  // once its owner is dropped and (if handed) its receiver released it.
  bool Reserve(size_t size, ShmReserved* slot);
  // If [data, data + size) is exactly a reserved slot not handed yet, makes
  // it the receiver's to read (describing it in *ref); false otherwise (the
  // frame is to be sent another way).
  bool Hand(const void* data, size_t size, ShmRef* ref);
  // Slots handed out and not yet released by their receiver.
  size_t slots_in_use();
  uint64_t bytes() const { return bytes_; }

 private:
  struct Slot {
    uint64_t bytes = 0;  // the slot's, header included
    // Reserved slots: whether the sender still holds it (cleared by the
    // owner's deleter, on any thread).
    std::shared_ptr<std::atomic<bool>> held;
  };
  ShmArena(int fd, std::shared_ptr<char> base, uint64_t bytes, uint64_t id);
  void Reclaim();
  // The lowest free gap of `need` bytes and its offset; false if none.
  bool Place(uint64_t need, uint64_t* at);
  void Describe(uint64_t at, size_t size, ShmRef* ref) const;
  // A placed slot for `size` bytes with its header written but its state
  // not (the frame's first byte, its header at *at); null if none is free.
  char* NewSlot(size_t size, uint64_t* at);
  // Sets the slot's state (release: the frame is written) and records it.
  void Publish(uint64_t at, size_t size, uint32_t state,
               std::shared_ptr<std::atomic<bool>> held);

  const int fd_;
  // The mapping; reserved slots' owners keep it alive past the arena.
  const std::shared_ptr<char> mapping_;
  char* const base_;
  const uint64_t bytes_;
  const uint64_t id_;
  // Slots in use: offset of the slot's header -> the slot.
  std::map<uint64_t, Slot> used_;
};

// The receiver's side: the arenas of its peers that it has mapped, kept
// until it closes. Thread-safe.
class ShmMaps {
 public:
  ShmMaps() = default;
  ~ShmMaps();
  ShmMaps(const ShmMaps&) = delete;
  ShmMaps& operator=(const ShmMaps&) = delete;

  // The frame `ref` describes, read in place: `owner` keeps the mapping
  // alive, and its last copy going away frees the slot for the sender.
  // InvalidArgument: the descriptor is malformed or names no arena of
  // ours (a size out of range, a wrong id, a slot not in use).
  // Unavailable: the sender's arena cannot be opened or mapped (the
  // message names /proc/PID/fd/FD and why).
  struct View {
    std::shared_ptr<const void> owner;
    const char* data = nullptr;
    size_t size = 0;
  };
  StatusOr<View> Open(const ShmRef& ref) EXCLUDES(mu_);

  size_t mapped() EXCLUDES(mu_);

 private:
  struct Mapping;
  std::mutex mu_;
  std::map<std::tuple<int32_t, int32_t, uint64_t>, std::shared_ptr<Mapping>> maps_
      GUARDED_BY(mu_);
};

// A message's frames with its large ones moved into an arena, as it goes
// over the socket: an empty frame (no message of the transport starts with
// one), then a table saying which frames lie in the arena, then every
// frame, those in the arena left empty. The table: "KVS1", the count,
// the arena (pid, fd, id, bytes), then (frame index, offset, size) each.
struct ShmPlaced {
  uint32_t frame = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};
std::string EncodeShmTable(const ShmRef& arena, const std::vector<ShmPlaced>& placed);
// InvalidArgument names what is wrong (length, magic, count).
Status DecodeShmTable(const char* data, size_t size, ShmRef* arena,
                      std::vector<ShmPlaced>* placed);

// The announcement of a ring over the same-host socket: "KVQ1", then the
// ring's ShmRef (pid, fd, id, bytes).
std::string EncodeRingHello(const ShmRef& ring);
// Whether `data` starts as an announcement (then decode it).
bool IsRingHello(const char* data, size_t size);
// InvalidArgument names what is wrong.
Status DecodeRingHello(const char* data, size_t size, ShmRef* ring);


}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_SHM_H_
