// Shared-memory frames for same-host links (see shm.h).
#include "net/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

namespace kvtrain {
namespace net {
namespace {

// The arena starts with its header; every slot starts with a slot header.
// Both are 64 bytes, so every frame starts 64-byte aligned.
constexpr uint64_t kHeaderBytes = 64;
constexpr uint64_t kArenaMagic = 0x31524e4148534b56ull;  // "VKSHANR1"
constexpr uint64_t kSlotMagic = 0x31544f4c53534b56ull;   // "VKSSLOT1"
constexpr uint32_t kSlotFree = 0;
constexpr uint32_t kSlotInUse = 1;
constexpr uint32_t kSlotReserved = 2;  // the sender's, not yet handed
constexpr size_t kMaxSlots = 4096;
constexpr char kTableMagic[4] = {'K', 'V', 'S', '1'};
constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

struct ArenaHeader {
  uint64_t magic;
  uint64_t id;
  uint64_t bytes;
};

struct SlotHeader {
  uint64_t magic;
  uint32_t state;  // accessed with __atomic builtins: it is shared
  uint32_t unused;
  uint64_t size;
};

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// A slot's bytes, its header included, for a frame of `size`.
uint64_t SlotBytes(size_t size) {
  return kHeaderBytes + RoundUp(size, kHeaderBytes);
}

std::string Errno(int err) { return std::strerror(err); }

template <typename T>
void PutRaw(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
T GetRaw(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace

// ---- shared memory ----

StatusOr<SharedMemory> CreateSharedMemory(const char* name, uint64_t bytes,
                                          const std::string& noun) {
  SharedMemory m;
  m.fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m.fd < 0) return Status::Unavailable("memfd_create: " + Errno(errno));
  if (fchmod(m.fd, 0600) != 0 || ftruncate(m.fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(m.fd);
    return Status::Unavailable("ftruncate of a " + noun + ": " + Errno(err));
  }
  // Its size is fixed for good: no one (this process included) can shrink
  // it under a reader's mapping, which would make the reader's next access
  // fault (SIGBUS). Readers refuse memory without these seals.
  if (fcntl(m.fd, F_ADD_SEALS, kSizeSeals | F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(m.fd);
    return Status::Unavailable("sealing the size of a " + noun + ": " + Errno(err));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(m.fd);
    return Status::Unavailable("mmap of a " + noun + ": " + Errno(err));
  }
  m.base = static_cast<char*>(base);
  std::random_device rd;
  while (m.id == 0) m.id = (uint64_t{rd()} << 32) | rd();
  return m;
}

StatusOr<char*> MapPeerSharedMemory(int32_t pid, int32_t fd, uint64_t bytes,
                                    const std::string& noun, std::string* path) {
  *path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int own = open(path->c_str(), O_RDWR | O_CLOEXEC);
  if (own < 0) {
    const int err = errno;
    return Status::Unavailable("cannot open the sender's " + noun + " " + *path + ": " +
                               Errno(err));
  }
  struct stat st;
  if (fstat(own, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      static_cast<uint64_t>(st.st_size) != bytes) {
    close(own);
    return Status::InvalidArgument(*path + " is not a " + noun + " of " + std::to_string(bytes) +
                                   " bytes of this user");
  }
  // Mapped only when its size is sealed: else the sender could shrink it
  // under this mapping and make this process fault on its next read.
  const int seals = fcntl(own, F_GET_SEALS);
  if (seals < 0 || (seals & kSizeSeals) != kSizeSeals) {
    close(own);
    return Status::InvalidArgument(*path + " is not a " + noun +
                                   " sealed against resizing (F_SEAL_SHRINK, "
                                   "F_SEAL_GROW): it could be cut under this "
                                   "process's mapping");
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  const int err = errno;
  close(own);
  if (base == MAP_FAILED) {
    return Status::Unavailable("cannot map the sender's " + noun + " " + *path + ": " +
                               Errno(err));
  }
  return static_cast<char*>(base);
}

// ---- ShmArena ----

StatusOr<std::unique_ptr<ShmArena>> ShmArena::Create(uint64_t bytes) {
  bytes = RoundUp(std::max<uint64_t>(bytes, 2 * kHeaderBytes), 4096);
  if (bytes > kMaxShmArenaBytes) {
    return Status::InvalidArgument("shared-memory arena of " + std::to_string(bytes) +
                                   " bytes is above the limit of " +
                                   std::to_string(kMaxShmArenaBytes));
  }
  KV_ASSIGN_OR_RETURN(SharedMemory m,
                      CreateSharedMemory("kvtrain-shm", bytes, "shared-memory arena"));
  auto* h = reinterpret_cast<ArenaHeader*>(m.base);
  h->magic = kArenaMagic;
  h->id = m.id;
  h->bytes = bytes;
  const uint64_t mapped = bytes;
  std::shared_ptr<char> mapping(m.base,
                                [mapped](char* base) { munmap(base, mapped); });
  return std::unique_ptr<ShmArena>(
      new ShmArena(m.fd, std::move(mapping), bytes, m.id));
}

ShmArena::ShmArena(int fd, std::shared_ptr<char> base, uint64_t bytes,
                   uint64_t id)
    : fd_(fd),
      mapping_(std::move(base)),
      base_(mapping_.get()),
      bytes_(bytes),
      id_(id) {}

ShmArena::~ShmArena() {
  // A receiver's mapping, or a reserved slot's owner, keeps the memory
  // alive after this.
  close(fd_);
}

void ShmArena::Reclaim() {
  for (auto it = used_.begin(); it != used_.end();) {
    auto* slot = reinterpret_cast<SlotHeader*>(base_ + it->first);
    const uint32_t state = __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE);
    const bool sender_done =
        it->second.held == nullptr || !it->second.held->load();
    if (sender_done && (state == kSlotFree || state == kSlotReserved)) {
      it = used_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t ShmArena::slots_in_use() {
  Reclaim();
  return used_.size();
}

bool ShmArena::Place(uint64_t need, uint64_t* at) {
  if (need > bytes_ - kHeaderBytes) return false;
  Reclaim();
  if (used_.size() >= kMaxSlots) return false;
  // First fit: the lowest gap that holds the slot, so that a long-held slot
  // does not keep the rest of the arena from being reused.
  *at = kHeaderBytes;
  for (const auto& [offset, slot] : used_) {
    if (offset - *at >= need) return true;
    *at = offset + slot.bytes;
  }
  return bytes_ - *at >= need;
}

void ShmArena::Describe(uint64_t at, size_t size, ShmRef* ref) const {
  ref->pid = static_cast<int32_t>(getpid());
  ref->fd = fd_;
  ref->arena_id = id_;
  ref->arena_bytes = bytes_;
  ref->offset = at + kHeaderBytes;
  ref->size = size;
}

char* ShmArena::NewSlot(size_t size, uint64_t* at) {
  if (size == 0 || !Place(SlotBytes(size), at)) return nullptr;
  auto* slot = reinterpret_cast<SlotHeader*>(base_ + *at);
  slot->magic = kSlotMagic;
  slot->size = size;
  return base_ + *at + kHeaderBytes;
}

void ShmArena::Publish(uint64_t at, size_t size, uint32_t state,
                       std::shared_ptr<std::atomic<bool>> held) {
  auto* slot = reinterpret_cast<SlotHeader*>(base_ + at);
  __atomic_store_n(&slot->state, state, __ATOMIC_RELEASE);
  used_.emplace(at, Slot{SlotBytes(size), std::move(held)});
}

bool ShmArena::Put(const void* data, size_t size, ShmRef* ref) {
  uint64_t at;
  char* dst = NewSlot(size, &at);
  if (dst == nullptr) return false;
  std::memcpy(dst, data, size);
  Publish(at, size, kSlotInUse, nullptr);
  Describe(at, size, ref);
  return true;
}

bool ShmArena::Reserve(size_t size, ShmReserved* out) {
  uint64_t at;
  out->data = NewSlot(size, &at);
  if (out->data == nullptr) return false;
  auto held = std::make_shared<std::atomic<bool>>(true);
  Publish(at, size, kSlotReserved, held);
  // The deleter only marks the slot: Reclaim, under the caller's
  // serialisation, frees it.
  out->owner = std::shared_ptr<const void>(
      out->data,
      [mapping = mapping_, held](const void*) { held->store(false); });
  return true;
}

bool ShmArena::Hand(const void* data, size_t size, ShmRef* ref) {
  const char* p = static_cast<const char*>(data);
  if (size == 0 || p < base_ + 2 * kHeaderBytes || p >= base_ + bytes_)
    return false;
  const uint64_t at = static_cast<uint64_t>(p - base_) - kHeaderBytes;
  auto it = used_.find(at);
  if (it == used_.end() || it->second.held == nullptr) return false;
  auto* slot = reinterpret_cast<SlotHeader*>(base_ + at);
  if (slot->size != size ||
      __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) != kSlotReserved) {
    return false;
  }
  __atomic_store_n(&slot->state, kSlotInUse, __ATOMIC_RELEASE);
  Describe(at, size, ref);
  return true;
}

// ---- ShmMaps ----

struct ShmMaps::Mapping {
  Mapping(char* b, uint64_t n) : base(b), bytes(n) {}
  ~Mapping() { munmap(base, bytes); }
  char* const base;
  const uint64_t bytes;
};

ShmMaps::~ShmMaps() = default;

size_t ShmMaps::mapped() {
  std::lock_guard<std::mutex> l(mu_);
  return maps_.size();
}

StatusOr<ShmMaps::View> ShmMaps::Open(const ShmRef& ref) {
  if (ref.arena_bytes > kMaxShmArenaBytes || ref.arena_bytes % 4096 != 0 ||
      ref.size == 0 || ref.offset % kHeaderBytes != 0 ||
      ref.offset < 2 * kHeaderBytes || ref.offset > ref.arena_bytes ||
      ref.size > ref.arena_bytes - ref.offset) {
    return Status::InvalidArgument(
        "shared-memory frame [" + std::to_string(ref.offset) + ", +" +
        std::to_string(ref.size) + ") does not fit an arena of " +
        std::to_string(ref.arena_bytes) + " bytes");
  }
  std::shared_ptr<Mapping> map;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = maps_.find({ref.pid, ref.fd, ref.arena_id});
    if (it != maps_.end() && it->second->bytes == ref.arena_bytes) map = it->second;
  }
  if (map == nullptr) {
    std::string path;
    KV_ASSIGN_OR_RETURN(
        char* base, MapPeerSharedMemory(ref.pid, ref.fd, ref.arena_bytes, "shared-memory arena",
                                         &path));
    auto fresh = std::make_shared<Mapping>(base, ref.arena_bytes);
    const auto* h = reinterpret_cast<const ArenaHeader*>(fresh->base);
    if (h->magic != kArenaMagic || h->id != ref.arena_id || h->bytes != ref.arena_bytes) {
      return Status::InvalidArgument(path + " does not hold the arena the descriptor names");
    }
    std::lock_guard<std::mutex> l(mu_);
    map = maps_[{ref.pid, ref.fd, ref.arena_id}] = std::move(fresh);
  }
  auto* slot = reinterpret_cast<SlotHeader*>(map->base + ref.offset - kHeaderBytes);
  if (slot->magic != kSlotMagic || slot->size != ref.size ||
      __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) != kSlotInUse) {
    return Status::InvalidArgument("shared-memory frame at " + std::to_string(ref.offset) +
                                   " is not a slot in use of " + std::to_string(ref.size) +
                                   " bytes");
  }
  View v;
  v.data = map->base + ref.offset;
  v.size = ref.size;
  // The deleter frees the slot; the captured mapping outlives the view.
  v.owner = std::shared_ptr<const void>(v.data, [map, slot](const void*) {
    __atomic_store_n(&slot->state, kSlotFree, __ATOMIC_RELEASE);
  });
  return v;
}

// ---- the table ----

std::string EncodeShmTable(const ShmRef& arena, const std::vector<ShmPlaced>& placed) {
  std::string out(kTableMagic, sizeof(kTableMagic));
  PutRaw<uint32_t>(&out, static_cast<uint32_t>(placed.size()));
  PutRaw<int32_t>(&out, arena.pid);
  PutRaw<int32_t>(&out, arena.fd);
  PutRaw<uint64_t>(&out, arena.arena_id);
  PutRaw<uint64_t>(&out, arena.arena_bytes);
  for (const ShmPlaced& p : placed) {
    PutRaw<uint32_t>(&out, p.frame);
    PutRaw<uint32_t>(&out, 0);
    PutRaw<uint64_t>(&out, p.offset);
    PutRaw<uint64_t>(&out, p.size);
  }
  return out;
}

Status DecodeShmTable(const char* data, size_t size, ShmRef* arena,
                      std::vector<ShmPlaced>* placed) {
  constexpr size_t kHead = 4 + 4 + 4 + 4 + 8 + 8, kEntry = 4 + 4 + 8 + 8;
  if (size < kHead || std::memcmp(data, kTableMagic, sizeof(kTableMagic)) != 0) {
    return Status::InvalidArgument("a message starting with an empty frame has no "
                                   "shared-memory table after it");
  }
  const uint32_t n = GetRaw<uint32_t>(data + 4);
  if (n == 0 || size != kHead + n * kEntry) {
    return Status::InvalidArgument("shared-memory table of " + std::to_string(size) +
                                   " bytes does not hold " + std::to_string(n) +
                                   " frames");
  }
  arena->pid = GetRaw<int32_t>(data + 8);
  arena->fd = GetRaw<int32_t>(data + 12);
  arena->arena_id = GetRaw<uint64_t>(data + 16);
  arena->arena_bytes = GetRaw<uint64_t>(data + 24);
  placed->clear();
  for (uint32_t i = 0; i < n; ++i) {
    const char* e = data + kHead + i * kEntry;
    placed->push_back({GetRaw<uint32_t>(e), GetRaw<uint64_t>(e + 8), GetRaw<uint64_t>(e + 16)});
  }
  return Status::OK();
}

// ---- a ring's announcement (net/shm_ring.h) ----

namespace {
constexpr char kHelloMagic[4] = {'K', 'V', 'Q', '1'};
constexpr size_t kHelloBytes = 4 + 4 + 4 + 8 + 8;
}  // namespace

std::string EncodeRingHello(const ShmRef& ring) {
  std::string out(kHelloMagic, sizeof(kHelloMagic));
  PutRaw<int32_t>(&out, ring.pid);
  PutRaw<int32_t>(&out, ring.fd);
  PutRaw<uint64_t>(&out, ring.arena_id);
  PutRaw<uint64_t>(&out, ring.arena_bytes);
  return out;
}

bool IsRingHello(const char* data, size_t size) {
  return size >= sizeof(kHelloMagic) && std::memcmp(data, kHelloMagic, sizeof(kHelloMagic)) == 0;
}

Status DecodeRingHello(const char* data, size_t size, ShmRef* ring) {
  if (size != kHelloBytes || !IsRingHello(data, size)) {
    return Status::InvalidArgument("a shared-memory ring announcement of " +
                                   std::to_string(size) + " bytes (expected " +
                                   std::to_string(kHelloBytes) + " starting KVQ1)");
  }
  *ring = ShmRef();
  ring->pid = GetRaw<int32_t>(data + 4);
  ring->fd = GetRaw<int32_t>(data + 8);
  ring->arena_id = GetRaw<uint64_t>(data + 12);
  ring->arena_bytes = GetRaw<uint64_t>(data + 20);
  return Status::OK();
}

}  // namespace net
}  // namespace kvtrain
