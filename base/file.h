// Whole-file reads and atomic writes (temp file + fsync + rename): a reader
// never sees a half-written file, and a crash mid-write leaves the previous
// version in place.
#ifndef KVTRAIN_BASE_FILE_H_
#define KVTRAIN_BASE_FILE_H_

#include <string>

#include "base/status.h"

namespace kvtrain {

// Writes `bytes` to `path` atomically: a new temporary file beside it
// (`path`.tmp.<pid>.<64 random bits>, created with O_EXCL|O_NOFOLLOW, so a
// planted file or symlink is never written through) is written, fsynced and
// closed, renamed over `path`, and the directory is fsynced. Any failure of
// those steps, closes and the directory's fsync included, is an error.
Status WriteFileAtomic(const std::string& path, const std::string& bytes);

// The whole file; NotFound when it does not exist.
StatusOr<std::string> ReadWholeFile(const std::string& path);

// Checkpoint files: WriteFileAtomic of `bytes` followed by an 8-byte
// trailer, "KVC1" and the CRC32C of `bytes` (little-endian).
Status WriteChecksummedFile(const std::string& path, const std::string& bytes);

// `contents` (a whole file read from `path`) without its trailer, once the
// checksum matches; DataLoss naming `path` when the trailer is missing (an
// older or foreign file, or one cut short) or the checksum differs (a
// corrupt file).
StatusOr<std::string> StripChecksum(const std::string& path,
                                    std::string contents);

// ReadWholeFile + StripChecksum.
StatusOr<std::string> ReadChecksummedFile(const std::string& path);

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_FILE_H_
