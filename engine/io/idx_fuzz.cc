// Fuzz target: the IDX reader (MNIST's format). Byte 0 picks whether the
// rest is parsed as is (ParseIdx) or read from a file (ReadIdxFile: the
// gzip path when the bytes start with gzip's magic), and (bit 1) whether
// every other row of the file is read too (ReadIdxRows).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/io/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    (void)kvtrain::ParseIdx(bytes, "fuzz.idx");
    return 0;
  }
  static const std::string path =
      "/tmp/kvtrain-idx-fuzz-" + std::to_string(getpid()) + ".idx";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  (void)kvtrain::ReadIdxFile(path);
  kvtrain::StatusOr<kvtrain::IdxInfo> info = kvtrain::ReadIdxInfo(path);
  if ((data[0] & 2) != 0 && info.ok()) {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < info->shape[0] && rows.size() < 64; r += 2) rows.push_back(r);
    (void)kvtrain::ReadIdxRows(path, rows);
  }
  std::remove(path.c_str());
  return 0;
}
