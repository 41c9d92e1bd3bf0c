// IDX parsing and (gzipped) file reading.
#include "engine/io/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace kvtrain {
namespace {

struct IdxHeader {
  DType dtype;
  size_t elem_size;
  Shape shape;
  size_t header_bytes;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string Hex(unsigned v) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02X", v & 0xFF);
  return buf;
}

// Validates the 4-byte prefix; returns the whole header's size.
StatusOr<size_t> HeaderSize(const unsigned char* p, size_t available,
                            const std::string& name) {
  if (available < 4) {
    return Status::DataLoss(name + ": truncated: " + std::to_string(available) +
                            " bytes, an IDX header needs at least 4");
  }
  if (p[0] != 0 || p[1] != 0) {
    return Status::DataLoss(name + ": bad magic " + Hex(p[0]) + " " +
                            Hex(p[1]) + ": an IDX file starts with two zero "
                            "bytes (is it an IDX file?)");
  }
  if (p[2] != 0x08 && p[2] != 0x0C && p[2] != 0x0D && p[2] != 0x0E) {
    return Status::DataLoss(name + ": unsupported IDX element type " +
                            Hex(p[2]) + " (supported: 0x08 ubyte, 0x0C int, "
                            "0x0D float, 0x0E double)");
  }
  const int ndim = p[3];
  if (ndim < 1 || ndim > 8) {
    return Status::DataLoss(name + ": " + std::to_string(ndim) +
                            " dimensions in the header; expected 1 to 8");
  }
  return 4 + 4 * static_cast<size_t>(ndim);
}

// Parses the whole header from the first `available` bytes.
StatusOr<IdxHeader> ParseHeader(const unsigned char* p, size_t available,
                                const std::string& name) {
  IdxHeader h;
  KV_ASSIGN_OR_RETURN(h.header_bytes, HeaderSize(p, available, name));
  const int ndim = p[3];
  if (available < h.header_bytes) {
    return Status::DataLoss(name + ": truncated header: " +
                            std::to_string(ndim) + " dimensions need " +
                            std::to_string(h.header_bytes) + " bytes, file has " +
                            std::to_string(available));
  }
  h.dtype = p[2] == 0x08   ? DType::kUInt8
            : p[2] == 0x0C ? DType::kInt32
            : p[2] == 0x0D ? DType::kFloat32
                           : DType::kFloat64;
  h.elem_size = DTypeSize(h.dtype);
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    const int64_t d = BigEndian32(p + 4 + 4 * i);
    dims.push_back(d);
    if (d > 0 && count > kIdxMaxElements / d) {
      return Status::DataLoss(name + ": header dimensions " +
                              Shape(dims).ToString() + " are too large");
    }
    count *= d;
  }
  h.shape = Shape(std::move(dims));
  return h;
}

// Copies big-endian elements into the tensor in host order.
void CopyElements(const unsigned char* src, const IdxHeader& h, Tensor* out) {
  unsigned char* dst = static_cast<unsigned char*>(out->raw_data());
  const size_t n = out->size(), es = h.elem_size;
  if (es == 1) {
    std::memcpy(dst, src, n);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < es; ++b) dst[i * es + b] = src[i * es + es - 1 - b];
  }
}

std::string DataDescription(const IdxHeader& h, size_t data_bytes) {
  return "header says " + h.shape.ToString() + " " + DTypeName(h.dtype) +
         " (" + std::to_string(data_bytes) + " bytes of data)";
}

}  // namespace

StatusOr<Tensor> ParseIdx(const std::string& bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  KV_ASSIGN_OR_RETURN(IdxHeader h, ParseHeader(p, bytes.size(), name));
  const size_t data_bytes = h.shape.NumElements() * h.elem_size;
  const size_t have = bytes.size() - h.header_bytes;
  if (have < data_bytes) {
    return Status::DataLoss(name + ": truncated: " + DataDescription(h, data_bytes) +
                            " but only " + std::to_string(have) + " follow");
  }
  if (have > data_bytes) {
    return Status::DataLoss(name + ": " + std::to_string(have - data_bytes) +
                            " unexpected bytes after the data (" +
                            DataDescription(h, data_bytes) + ")");
  }
  Tensor out = Tensor::Empty(h.shape, h.dtype);
  CopyElements(p + h.header_bytes, h, &out);
  return out;
}

namespace {

// Reads up to `n` bytes; returns how many were read.
StatusOr<size_t> ReadSome(gzFile f, unsigned char* buf, size_t n,
                          const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int r = gzread(f, buf + done, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      return Status::DataLoss(path + ": corrupt compressed data: " +
                              (msg ? msg : "unknown zlib error"));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace

StatusOr<Tensor> ReadIdxFile(const std::string& path) {
  // gzread reads plain files as they are, so one path serves both.
  std::unique_ptr<gzFile_s, int (*)(gzFile)> f(gzopen(path.c_str(), "rb"),
                                               gzclose);
  if (!f) {
    return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
  }
  unsigned char head[4 + 4 * 8];
  KV_ASSIGN_OR_RETURN(size_t got, ReadSome(f.get(), head, 4, path));
  KV_ASSIGN_OR_RETURN(size_t header_bytes, HeaderSize(head, got, path));
  KV_ASSIGN_OR_RETURN(size_t more,
                      ReadSome(f.get(), head + 4, header_bytes - 4, path));
  KV_ASSIGN_OR_RETURN(IdxHeader h, ParseHeader(head, got + more, path));
  const size_t data_bytes = h.shape.NumElements() * h.elem_size;
  // Grow the buffer as data arrives: a short file whose header claims
  // gigabytes must not allocate them.
  constexpr size_t kChunk = size_t{64} << 20;
  std::string data;
  size_t have = 0;
  while (have < data_bytes) {
    const size_t want = std::min(data_bytes - have, kChunk);
    data.resize(have + want);
    KV_ASSIGN_OR_RETURN(
        size_t got,
        ReadSome(f.get(), reinterpret_cast<unsigned char*>(data.data()) + have,
                 want, path));
    have += got;
    if (got < want) break;
  }
  if (have < data_bytes) {
    return Status::DataLoss(path + ": truncated: " + DataDescription(h, data_bytes) +
                            " but only " + std::to_string(have) + " follow");
  }
  unsigned char extra[64];
  KV_ASSIGN_OR_RETURN(size_t trailing, ReadSome(f.get(), extra, sizeof(extra), path));
  if (trailing > 0) {
    return Status::DataLoss(path + ": unexpected bytes after the data (" +
                            DataDescription(h, data_bytes) + ")");
  }
  Tensor out = Tensor::Empty(h.shape, h.dtype);
  CopyElements(reinterpret_cast<const unsigned char*>(data.data()), h, &out);
  return out;
}

}  // namespace kvtrain
