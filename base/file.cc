// Atomic file writes, whole-file reads, and checksummed checkpoint files.
#include "base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/crc32c.h"

namespace kvtrain {
namespace {

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// 64 random bits in hex, for names another process cannot guess.
std::string RandomHex() {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status WriteFileAtomic(const std::string& path, const std::string& bytes) {
  // An unpredictable name, created exclusively and never through a link: a
  // file or symlink planted at a guessed temporary name is neither followed
  // nor truncated.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    tmp = path + ".tmp." + std::to_string(getpid()) + "." + RandomHex();
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt >= 8)) {
      return Status::Unavailable(Errno("cannot create", tmp));
    }
  }
  // Every failure from here on removes the temporary file.
  auto fail = [&](const std::string& what) {
    const Status s = Status::Unavailable(Errno(what, tmp));
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    return s;
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("cannot write");
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) return fail("cannot fsync");
  const int closed = close(fd);
  fd = -1;
  if (closed != 0) return fail("cannot close");
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = Status::Unavailable(Errno("cannot rename " + tmp + " to", path));
    unlink(tmp.c_str());
    return s;
  }
  // The rename is durable only once the directory is: its errors are the
  // caller's too (the new file is in place, but may not survive a crash).
  const std::string dir = DirOf(path);
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return Status::Unavailable(Errno("cannot open the directory", dir));
  // EINVAL: the file system has no directory fsync (nothing to wait for).
  if (fsync(dfd) != 0 && errno != EINVAL) {
    const Status s = Status::Unavailable(Errno("cannot fsync the directory", dir));
    close(dfd);
    return s;
  }
  if (close(dfd) != 0) return Status::Unavailable(Errno("cannot close the directory", dir));
  return Status::OK();
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT ? Status::NotFound(path + " does not exist")
                           : Status::Unavailable(Errno("cannot open", path));
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const Status s = Status::Unavailable(Errno("cannot read", path));
      close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

namespace {

constexpr char kTrailerMagic[4] = {'K', 'V', 'C', '1'};
constexpr size_t kTrailerBytes = 8;

std::string Hex(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

Status WriteChecksummedFile(const std::string& path, const std::string& bytes) {
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  std::string out;
  out.reserve(bytes.size() + kTrailerBytes);
  out.append(bytes);
  out.append(kTrailerMagic, sizeof(kTrailerMagic));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(crc >> (8 * i)));
  return WriteFileAtomic(path, out);
}

StatusOr<std::string> StripChecksum(const std::string& path,
                                    std::string contents) {
  if (contents.size() < kTrailerBytes ||
      std::memcmp(contents.data() + contents.size() - kTrailerBytes,
                  kTrailerMagic, sizeof(kTrailerMagic)) != 0) {
    return Status::DataLoss(path +
                            ": no checksum trailer (cut short, corrupt, or "
                            "not written by this version of kvtrain)");
  }
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(
                  contents[contents.size() - 4 + i]))
              << (8 * i);
  }
  contents.resize(contents.size() - kTrailerBytes);
  const uint32_t actual = Crc32c(contents.data(), contents.size());
  if (actual != stored) {
    return Status::DataLoss(path + ": checksum mismatch (CRC32C " + Hex(actual) +
                            ", the file says " + Hex(stored) +
                            "): the file is corrupt");
  }
  return contents;
}

StatusOr<std::string> ReadChecksummedFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string contents, ReadWholeFile(path));
  return StripChecksum(path, std::move(contents));
}

}  // namespace kvtrain
