// A queue of messages in shared memory for a same-host link, so that a
// message from one process to another on this host costs one thread
// wake-up: the sending thread appends the message to a ring in a memfd it
// owns and, only if the receiving thread sleeps, writes one byte to that
// thread's doorbell (a pipe it polls). Through ZeroMQ the same message
// wakes both processes' I/O threads on its way, three hops instead of one.
//
// One writer (the connection's sender, serialised by its lock) and one
// reader (the receiving process's receive thread). The reader maps the ring
// through /proc/PID/fd/FD, which the kernel opens only to a process of the
// same user (as net/shm.h's arenas), and checks the ring's random id, which
// only the announcement over the same-host socket carries. The doorbell is
// the reader's pipe, which the writer opens the same way (read-write, so
// that a reader that died never raises SIGPIPE in the writer).
#ifndef KVTRAIN_NET_SHM_RING_H_
#define KVTRAIN_NET_SHM_RING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "net/shm.h"

namespace kvtrain {
namespace net {

// The ring's data bytes by default: small messages and descriptors only
// (large frames lie in the connection's arena).
inline constexpr uint64_t kShmRingBytes = uint64_t{1} << 20;

// Pieces of one record, concatenated in order.
using RingPieces = std::vector<std::pair<const void*, size_t>>;

struct RingHeader;

// The sending side. Not thread-safe: the caller serialises every call.
class ShmRingWriter {
 public:
  // A fresh ring of `capacity` data bytes (a power of two, at least 4 KiB).
  static StatusOr<std::unique_ptr<ShmRingWriter>> Create(uint64_t capacity = kShmRingBytes);
  ~ShmRingWriter();
  ShmRingWriter(const ShmRingWriter&) = delete;
  ShmRingWriter& operator=(const ShmRingWriter&) = delete;

  // What the reader needs to map it (offset and size unused).
  ShmRef ref() const;
  // The largest record Write takes: half the ring.
  size_t max_record() const;
  // Appends one record of `pieces`; false (nothing written) when the ring
  // has no room for it now, or it is above max_record().
  bool Write(const RingPieces& pieces);
  // After Write: wakes the reader if it sleeps. Unavailable names the
  // doorbell that could not be opened.
  Status WakeReader();
  // The reader has mapped the ring.
  bool ReaderAttached() const;
  // Every record written has been taken by the reader.
  bool Drained() const;
  // No record follows; the reader drops the ring once it has read the rest.
  void Close();

 private:
  ShmRingWriter(int fd, char* base, uint64_t bytes, uint64_t capacity, uint64_t id);

  const int fd_;
  char* const base_;
  const uint64_t bytes_;
  const uint64_t capacity_;
  const uint64_t id_;
  RingHeader* const header_;
  char* const data_;
  int bell_ = -1;  // the reader's doorbell, opened at the first wake-up
};

// The receiving side. Not thread-safe.
class ShmRingReader {
 public:
  // Maps the ring `ref` names and registers `bell_fd` (the write end of a
  // pipe of this process that its receive loop polls) as its doorbell.
  // InvalidArgument: `ref` names no ring (a wrong size or id);
  // Unavailable: /proc/PID/fd/FD cannot be opened or mapped (the message
  // names it and why).
  static StatusOr<std::unique_ptr<ShmRingReader>> Open(const ShmRef& ref, int bell_fd);
  ~ShmRingReader();
  ShmRingReader(const ShmRingReader&) = delete;
  ShmRingReader& operator=(const ShmRingReader&) = delete;

  // The next record, copied out (into *record, reused); false: none now.
  // InvalidArgument: a malformed record (the ring is unusable after it).
  StatusOr<bool> Read(std::vector<char>* record);
  // Whether a record waits.
  bool HasRecord() const;
  // Before sleeping on the doorbell: marks the reader asleep and returns
  // whether a record came meanwhile (then do not sleep). Awake() undoes it.
  bool Sleep();
  void Awake();
  // The writer closed the ring and every record has been read.
  bool Finished() const;
  uint64_t id() const { return id_; }

 private:
  ShmRingReader(char* base, uint64_t bytes, uint64_t capacity, uint64_t id);

  char* const base_;
  const uint64_t bytes_;
  const uint64_t capacity_;
  const uint64_t id_;
  RingHeader* const header_;
  const char* const data_;
};

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_SHM_RING_H_
