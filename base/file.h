// Whole-file reads and atomic writes (temp file + fsync + rename): a reader
// never sees a half-written file, and a crash mid-write leaves the previous
// version in place.
#ifndef KVTRAIN_BASE_FILE_H_
#define KVTRAIN_BASE_FILE_H_

#include <string>

#include "base/status.h"

namespace kvtrain {

// Writes `bytes` to `path` atomically: `path`.tmp.<pid> is written and
// fsynced, renamed over `path`, and the directory is fsynced.
Status WriteFileAtomic(const std::string& path, const std::string& bytes);

// The whole file; NotFound when it does not exist.
StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace kvtrain

#endif  // KVTRAIN_BASE_FILE_H_
