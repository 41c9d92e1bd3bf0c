// LibSVM text parsing, the binary form, and the readers of both.
#include "engine/io/libsvm.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "base/file.h"

namespace kvtrain {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the binary LibSVM form is little-endian and its arrays are "
              "copied as they lie in memory");

void SparseBatch::Clear() {
  labels.clear();
  offsets.assign(1, 0);
  ids.clear();
  values.clear();
}

namespace {

constexpr uint32_t kBinaryVersion = 1;
constexpr size_t kHeaderBytes = 32;  // magic, version, 0, rows, ids

Status CheckOptions(const std::string& path, const LibSvmOptions& o) {
  if (o.batch_size < 1) {
    return Status::InvalidArgument(path +
                                   ": batch size must be at least 1, got " +
                                   std::to_string(o.batch_size));
  }
  if (o.num_parts < 1 || o.part_index < 0 || o.part_index >= o.num_parts) {
    return Status::InvalidArgument(
        path + ": part_index " + std::to_string(o.part_index) +
        " is not in [0, num_parts=" + std::to_string(o.num_parts) + ")");
  }
  return Status::OK();
}

// Rows [begin, end) of `src` into `dst`, offsets starting at 0.
void CopyRows(const SparseBatch& src, int64_t begin, int64_t end,
              SparseBatch* dst) {
  const int64_t first = src.offsets[begin], last = src.offsets[end];
  dst->labels.assign(src.labels.begin() + begin, src.labels.begin() + end);
  dst->offsets.resize(end - begin + 1);
  for (int64_t r = begin; r <= end; ++r)
    dst->offsets[r - begin] = src.offsets[r] - first;
  dst->ids.assign(src.ids.begin() + first, src.ids.begin() + last);
  dst->values.assign(src.values.begin() + first, src.values.begin() + last);
}

// ---------------------------------------------------------------- text

bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
         c == '\f';
}

// A token for an error message, cut when long.
std::string Quote(std::string_view token) {
  constexpr size_t kMax = 48;
  if (token.size() > kMax)
    return "\"" + std::string(token.substr(0, kMax)) + "...\"";
  return "\"" + std::string(token) + "\"";
}

enum class Parsed { kOk, kNotNumber, kNotFinite };

// The whole of `s` as a finite float ("+1" as well: LibSVM labels).
Parsed ParseFloat(std::string_view s, float* out) {
  if (s.size() > 1 && s[0] == '+' && s[1] != '-' && s[1] != '+')
    s.remove_prefix(1);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || end != s.data() + s.size()) return Parsed::kNotNumber;
  if (ec == std::errc::result_out_of_range) return Parsed::kNotFinite;
  if (ec != std::errc()) return Parsed::kNotNumber;
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
    return Parsed::kNotFinite;
  }
  *out = static_cast<float>(v);
  return Parsed::kOk;
}

// Where a line is, for error messages: "path:line: ".
struct Where {
  const std::string& path;
  int64_t line;
  std::string operator()() const {
    return path + ":" + std::to_string(line) + ": ";
  }
};

Status ParseFeature(std::string_view token, const Where& where,
                    SparseBatch* out) {
  const size_t colon = token.find(':');
  if (colon == std::string_view::npos) {
    return Status::DataLoss(where() + "feature " + Quote(token) +
                            " is not id:value");
  }
  const std::string_view id_text = token.substr(0, colon);
  const std::string_view value_text = token.substr(colon + 1);
  int64_t id = 0;
  const auto [end, ec] =
      std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
  const bool whole = !id_text.empty() && end == id_text.data() + id_text.size();
  if (!whole || (ec != std::errc() && id_text[0] != '-')) {
    return Status::DataLoss(where() + "feature " + Quote(token) + ": id " +
                            Quote(id_text) + " is not a 64-bit integer");
  }
  if (ec != std::errc() || id < 0) {
    return Status::DataLoss(where() + "feature " + Quote(token) + ": id " +
                            Quote(id_text) + " is negative");
  }
  float value = 0;
  const Parsed p = ParseFloat(value_text, &value);
  if (p != Parsed::kOk) {
    return Status::DataLoss(
        where() + "feature " + Quote(token) + ": value " + Quote(value_text) +
        (p == Parsed::kNotNumber ? " is not a number"
                                 : " is not a finite float"));
  }
  out->ids.push_back(id);
  out->values.push_back(value);
  return Status::OK();
}

// Appends the row on `line` (not blank) to `out`; on error `out` is as it was.
Status ParseLine(std::string_view line, const Where& where, SparseBatch* out) {
  const size_t ids_before = out->ids.size();
  auto fail = [&](Status s) {
    out->ids.resize(ids_before);
    out->values.resize(ids_before);
    return s;
  };
  size_t pos = 0;
  auto next_token = [&]() {
    while (pos < line.size() && IsBlank(line[pos])) ++pos;
    const size_t start = pos;
    while (pos < line.size() && !IsBlank(line[pos])) ++pos;
    return line.substr(start, pos - start);
  };
  const std::string_view label_text = next_token();
  float label = 0;
  const Parsed p = ParseFloat(label_text, &label);
  if (p != Parsed::kOk) {
    return Status::DataLoss(where() + "label " + Quote(label_text) +
                            (p == Parsed::kNotNumber
                                 ? " is not a number"
                                 : " is not a finite float"));
  }
  for (std::string_view t = next_token(); !t.empty(); t = next_token()) {
    const Status s = ParseFeature(t, where, out);
    if (!s.ok()) return fail(s);
  }
  out->labels.push_back(label);
  out->offsets.push_back(static_cast<int64_t>(out->ids.size()));
  return Status::OK();
}

bool BlankLine(std::string_view line) {
  for (char c : line) {
    if (!IsBlank(c)) return false;
  }
  return true;
}

using File = std::unique_ptr<FILE, int (*)(FILE*)>;

StatusOr<File> OpenFile(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) {
    return errno == ENOENT
               ? Status::NotFound(path + " does not exist")
               : Status::Unavailable(path +
                                     ": cannot open: " + std::strerror(errno));
  }
  return f;
}

// Streams the lines of a text file, parsing only its part's rows.
class TextReader : public LibSvmReader {
 public:
  TextReader(const std::string& path, const LibSvmOptions& opts, File file)
      : LibSvmReader(path), opts_(opts), file_(std::move(file)) {}
  ~TextReader() override { std::free(buf_); }

  StatusOr<bool> Next(SparseBatch* batch) override {
    batch->Clear();
    while (true) {
      const ssize_t n = getline(&buf_, &cap_, file_.get());
      if (n < 0) break;
      ++line_;
      const std::string_view line(buf_, static_cast<size_t>(n));
      if (BlankLine(line)) continue;
      const int64_t row = row_++;
      if ((row / opts_.batch_size) % opts_.num_parts != opts_.part_index) {
        continue;  // another part's row
      }
      KV_RETURN_IF_ERROR(ParseLine(line, Where{path(), line_}, batch));
      if (batch->rows() == opts_.batch_size) return true;
    }
    if (std::ferror(file_.get())) {
      return Status::Unavailable(path() +
                                 ": cannot read: " + std::strerror(errno));
    }
    if (batch->rows() > 0 && !opts_.drop_last) return true;
    batch->Clear();
    return false;
  }

  Status Reset() override {
    if (std::fseek(file_.get(), 0, SEEK_SET) != 0) {
      return Status::Unavailable(path() +
                                 ": cannot seek: " + std::strerror(errno));
    }
    std::clearerr(file_.get());
    line_ = 0;
    row_ = 0;
    return Status::OK();
  }

 private:
  const LibSvmOptions opts_;
  File file_;
  char* buf_ = nullptr;  // getline's buffer
  size_t cap_ = 0;
  int64_t line_ = 0;  // lines read this epoch
  int64_t row_ = 0;   // rows (lines not blank) seen this epoch
};

// -------------------------------------------------------------- binary

template <typename T>
void AppendArray(const std::vector<T>& v, std::string* out) {
  out->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
void AppendScalar(T v, std::string* out) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string EncodeBinary(const SparseBatch& b) {
  std::string out;
  out.reserve(kHeaderBytes + b.labels.size() * 4 + b.offsets.size() * 8 +
              b.ids.size() * 12);
  out.append(kLibSvmBinaryMagic, sizeof(kLibSvmBinaryMagic));
  AppendScalar<uint32_t>(kBinaryVersion, &out);
  AppendScalar<uint32_t>(0, &out);
  AppendScalar<int64_t>(b.rows(), &out);
  AppendScalar<int64_t>(static_cast<int64_t>(b.ids.size()), &out);
  AppendArray(b.labels, &out);
  AppendArray(b.offsets, &out);
  AppendArray(b.ids, &out);
  AppendArray(b.values, &out);
  return out;
}

// Reads `n` values of T at *pos, advancing it (the size is checked before).
template <typename T>
void TakeArray(const std::string& bytes, size_t* pos, int64_t n,
               std::vector<T>* out) {
  out->resize(n);
  std::memcpy(out->data(), bytes.data() + *pos, n * sizeof(T));
  *pos += n * sizeof(T);
}

template <typename T>
T TakeScalar(const std::string& bytes, size_t* pos) {
  T v;
  std::memcpy(&v, bytes.data() + *pos, sizeof(T));
  *pos += sizeof(T);
  return v;
}

// What a parser guarantees of a text row, checked again on the binary form.
Status CheckArrays(const SparseBatch& b, const std::string& path) {
  const int64_t nnz = static_cast<int64_t>(b.ids.size());
  if (b.offsets.front() != 0 || b.offsets.back() != nnz) {
    return Status::DataLoss(path + ": offsets run from " +
                            std::to_string(b.offsets.front()) + " to " +
                            std::to_string(b.offsets.back()) + ", not 0 to " +
                            std::to_string(nnz));
  }
  for (int64_t r = 0; r < b.rows(); ++r) {
    if (b.offsets[r + 1] < b.offsets[r]) {
      return Status::DataLoss(path + ": row " + std::to_string(r) +
                              "'s offsets decrease");
    }
    if (!std::isfinite(b.labels[r])) {
      return Status::DataLoss(path + ": row " + std::to_string(r) +
                              "'s label is not finite");
    }
  }
  for (int64_t k = 0; k < nnz; ++k) {
    if (b.ids[k] < 0 || !std::isfinite(b.values[k])) {
      return Status::DataLoss(
          path + ": feature " + std::to_string(k) + " (" +
          std::to_string(b.ids[k]) + ":" + std::to_string(b.values[k]) +
          ") has a negative id or a value that is not finite");
    }
  }
  return Status::OK();
}

StatusOr<SparseBatch> DecodeBinary(const std::string& bytes,
                                   const std::string& path) {
  if (bytes.size() < kHeaderBytes ||
      std::memcmp(bytes.data(), kLibSvmBinaryMagic,
                  sizeof(kLibSvmBinaryMagic)) != 0) {
    return Status::DataLoss(
        path + ": not a binary LibSVM file (" + std::to_string(bytes.size()) +
        " bytes, header of " + std::to_string(kHeaderBytes) +
        " starting KVLIBSVM)");
  }
  size_t pos = sizeof(kLibSvmBinaryMagic);
  const uint32_t version = TakeScalar<uint32_t>(bytes, &pos);
  const uint32_t reserved = TakeScalar<uint32_t>(bytes, &pos);
  if (version != kBinaryVersion || reserved != 0) {
    return Status::DataLoss(path + ": binary LibSVM version " +
                            std::to_string(version) + "." +
                            std::to_string(reserved) + "; this kvtrain reads " +
                            std::to_string(kBinaryVersion) + ".0");
  }
  const int64_t rows = TakeScalar<int64_t>(bytes, &pos);
  const int64_t nnz = TakeScalar<int64_t>(bytes, &pos);
  // Bounded by the file's size first, so the expected size cannot overflow.
  const int64_t limit = static_cast<int64_t>(bytes.size());
  const bool plausible = rows >= 0 && nnz >= 0 && rows <= limit && nnz <= limit;
  if (!plausible || static_cast<int64_t>(kHeaderBytes) + 4 * rows +
                            8 * (rows + 1) + 12 * nnz !=
                        limit) {
    return Status::DataLoss(path + ": header says " + std::to_string(rows) +
                            " rows and " + std::to_string(nnz) +
                            " ids, which is not what the file's " +
                            std::to_string(bytes.size()) + " bytes hold");
  }
  SparseBatch b;
  TakeArray(bytes, &pos, rows, &b.labels);
  TakeArray(bytes, &pos, rows + 1, &b.offsets);
  TakeArray(bytes, &pos, nnz, &b.ids);
  TakeArray(bytes, &pos, nnz, &b.values);
  KV_RETURN_IF_ERROR(CheckArrays(b, path));
  return b;
}

StatusOr<SparseBatch> ReadBinary(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  return DecodeBinary(bytes, path);
}

// Hands out the part's chunks of rows held in memory.
class BinaryReader : public LibSvmReader {
 public:
  BinaryReader(const std::string& path, const LibSvmOptions& opts,
               SparseBatch all)
      : LibSvmReader(path),
        opts_(opts),
        all_(std::move(all)),
        chunk_(opts.part_index) {}

  StatusOr<bool> Next(SparseBatch* batch) override {
    const int64_t begin = chunk_ * opts_.batch_size;
    const int64_t end =
        std::min<int64_t>(begin + opts_.batch_size, all_.rows());
    if (begin >= all_.rows() ||
        (opts_.drop_last && end - begin < opts_.batch_size)) {
      batch->Clear();
      return false;
    }
    CopyRows(all_, begin, end, batch);
    chunk_ += opts_.num_parts;
    return true;
  }

  Status Reset() override {
    chunk_ = opts_.part_index;
    return Status::OK();
  }

 private:
  const LibSvmOptions opts_;
  const SparseBatch all_;
  int64_t chunk_;  // the next chunk of batch_size rows to hand out
};

// Whether `path` starts with the binary form's magic.
StatusOr<bool> IsBinary(const std::string& path) {
  KV_ASSIGN_OR_RETURN(File f, OpenFile(path));
  char head[sizeof(kLibSvmBinaryMagic)];
  const size_t got = std::fread(head, 1, sizeof(head), f.get());
  if (got < sizeof(head) && std::ferror(f.get())) {
    return Status::Unavailable(path + ": cannot read: " + std::strerror(errno));
  }
  return got == sizeof(head) &&
         std::memcmp(head, kLibSvmBinaryMagic, sizeof(head)) == 0;
}

}  // namespace

StatusOr<int64_t> CountLibSvmRows(const std::string& path) {
  KV_ASSIGN_OR_RETURN(const bool binary, IsBinary(path));
  KV_ASSIGN_OR_RETURN(File f, OpenFile(path));
  if (binary) {
    char head[kHeaderBytes];
    if (std::fread(head, 1, sizeof(head), f.get()) != sizeof(head)) {
      return Status::DataLoss(path + ": the binary header is cut short");
    }
    int64_t rows;
    std::memcpy(&rows, head + sizeof(kLibSvmBinaryMagic) + 8, sizeof(rows));
    if (rows < 0) return Status::DataLoss(path + ": the header says " + std::to_string(rows) + " rows");
    return rows;
  }
  int64_t rows = 0;
  char* buf = nullptr;
  size_t cap = 0;
  ssize_t n;
  while ((n = getline(&buf, &cap, f.get())) >= 0) {
    rows += BlankLine(std::string_view(buf, static_cast<size_t>(n))) ? 0 : 1;
  }
  std::free(buf);
  if (std::ferror(f.get())) {
    return Status::Unavailable(path + ": cannot read: " + std::strerror(errno));
  }
  return rows;
}

StatusOr<std::unique_ptr<LibSvmReader>> LibSvmReader::Open(
    const std::string& path, const LibSvmOptions& opts) {
  KV_RETURN_IF_ERROR(CheckOptions(path, opts));
  KV_ASSIGN_OR_RETURN(const bool binary, IsBinary(path));
  if (binary) {
    KV_ASSIGN_OR_RETURN(SparseBatch all, ReadBinary(path));
    return std::unique_ptr<LibSvmReader>(
        new BinaryReader(path, opts, std::move(all)));
  }
  KV_ASSIGN_OR_RETURN(File f, OpenFile(path));
  return std::unique_ptr<LibSvmReader>(
      new TextReader(path, opts, std::move(f)));
}

StatusOr<SparseBatch> ReadLibSvmFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(const bool binary, IsBinary(path));
  if (binary) return ReadBinary(path);
  LibSvmOptions opts;
  opts.batch_size = std::numeric_limits<int>::max();
  KV_ASSIGN_OR_RETURN(std::unique_ptr<LibSvmReader> reader,
                      LibSvmReader::Open(path, opts));
  SparseBatch all, batch;
  while (true) {
    KV_ASSIGN_OR_RETURN(const bool more, reader->Next(&batch));
    if (!more) return all;
    if (all.rows() == 0) {
      all = std::move(batch);
      continue;
    }
    // More than INT_MAX rows: append, shifting the batch's offsets.
    const int64_t base = static_cast<int64_t>(all.ids.size());
    all.labels.insert(all.labels.end(), batch.labels.begin(),
                      batch.labels.end());
    for (size_t r = 1; r < batch.offsets.size(); ++r) {
      all.offsets.push_back(base + batch.offsets[r]);
    }
    all.ids.insert(all.ids.end(), batch.ids.begin(), batch.ids.end());
    all.values.insert(all.values.end(), batch.values.begin(),
                      batch.values.end());
  }
}

Status ConvertLibSvmToBinary(const std::string& text_path,
                             const std::string& binary_path) {
  KV_ASSIGN_OR_RETURN(SparseBatch all, ReadLibSvmFile(text_path));
  return WriteChecksummedFile(binary_path, EncodeBinary(all));
}

}  // namespace kvtrain
