// IDX parsing and (gzipped) file reading.
#include "engine/io/idx.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
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

// Turns the tensor's big-endian elements, as read, into host order.
void ToHostOrder(const IdxHeader& h, Tensor* t) {
  unsigned char* p = static_cast<unsigned char*>(t->raw_data());
  const size_t n = t->size(), es = h.elem_size;
  for (size_t i = 0; es > 1 && i < n; ++i) std::reverse(p + i * es, p + (i + 1) * es);
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

// Reads up to `n` bytes at `offset`; returns how many were read.
StatusOr<size_t> PreadSome(int fd, unsigned char* buf, size_t n, size_t offset,
                           const std::string& path) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, buf + done, std::min<size_t>(n - done, 1u << 30),
                            static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::DataLoss(path + ": read failed: " + std::strerror(errno));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

// Deflate's largest compression ratio: a gzipped file of S bytes holds at
// most 1032 S bytes (plus a little for short files).
constexpr size_t kGzipMaxRatio = 1032;

// A tensor in a memory mapping of its own, unmapped when its last view
// goes. A worker frees its part and reads the next every epoch: taken from
// malloc's heap, the freed part's pages stayed resident beside the next
// part's (a 4-worker job's workers held two parts after 3 epochs).
StatusOr<Tensor> MappedTensor(const Shape& shape, DType dtype, const std::string& path) {
  const size_t bytes = shape.NumElements() * DTypeSize(dtype);
  if (bytes == 0) return Tensor::Empty(shape, dtype);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status::Internal(path + ": no memory for " + std::to_string(bytes) +
                            " bytes of data: " + std::strerror(errno));
  }
  return Tensor::Wrap(p, shape, dtype, Device::CPU(), [p, bytes] { munmap(p, bytes); });
}

// The rows wanted: every row of the file, or a caller's ascending list.
struct RowList {
  const std::vector<int64_t>* rows;  // null: every row
  int64_t all;
  int64_t size() const { return rows ? static_cast<int64_t>(rows->size()) : all; }
  int64_t operator[](int64_t j) const { return rows ? (*rows)[j] : j; }
  // The end of the run of consecutive rows that starts at the j-th.
  int64_t RunEnd(int64_t j) const {
    if (rows == nullptr) return all;
    int64_t k = j + 1;
    while (k < size() && (*rows)[k] == (*rows)[k - 1] + 1) ++k;
    return k;
  }
};

// An open IDX file, its header read: a plain file read at offsets or a
// gzipped one read in order.
class IdxFile {
 public:
  static StatusOr<std::unique_ptr<IdxFile>> Open(const std::string& path) {
    std::unique_ptr<IdxFile> f(new IdxFile(path));
    f->fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (f->fd_ < 0 || fstat(f->fd_, &st) != 0) {
      return Status::NotFound(path + ": cannot open: " + std::strerror(errno));
    }
    f->file_bytes_ = static_cast<size_t>(st.st_size);
    unsigned char magic[2];
    KV_ASSIGN_OR_RETURN(size_t got, PreadSome(f->fd_, magic, 2, 0, path));
    if (got == 2 && magic[0] == 0x1F && magic[1] == 0x8B) {
      f->gz_ = gzdopen(f->fd_, "rb");
      if (f->gz_ == nullptr) {
        return Status::Internal(path + ": cannot start decompressing");
      }
      f->fd_ = -1;  // gzclose closes it
    }
    KV_RETURN_IF_ERROR(f->ReadHeader());
    return f;
  }

  ~IdxFile() {
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) close(fd_);
  }

  const IdxHeader& header() const { return h_; }

  // The rows of `rows` as a tensor of (rows.size(), dims[1:]).
  StatusOr<Tensor> ReadRows(const RowList& rows) {
    for (int64_t j = 0; rows.rows != nullptr && j < rows.size(); ++j) {
      if (rows[j] < 0 || rows[j] >= h_.shape[0] || (j > 0 && rows[j] <= rows[j - 1])) {
        return Status::InvalidArgument(
            path_ + ": rows to read must ascend within the " +
            std::to_string(h_.shape[0]) + " the header gives; row " + std::to_string(j) +
            " is " + std::to_string(rows[j]));
      }
    }
    std::vector<int64_t> dims = h_.shape.dims();
    dims[0] = rows.size();
    const Shape shape(std::move(dims));
    return gz_ != nullptr ? ReadGzipped(rows, shape) : ReadPlain(rows, shape);
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;

  explicit IdxFile(std::string path) : path_(std::move(path)) {}

  StatusOr<size_t> Read(unsigned char* buf, size_t n, size_t offset) {
    return gz_ != nullptr ? ReadSome(gz_, buf, n, path_)
                          : PreadSome(fd_, buf, n, offset, path_);
  }

  Status ReadHeader() {
    unsigned char head[4 + 4 * 8];
    KV_ASSIGN_OR_RETURN(size_t got, Read(head, 4, 0));
    KV_ASSIGN_OR_RETURN(size_t header_bytes, HeaderSize(head, got, path_));
    KV_ASSIGN_OR_RETURN(size_t more, Read(head + 4, header_bytes - 4, 4));
    KV_ASSIGN_OR_RETURN(h_, ParseHeader(head, got + more, path_));
    data_bytes_ = h_.shape.NumElements() * h_.elem_size;
    row_bytes_ = h_.shape[0] == 0 ? 0 : data_bytes_ / h_.shape[0];
    if (gz_ != nullptr) return Status::OK();
    // A plain file's size tells truncation and trailing bytes at once.
    const size_t have = file_bytes_ - h_.header_bytes;
    if (have < data_bytes_) return Truncated(have);
    if (have > data_bytes_) return Trailing();
    return Status::OK();
  }

  Status Truncated(size_t have) const {
    return Status::DataLoss(path_ + ": truncated: " + DataDescription(h_, data_bytes_) +
                            " but only " + std::to_string(have) + " follow");
  }

  Status Trailing() const {
    return Status::DataLoss(path_ + ": unexpected bytes after the data (" +
                            DataDescription(h_, data_bytes_) + ")");
  }

  // Runs of consecutive rows, one read each.
  StatusOr<Tensor> ReadPlain(const RowList& rows, const Shape& shape) {
    KV_ASSIGN_OR_RETURN(Tensor out, MappedTensor(shape, h_.dtype, path_));
    unsigned char* dst = static_cast<unsigned char*>(out.raw_data());
    for (int64_t j = 0, k; j < rows.size(); j = k) {
      k = rows.RunEnd(j);
      const size_t n = (k - j) * row_bytes_;
      const size_t at = h_.header_bytes + rows[j] * row_bytes_;
      KV_ASSIGN_OR_RETURN(size_t got, Read(dst + j * row_bytes_, n, at));
      if (got < n) return Truncated(at + got - h_.header_bytes);  // it shrank
    }
    ToHostOrder(h_, &out);
    return out;
  }

  // The whole stream, a chunk at a time, keeping the rows wanted.
  StatusOr<Tensor> ReadGzipped(const RowList& rows, const Shape& shape) {
    // A header promising more than the file can hold is a truncated file:
    // counted to its end for the message, with nothing allocated for it.
    const bool can_hold = data_bytes_ <= kGzipMaxRatio * file_bytes_ + kChunk;
    Tensor out;
    unsigned char* dst = nullptr;
    if (can_hold) {
      KV_ASSIGN_OR_RETURN(out, MappedTensor(shape, h_.dtype, path_));
      dst = static_cast<unsigned char*>(out.raw_data());
    }
    std::vector<unsigned char> buf(kChunk);
    size_t pos = 0;                      // data bytes read so far
    int64_t j = 0, k = rows.RunEnd(0);  // the run of rows wanted next
    while (pos < data_bytes_) {
      const size_t want = std::min(data_bytes_ - pos, kChunk);
      KV_ASSIGN_OR_RETURN(size_t got, Read(buf.data(), want, 0));
      const size_t end = pos + got;
      while (dst != nullptr && j < rows.size()) {
        const size_t run_begin = rows[j] * row_bytes_;
        const size_t run_end = run_begin + (k - j) * row_bytes_;
        if (run_begin >= end) break;
        const size_t from = std::max(run_begin, pos), to = std::min(run_end, end);
        std::memcpy(dst + j * row_bytes_ + (from - run_begin), buf.data() + (from - pos),
                    to - from);
        if (run_end > end) break;  // its rest is in the next chunk
        j = k;
        if (j < rows.size()) k = rows.RunEnd(j);
      }
      pos = end;
      if (got < want) break;
    }
    if (pos < data_bytes_) return Truncated(pos);
    KV_ASSIGN_OR_RETURN(size_t trailing, Read(buf.data(), 64, 0));
    if (trailing > 0) return Trailing();
    if (!can_hold) {
      return Status::Internal(path_ + ": decompressed to more than deflate allows");
    }
    ToHostOrder(h_, &out);
    return out;
  }

  const std::string path_;
  int fd_ = -1;
  gzFile gz_ = nullptr;
  size_t file_bytes_ = 0;
  IdxHeader h_;
  size_t data_bytes_ = 0;
  size_t row_bytes_ = 0;
};

}  // namespace

StatusOr<Tensor> ReadIdxFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<IdxFile> f, IdxFile::Open(path));
  return f->ReadRows(RowList{nullptr, f->header().shape[0]});
}

StatusOr<IdxInfo> ReadIdxInfo(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<IdxFile> f, IdxFile::Open(path));
  return IdxInfo{f->header().dtype, f->header().shape};
}

StatusOr<Tensor> ReadIdxRows(const std::string& path, const std::vector<int64_t>& rows) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<IdxFile> f, IdxFile::Open(path));
  return f->ReadRows(RowList{&rows, 0});
}

}  // namespace kvtrain
