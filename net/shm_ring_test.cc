#include "net/shm_ring.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvtrain {
namespace net {
namespace {

std::string Str(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

struct Pipe {
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    close(r);
    close(w);
  }
  // Bytes waiting to be read (drains them).
  int Drain() {
    char buf[64];
    int n = 0;
    ssize_t got;
    while ((got = read(r, buf, sizeof(buf))) > 0) n += static_cast<int>(got);
    return n;
  }
  int r = -1, w = -1;
};

TEST(ShmRingTest, RecordsArriveWholeAndInOrderAcrossTheWrap) {
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok()) << w.status();
  Pipe bell;
  auto r = ShmRingReader::Open((*w)->ref(), bell.w);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*w)->ReaderAttached());
  std::vector<char> rec;
  int next_read = 0;
  // Records of 1..700 bytes, several times round the 4 KiB ring; the
  // reader lags by up to three records.
  for (int i = 0; i < 200; ++i) {
    const std::string a = "#" + std::to_string(i) + ":";
    const std::string b(static_cast<size_t>((i * 37) % 700), static_cast<char>('a' + i % 26));
    while (!(*w)->Write({{a.data(), a.size()}, {b.data(), b.size()}})) {
      ASSERT_TRUE((*r)->HasRecord()) << "the writer found no room in an empty ring";
      StatusOr<bool> got = (*r)->Read(&rec);
      ASSERT_TRUE(got.ok() && *got) << got.status();
      EXPECT_EQ(Str(rec).substr(0, Str(rec).find(':') + 1),
                "#" + std::to_string(next_read++) + ":");
    }
  }
  for (;;) {
    StatusOr<bool> got = (*r)->Read(&rec);
    ASSERT_TRUE(got.ok()) << got.status();
    if (!*got) break;
    const std::string s = Str(rec);
    const int i = next_read++;
    EXPECT_EQ(s, "#" + std::to_string(i) + ":" +
                     std::string(static_cast<size_t>((i * 37) % 700),
                                 static_cast<char>('a' + i % 26)));
  }
  EXPECT_EQ(next_read, 200);
  EXPECT_TRUE((*w)->Drained());
}

TEST(ShmRingTest, AFullRingAndAnOversizedRecordAreRefused) {
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->max_record(), 2048u - 8);
  const std::string big((*w)->max_record() + 1, 'x');
  EXPECT_FALSE((*w)->Write({{big.data(), big.size()}}));
  const std::string half((*w)->max_record(), 'y');
  EXPECT_TRUE((*w)->Write({{half.data(), half.size()}}));
  EXPECT_TRUE((*w)->Write({{half.data(), half.size()}}));
  EXPECT_FALSE((*w)->Write({{"z", 1}})) << "a full ring took one more record";
  EXPECT_FALSE((*w)->Drained());
  EXPECT_FALSE(ShmRingWriter::Create(5000).ok()) << "not a power of two";
}

TEST(ShmRingTest, TheWriterRingsOnlyASleepingReader) {
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  Pipe bell;
  auto r = ShmRingReader::Open((*w)->ref(), bell.w);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*w)->Write({{"a", 1}}));
  ASSERT_TRUE((*w)->WakeReader().ok());
  EXPECT_EQ(bell.Drain(), 0) << "woke a reader that was not asleep";
  EXPECT_TRUE((*r)->Sleep()) << "a waiting record must keep the reader up";
  (*r)->Awake();
  std::vector<char> rec;
  ASSERT_TRUE(*(*r)->Read(&rec));
  EXPECT_FALSE((*r)->Sleep());
  ASSERT_TRUE((*w)->Write({{"b", 1}}));
  ASSERT_TRUE((*w)->WakeReader().ok());
  EXPECT_EQ(bell.Drain(), 1);
  (*r)->Awake();
  ASSERT_TRUE(*(*r)->Read(&rec));
  EXPECT_EQ(Str(rec), "b");
}

// The doorbell's process and descriptor come from the ring's memory, which
// the reader can write: a reader that names another process of this user
// (here a child holding a pipe, forked before the ring existed) must not
// make the writer write into that process's pipe.
TEST(ShmRingTest, TheDoorbellOfAProcessThatIsNotTheReaderIsNotRung) {
  Pipe to_parent, to_child;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Pipe mine;
    if (write(to_parent.w, &mine.w, sizeof(mine.w)) != sizeof(mine.w)) _exit(2);
    pollfd p{to_child.r, POLLIN, 0};
    poll(&p, 1, 30000);  // until the parent has tried
    char got = 0;
    _exit(read(mine.r, &got, 1) == 1 ? 1 : 0);
  }
  int child_fd = -1;
  pollfd p{to_parent.r, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 30000), 1);
  ASSERT_EQ(read(to_parent.r, &child_fd, sizeof(child_fd)),
            static_cast<ssize_t>(sizeof(child_fd)));
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  // A reader that maps the ring and says the child is the one asleep.
  std::string path;
  StatusOr<char*> base = MapPeerSharedMemory(getpid(), (*w)->ref().fd, (*w)->ref().arena_bytes,
                                             "shared-memory ring", &path);
  ASSERT_TRUE(base.ok()) << base.status();
  const uint32_t waiting = 1;
  const int32_t pid = child;
  std::memcpy(*base + 136, &waiting, 4);
  std::memcpy(*base + 140, &pid, 4);
  std::memcpy(*base + 144, &child_fd, 4);
  const Status rung = (*w)->WakeReader();
  EXPECT_EQ(rung.code(), Status::Code::kInvalidArgument) << rung;
  EXPECT_NE(rung.message().find("has not mapped it"), std::string::npos) << rung;
  const char go = 1;
  ASSERT_EQ(write(to_child.w, &go, 1), 1);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the writer rang the child's pipe";
  munmap(*base, (*w)->ref().arena_bytes);
}

TEST(ShmRingTest, AnotherProcessWritesAndWakes) {
  Pipe bell;
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child makes the ring, announces it, and writes 2000 records,
    // waking the parent whenever it sleeps.
    auto w = ShmRingWriter::Create(1 << 16);
    if (!w.ok()) _exit(4);
    const std::string hello = EncodeRingHello((*w)->ref());
    if (write(to_parent[1], hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) {
      _exit(5);
    }
    char go;
    if (read(to_child[0], &go, 1) != 1) _exit(3);
    for (int i = 0; i < 2000; ++i) {
      const std::string s = std::to_string(i);
      while (!(*w)->Write({{s.data(), s.size()}})) usleep(50);
      if (!(*w)->WakeReader().ok()) _exit(2);
    }
    (*w)->Close();
    while (!(*w)->Drained()) usleep(100);
    _exit(0);
  }
  char hello[64];
  const ssize_t n = read(to_parent[0], hello, sizeof(hello));
  ShmRef ref;
  ASSERT_TRUE(DecodeRingHello(hello, static_cast<size_t>(std::max<ssize_t>(n, 0)), &ref).ok());
  EXPECT_EQ(ref.pid, child);
  auto r = ShmRingReader::Open(ref, bell.w);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  std::vector<char> rec;
  int next = 0;
  while (!(*r)->Finished()) {
    StatusOr<bool> got = (*r)->Read(&rec);
    ASSERT_TRUE(got.ok()) << got.status();
    if (*got) {
      ASSERT_EQ(Str(rec), std::to_string(next)) << "out of order";
      ++next;
      continue;
    }
    if (!(*r)->Sleep()) {
      pollfd p{bell.r, POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, 5000), 1) << "a sleeping reader was never woken (record " << next
                                      << ")";
    }
    (*r)->Awake();
    bell.Drain();
  }
  EXPECT_EQ(next, 2000);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) close(fd);
}

TEST(ShmRingTest, AWrongAnnouncementNamesNoRing) {
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  Pipe bell;
  ShmRef ref = (*w)->ref();
  ref.arena_id ^= 1;
  StatusOr<std::unique_ptr<ShmRingReader>> r = ShmRingReader::Open(ref, bell.w);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not hold the ring"), std::string::npos) << r.status();
  ref = (*w)->ref();
  ref.fd = 999999;
  r = ShmRingReader::Open(ref, bell.w);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/fd/999999"), std::string::npos) << r.status();
  ref = (*w)->ref();
  ref.arena_bytes = 1;
  EXPECT_FALSE(ShmRingReader::Open(ref, bell.w).ok());
  EXPECT_FALSE((*w)->ReaderAttached());

  ShmRef back;
  const std::string hello = EncodeRingHello((*w)->ref());
  ASSERT_TRUE(IsRingHello(hello.data(), hello.size()));
  ASSERT_TRUE(DecodeRingHello(hello.data(), hello.size(), &back).ok());
  EXPECT_EQ(back.pid, (*w)->ref().pid);
  EXPECT_EQ(back.fd, (*w)->ref().fd);
  EXPECT_EQ(back.arena_id, (*w)->ref().arena_id);
  EXPECT_EQ(back.arena_bytes, (*w)->ref().arena_bytes);
  EXPECT_FALSE(DecodeRingHello(hello.data(), hello.size() - 1, &back).ok());
  EXPECT_FALSE(IsRingHello("KVS1xxxx", 8));
}

// Another user can neither map a ring, with its announcement in hand, nor
// ring its reader's doorbell.
TEST(ShmRingTest, AnotherUserCannotOpenARingOrADoorbell) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run a process as nobody";
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  Pipe bell;
  const ShmRef ref = (*w)->ref();
  const std::string door = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(bell.w);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(4);
    Pipe own;
    StatusOr<std::unique_ptr<ShmRingReader>> r = ShmRingReader::Open(ref, own.w);
    if (r.ok()) _exit(1);
    if (r.status().code() != Status::Code::kUnavailable ||
        r.status().message().find("Permission denied") == std::string::npos) {
      _exit(2);
    }
    _exit(open(door.c_str(), O_RDWR | O_NONBLOCK) < 0 && errno == EACCES ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: opened the ring; 2: another error; 3: rang the bell";
  EXPECT_FALSE((*w)->ReaderAttached());
}

TEST(ShmRingTest, AMalformedRecordIsAnError) {
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  Pipe bell;
  auto r = ShmRingReader::Open((*w)->ref(), bell.w);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*w)->Write({{"hello", 5}}));
  // Corrupt the record's length through a mapping of our own.
  const ShmRef ref = (*w)->ref();
  const int fd = open(("/proc/self/fd/" + std::to_string(ref.fd)).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* base = mmap(nullptr, ref.arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(base, MAP_FAILED);
  const uint32_t huge = 1 << 20;
  std::memcpy(static_cast<char*>(base) + 4096, &huge, sizeof(huge));
  std::vector<char> rec;
  StatusOr<bool> got = (*r)->Read(&rec);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("a record of 1048576 bytes"), std::string::npos)
      << got.status();
  munmap(base, ref.arena_bytes);
}

TEST(ShmRingTest, AClosedRingFinishesOnceRead) {
  auto w = ShmRingWriter::Create(4096);
  ASSERT_TRUE(w.ok());
  Pipe bell;
  auto r = ShmRingReader::Open((*w)->ref(), bell.w);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE((*w)->Write({{"last", 4}}));
  (*w)->Close();
  EXPECT_FALSE((*r)->Finished());
  std::vector<char> rec;
  ASSERT_TRUE(*(*r)->Read(&rec));
  EXPECT_TRUE((*r)->Finished());
  EXPECT_TRUE((*w)->Drained());
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
