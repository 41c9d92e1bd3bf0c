// LibSVM files ("label id:value id:value ...", one example per line) and
// their checksummed binary form, read as batches of sparse rows: the input
// of models over large sparse embedding tables (click logs).
// Every malformed input is an error naming the file (and the line).
#ifndef KVTRAIN_ENGINE_IO_LIBSVM_H_
#define KVTRAIN_ENGINE_IO_LIBSVM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kvtrain {

// Rows in compressed sparse row form: row r's features are ids[k] with
// values[k] for k in [offsets[r], offsets[r + 1]), in the file's order.
struct SparseBatch {
  // One per row, as written (finite).
  std::vector<float> labels;
  // rows() + 1 entries, from 0 to ids.size().
  std::vector<int64_t> offsets = {0};
  // Feature ids, >= 0.
  std::vector<int64_t> ids;
  // One per id (finite).
  std::vector<float> values;

  int64_t rows() const { return static_cast<int64_t>(labels.size()); }
  // No rows.
  void Clear();
};

struct LibSvmOptions {
  // Rows per batch (>= 1).
  int batch_size = 256;
  // Drop the part's last batch when it is short instead of returning it.
  bool drop_last = false;
  // Partitioning, as IterOptions's (engine/io/data_iter.h): the file's rows
  // are cut into batch-sized chunks and part i takes chunks i,
  // i + num_parts, i + 2 num_parts, ... So every row is in exactly one part,
  // and global batch t of num_parts * batch_size rows is the union of every
  // part's batch t. A text reader parses only its part's lines: a bad line
  // is reported by the part it belongs to.
  int num_parts = 1;
  int part_index = 0;
};

// The first 8 bytes of a binary file. Its layout, little-endian: the magic,
// uint32 version (1), uint32 0, int64 rows, int64 ids, float32
// labels[rows], int64 offsets[rows + 1], int64 ids[ids], float32
// values[ids]; then base/file.h's checksum trailer over all of it.
inline constexpr char kLibSvmBinaryMagic[8] = {'K', 'V', 'L', 'I',
                                               'B', 'S', 'V', 'M'};

// Reads one part of a LibSVM file, one epoch at a time. A text file is
// read as it is consumed (one batch in memory); a binary file is read and
// checked whole when opened. Not thread-safe: one consumer.
class LibSvmReader {
 public:
  virtual ~LibSvmReader() = default;

  // Opens `path`: the binary form when it starts with kLibSvmBinaryMagic,
  // text otherwise. Text lines are `label feature...`, separated by spaces
  // or tabs, each feature `id:value`; the label and values are decimal
  // numbers, ids non-negative 64-bit integers; a line of blanks only is
  // skipped and is no row. Errors: bad options, a missing file, a corrupt
  // binary file (bad header, sizes or checksum).
  static StatusOr<std::unique_ptr<LibSvmReader>> Open(
      const std::string& path, const LibSvmOptions& opts = {});

  // Replaces `batch` with the part's next batch; false (and an empty
  // batch) at the end of the epoch. A malformed line is an error naming
  // the file, the line and the bad token; the rows read before it into the
  // same batch are dropped, and the next call starts a batch after it.
  virtual StatusOr<bool> Next(SparseBatch* batch) = 0;

  // Starts the next epoch at the file's first row.
  virtual Status Reset() = 0;

  const std::string& path() const { return path_; }

 protected:
  explicit LibSvmReader(std::string path) : path_(std::move(path)) {}

 private:
  const std::string path_;
};

// The rows of a LibSVM file (text: its non-blank lines; binary: its
// header's count), without parsing them: e.g. for every worker of a job to
// agree on the number of full batches per epoch.
StatusOr<int64_t> CountLibSvmRows(const std::string& path);

// Every row of a LibSVM file (text or binary) in one batch.
StatusOr<SparseBatch> ReadLibSvmFile(const std::string& path);

// Writes the rows of `text_path` (or a binary file) to `binary_path` in the
// binary form, atomically (base/file.h). Errors: those of reading, then of
// writing.
Status ConvertLibSvmToBinary(const std::string& text_path,
                             const std::string& binary_path);

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_IO_LIBSVM_H_
