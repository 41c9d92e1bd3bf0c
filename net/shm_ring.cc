// Message rings in shared memory for same-host links (see shm_ring.h).
#include "net/shm_ring.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <new>

namespace kvtrain {
namespace net {

// Positions count bytes ever written and read; a position's place in the
// data is position % capacity. The writer's and the reader's fields sit on
// separate cache lines. Shared fields are accessed with __atomic builtins.
struct RingHeader {
  uint64_t magic;
  uint64_t id;
  uint64_t capacity;
  char pad0[40];
  uint64_t tail;    // the writer's position
  uint32_t closed;  // the writer closed the ring
  char pad1[52];
  uint64_t head;      // the reader's position
  uint32_t waiting;   // the reader sleeps on its doorbell
  int32_t bell_pid;   // the reader's doorbell: /proc/bell_pid/fd/bell_fd
  int32_t bell_fd;
  char pad2[44];
};
static_assert(sizeof(RingHeader) == 192, "one cache line per side");

namespace {

constexpr uint64_t kRingMagic = 0x31474e49524b564bull;  // "KVKRING1"
constexpr uint32_t kWrap = 0xffffffffu;                  // the rest of the data is unused
constexpr size_t kRecordHead = 8;                        // u32 length, u32 unused
uint64_t Round8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

std::string Errno(int err) { return std::strerror(err); }

// Whether process `pid` has the memory whose inode is `ino` mapped (its
// /proc/PID/maps, readable for this user's processes).
bool MapsInode(int32_t pid, ino_t ino) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // start-end perms offset dev inode [path]
    std::istringstream in(line);
    std::string range, perms, offset, dev;
    unsigned long long inode = 0;
    if (in >> range >> perms >> offset >> dev >> inode &&
        inode == static_cast<unsigned long long>(ino)) {
      return true;
    }
  }
  return false;
}

}  // namespace

// ---- ShmRingWriter ----

StatusOr<std::unique_ptr<ShmRingWriter>> ShmRingWriter::Create(uint64_t capacity) {
  if (capacity < 4096 || (capacity & (capacity - 1)) != 0 || capacity > (uint64_t{1} << 30)) {
    return Status::InvalidArgument("a shared-memory ring of " + std::to_string(capacity) +
                                   " bytes: expected a power of two from 4096 to 2^30");
  }
  const uint64_t bytes = 4096 + capacity;  // the header, padded to a page
  KV_ASSIGN_OR_RETURN(SharedMemory m,
                      CreateSharedMemory("kvtrain-ring", bytes, "shared-memory ring"));
  auto* h = new (m.base) RingHeader();
  h->magic = kRingMagic;
  h->id = m.id;
  h->capacity = capacity;
  h->bell_fd = -1;
  return std::unique_ptr<ShmRingWriter>(new ShmRingWriter(m.fd, m.base, bytes, capacity, m.id));
}

ShmRingWriter::ShmRingWriter(int fd, char* base, uint64_t bytes, uint64_t capacity,
                             uint64_t id)
    : fd_(fd),
      base_(base),
      bytes_(bytes),
      capacity_(capacity),
      id_(id),
      header_(reinterpret_cast<RingHeader*>(base)),
      data_(base + 4096) {}

ShmRingWriter::~ShmRingWriter() {
  Close();
  if (bell_ >= 0) close(bell_);
  // A reader's mapping keeps the memory alive after this.
  munmap(base_, bytes_);
  close(fd_);
}

ShmRef ShmRingWriter::ref() const {
  ShmRef r;
  r.pid = static_cast<int32_t>(getpid());
  r.fd = fd_;
  r.arena_id = id_;
  r.arena_bytes = bytes_;
  return r;
}

size_t ShmRingWriter::max_record() const { return capacity_ / 2 - kRecordHead; }

bool ShmRingWriter::Write(const RingPieces& pieces) {
  size_t len = 0;
  for (const auto& p : pieces) len += p.second;
  if (len > max_record()) return false;
  const uint64_t need = kRecordHead + Round8(len);
  uint64_t tail = __atomic_load_n(&header_->tail, __ATOMIC_RELAXED);
  const uint64_t head = __atomic_load_n(&header_->head, __ATOMIC_ACQUIRE);
  uint64_t at = tail % capacity_;
  const uint64_t to_end = capacity_ - at;
  const uint64_t skip = to_end < need ? to_end : 0;
  if (tail + skip + need - head > capacity_) return false;
  if (skip != 0) {
    const uint32_t wrap = kWrap;
    std::memcpy(data_ + at, &wrap, sizeof(wrap));
    tail += skip;
    at = 0;
  }
  const uint32_t len32 = static_cast<uint32_t>(len);
  std::memcpy(data_ + at, &len32, sizeof(len32));
  char* out = data_ + at + kRecordHead;
  for (const auto& p : pieces) {
    if (p.second != 0) std::memcpy(out, p.first, p.second);
    out += p.second;
  }
  // Sequentially consistent with the reader's Sleep: either it sees this
  // record, or this writer sees it asleep (WakeReader).
  __atomic_store_n(&header_->tail, tail + need, __ATOMIC_SEQ_CST);
  return true;
}

Status ShmRingWriter::WakeReader() {
  if (__atomic_load_n(&header_->waiting, __ATOMIC_SEQ_CST) == 0) return Status::OK();
  if (bell_ < 0) {
    const int32_t pid = __atomic_load_n(&header_->bell_pid, __ATOMIC_ACQUIRE);
    const int32_t fd = __atomic_load_n(&header_->bell_fd, __ATOMIC_ACQUIRE);
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    // Read-write: this end then also holds the pipe open for reading, so a
    // write after the reader died fails with EAGAIN at worst, never EPIPE.
    bell_ = open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (bell_ < 0) {
      return Status::Unavailable("cannot open the receiver's doorbell " + path + ": " +
                                 Errno(errno));
    }
    struct stat st;
    if (fstat(bell_, &st) != 0 || !S_ISFIFO(st.st_mode)) {
      close(bell_);
      bell_ = -1;
      return Status::InvalidArgument(path + " is not a pipe");
    }
    // The process and descriptor come from the ring's memory, which the
    // reader can write: the doorbell is rung only if that process is the
    // ring's reader (it has this ring mapped), not any process of this user.
    struct stat ring;
    if (fstat(fd_, &ring) != 0 || !MapsInode(pid, ring.st_ino)) {
      close(bell_);
      bell_ = -1;
      return Status::InvalidArgument("the ring names process " + std::to_string(pid) +
                                     " as its reader, which has not mapped it: its "
                                     "doorbell " + path + " is not rung");
    }
  }
  const char one = 1;
  // EAGAIN: the pipe is full of wake-ups the reader has yet to drain.
  if (write(bell_, &one, 1) < 0 && errno != EAGAIN && errno != EINTR) {
    return Status::Unavailable("doorbell: " + Errno(errno));
  }
  return Status::OK();
}

bool ShmRingWriter::ReaderAttached() const {
  return __atomic_load_n(&header_->bell_pid, __ATOMIC_ACQUIRE) != 0;
}

bool ShmRingWriter::Drained() const {
  return __atomic_load_n(&header_->head, __ATOMIC_ACQUIRE) ==
         __atomic_load_n(&header_->tail, __ATOMIC_RELAXED);
}

void ShmRingWriter::Close() { __atomic_store_n(&header_->closed, 1u, __ATOMIC_SEQ_CST); }

// ---- ShmRingReader ----

StatusOr<std::unique_ptr<ShmRingReader>> ShmRingReader::Open(const ShmRef& ref, int bell_fd) {
  if (ref.arena_bytes < 4096 + 4096 || ref.arena_bytes > 4096 + (uint64_t{1} << 30)) {
    return Status::InvalidArgument("a shared-memory ring of " +
                                   std::to_string(ref.arena_bytes) + " bytes is out of range");
  }
  std::string path;
  KV_ASSIGN_OR_RETURN(char* base, MapPeerSharedMemory(ref.pid, ref.fd, ref.arena_bytes,
                                                      "shared-memory ring", &path));
  auto* h = reinterpret_cast<RingHeader*>(base);
  const uint64_t capacity = ref.arena_bytes - 4096;
  if (h->magic != kRingMagic || h->id != ref.arena_id || h->capacity != capacity) {
    munmap(base, ref.arena_bytes);
    return Status::InvalidArgument(path + " does not hold the ring the announcement names");
  }
  __atomic_store_n(&h->bell_fd, bell_fd, __ATOMIC_RELEASE);
  __atomic_store_n(&h->bell_pid, static_cast<int32_t>(getpid()), __ATOMIC_RELEASE);
  return std::unique_ptr<ShmRingReader>(
      new ShmRingReader(base, ref.arena_bytes, capacity, ref.arena_id));
}

ShmRingReader::ShmRingReader(char* base, uint64_t bytes, uint64_t capacity, uint64_t id)
    : base_(base),
      bytes_(bytes),
      capacity_(capacity),
      id_(id),
      header_(reinterpret_cast<RingHeader*>(base)),
      data_(base + 4096) {}

ShmRingReader::~ShmRingReader() {
  __atomic_store_n(&header_->waiting, 0u, __ATOMIC_SEQ_CST);
  munmap(base_, bytes_);
}

bool ShmRingReader::HasRecord() const {
  return __atomic_load_n(&header_->tail, __ATOMIC_ACQUIRE) !=
         __atomic_load_n(&header_->head, __ATOMIC_RELAXED);
}

StatusOr<bool> ShmRingReader::Read(std::vector<char>* record) {
  uint64_t head = __atomic_load_n(&header_->head, __ATOMIC_RELAXED);
  const uint64_t tail = __atomic_load_n(&header_->tail, __ATOMIC_ACQUIRE);
  if (head == tail) return false;
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("shared-memory ring " + std::to_string(id_) + ": " + what +
                                   " at position " + std::to_string(head));
  };
  if (tail - head > capacity_ || (head & 7) != 0) return bad("positions out of range");
  uint64_t at = head % capacity_;
  uint32_t len;
  std::memcpy(&len, data_ + at, sizeof(len));
  if (len == kWrap) {
    head += capacity_ - at;
    at = 0;
    if (head == tail) return bad("a wrap mark with no record after it");
    std::memcpy(&len, data_, sizeof(len));
  }
  const uint64_t need = kRecordHead + Round8(len);
  if (len > capacity_ / 2 - kRecordHead || at + need > capacity_ || head + need > tail) {
    return bad("a record of " + std::to_string(len) + " bytes");
  }
  record->assign(data_ + at + kRecordHead, data_ + at + kRecordHead + len);
  __atomic_store_n(&header_->head, head + need, __ATOMIC_RELEASE);
  return true;
}

bool ShmRingReader::Sleep() {
  __atomic_store_n(&header_->waiting, 1u, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&header_->tail, __ATOMIC_SEQ_CST) !=
         __atomic_load_n(&header_->head, __ATOMIC_RELAXED);
}

void ShmRingReader::Awake() { __atomic_store_n(&header_->waiting, 0u, __ATOMIC_RELAXED); }

bool ShmRingReader::Finished() const {
  return __atomic_load_n(&header_->closed, __ATOMIC_ACQUIRE) != 0 && !HasRecord();
}

}  // namespace net
}  // namespace kvtrain
