// The IDX file format (MNIST's): a 4-byte magic (0, 0, element type, number
// of dimensions), big-endian uint32 dimensions, then the elements, big-endian.
// Files may be gzipped. Every malformed input is an error naming the file.
#ifndef KVTRAIN_ENGINE_IO_IDX_H_
#define KVTRAIN_ENGINE_IO_IDX_H_

#include <string>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {

// Largest accepted element count (guards against absurd headers).
inline constexpr int64_t kIdxMaxElements = int64_t{1} << 34;

// Parses IDX bytes (not gzipped). `name` appears in error messages.
// Element types: 0x08 unsigned byte -> uint8, 0x0C int -> int32,
// 0x0D float -> float32, 0x0E double -> float64.
StatusOr<Tensor> ParseIdx(const std::string& bytes, const std::string& name);

// Reads an IDX file, gunzipping it when it starts with the gzip magic.
// Errors: missing file, bad magic, unknown type, truncated data (how many
// bytes the header promises and how many there are), trailing bytes.
StatusOr<Tensor> ReadIdxFile(const std::string& path);

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_IO_IDX_H_
