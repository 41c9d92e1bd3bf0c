// The IDX file format (MNIST's): a 4-byte magic (0, 0, element type, number
// of dimensions), big-endian uint32 dimensions, then the elements, big-endian.
// Files may be gzipped. Every malformed input is an error naming the file.
#ifndef KVTRAIN_ENGINE_IO_IDX_H_
#define KVTRAIN_ENGINE_IO_IDX_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {

// Largest accepted element count (guards against absurd headers).
inline constexpr int64_t kIdxMaxElements = int64_t{1} << 34;

// What an IDX header says: the element type and the dimensions.
struct IdxInfo {
  DType dtype = DType::kUInt8;
  Shape shape;
};

// Parses IDX bytes (not gzipped). `name` appears in error messages.
// Element types: 0x08 unsigned byte -> uint8, 0x0C int -> int32,
// 0x0D float -> float32, 0x0E double -> float64.
StatusOr<Tensor> ParseIdx(const std::string& bytes, const std::string& name);

// Reads an IDX file, gunzipping it when it starts with the gzip magic.
// Errors: missing file, bad magic, unknown type, truncated data (how many
// bytes the header promises and how many there are), trailing bytes.
StatusOr<Tensor> ReadIdxFile(const std::string& path);

// Reads only the header of an IDX file (gzipped or not), with the errors of
// ReadIdxFile that the header alone shows.
StatusOr<IdxInfo> ReadIdxInfo(const std::string& path);

// Reads the slices `rows` (indices along the first dimension, ascending,
// none repeated) of an IDX file: a tensor of (rows.size(), dims[1:]), holding
// no more than those rows and a buffer of the file. A plain file is read
// only at the rows' offsets, its size checked against the header; a gzipped
// one is decompressed in chunks to its end, keeping only those rows. The
// errors of ReadIdxFile, and InvalidArgument for rows out of order or past
// the first dimension. The tensor (as ReadIdxFile's) has a memory mapping of
// its own, given back to the system when its last view goes.
StatusOr<Tensor> ReadIdxRows(const std::string& path,
                             const std::vector<int64_t>& rows);

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_IO_IDX_H_
