// Data iterators: batches of (data, label) tensors from memory, from an
// MNIST-format directory, or synthetic ones for benchmarks. Shuffling,
// partitioning across workers, last-batch handling and prefetching are
// options of every iterator built here.
#ifndef KVTRAIN_ENGINE_IO_DATA_ITER_H_
#define KVTRAIN_ENGINE_IO_DATA_ITER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {

// One batch. `pad` trailing rows repeat earlier examples to fill the last
// batch of an epoch (metrics should ignore them).
struct Batch {
  Tensor data;   // float32 (batch, ...)
  Tensor label;  // float32 (batch)
  int pad = 0;
};

// Writes rows [begin, end) of one batch's data, as float32, into `dst`: a
// CPU tensor of end - begin rows of the batch's row shape.
using RowWriter = std::function<Status(int64_t begin, int64_t end, Tensor dst)>;

// Iterates over one epoch at a time. Not thread-safe: one consumer. The
// arrays of a batch handed out are never written again (a consumer may
// read them on another thread while the iterator goes on).
class DataIter {
 public:
  virtual ~DataIter() = default;
  // Fills `batch` with the next batch; false at the end of the epoch.
  virtual StatusOr<bool> Next(Batch* batch) = 0;
  // Next, with the data written by its consumer: fills batch->label and
  // batch->pad, and *rows with a writer of the batch's data rows
  // (batch->data may stay undefined). The writer holds what it reads, so
  // it may run later, on another thread, after the iterator moved on.
  // Iterators over arrays in memory gather (and scale) rows straight into
  // the consumer's arrays this way, with no batch array between and no
  // work left for a prefetching thread; by default the batch is made by
  // Next and the writer copies from it.
  virtual StatusOr<bool> NextRows(Batch* batch, RowWriter* rows);
  // Starts the next epoch (reshuffling when shuffling is on).
  virtual Status Reset() = 0;
  // Starts epoch `epoch` (0-based) from its beginning: the order of a given
  // epoch depends only on the seed and the epoch, so a resumed job reads
  // exactly what an uninterrupted one would.
  virtual Status StartEpoch(int64_t epoch) = 0;
  virtual int batch_size() const = 0;
  // Shape of one batch's data, e.g. (100, 784).
  virtual Shape data_shape() const = 0;
  // Batches per epoch in this part; -1 when known only at the epoch's end
  // (an iterator written in Python): a trainer then runs each epoch to it.
  virtual int64_t num_batches() const = 0;
  // The most batches any part of the data set has (part 0's): how many
  // steps every worker of a synchronous job takes per epoch.
  virtual int64_t max_part_batches() const { return num_batches(); }
};

enum class LastBatch {
  kPad,      // fill the last batch with examples from the part's start
  kDiscard,  // drop an incomplete last batch
};

struct IterOptions {
  // Examples per batch (>= 1).
  int batch_size = 100;
  // Reshuffle every epoch; the order depends only on `seed` and the epoch,
  // so every worker computes the same global order.
  bool shuffle = false;
  uint64_t seed = 0;
  // Partitioning: the (shuffled) examples are cut into batch-sized chunks
  // and part i takes chunks i, i + num_parts, i + 2 num_parts, ... So global
  // batch t of num_parts * batch_size examples is the union of every part's
  // batch t: n workers at batch b see exactly what one process at n * b sees.
  int num_parts = 1;
  int part_index = 0;
  LastBatch last_batch = LastBatch::kPad;
  // Prepare the next batch on a background thread.
  bool prefetch = true;
  // Pixel scaling: data = raw * scale.
  float scale = 1.0f / 255.0f;
  // MNIST: images as (batch, 784) when true, (batch, 1, 28, 28) when false.
  bool flat = true;
  // Use only the first N examples (0: all).
  int64_t num_examples = 0;
};

// Validates options against a data set of `count` examples.
Status CheckIterOptions(const IterOptions& opts, int64_t count);

// Batches of rows of `data` ((N, ...) uint8 or float32, multiplied by
// opts.scale) with labels ((N) any dtype, converted to float32).
StatusOr<std::unique_ptr<DataIter>> NewArrayIter(Tensor data, Tensor label,
                                                 const IterOptions& opts);

// Reads the examples `examples` (ascending indices into a data set) of a
// data set kept outside memory: their rows ((k, row...) uint8 or float32)
// into *data and their labels ((k) any dtype) into *label.
using ExampleReader = std::function<Status(const std::vector<int64_t>& examples,
                                           Tensor* data, Tensor* label)>;

// Batches of a data set of `count` examples of `row_shape` that `read`
// gives, the same, example for example, as NewArrayIter's over the whole
// set, but holding only this part's examples of the current epoch (about
// 1/num_parts of them): an epoch whose part differs from the one held reads
// its own when it starts. With shuffling and several parts, that is every
// epoch (the parts are cut from each epoch's order); otherwise only the
// first. A reader's error surfaces from StartEpoch (or Reset), and that
// epoch gives no batches.
StatusOr<std::unique_ptr<DataIter>> NewPartIter(int64_t count, const Shape& row_shape,
                                                ExampleReader read,
                                                const IterOptions& opts);

// A CSV file of numbers, `width` per line (comma-separated, a trailing \r
// and blanks around values allowed): (rows, width) float32. Errors name the
// file, the line and the column.
StatusOr<Tensor> ReadCsv(const std::string& path, int64_t width);

// MXNet's CSVIter: the examples of `data_csv` (each line one example of
// `data_shape`, flattened) with the labels of `label_csv` (one value per
// line; "": zeros), batched as NewArrayIter's (opts.scale is not applied).
StatusOr<std::unique_ptr<DataIter>> NewCsvIter(const std::string& data_csv,
                                               const Shape& data_shape,
                                               const std::string& label_csv,
                                               const IterOptions& opts);

// The MNIST-format data set in `dir`: train-images-idx3-ubyte and
// train-labels-idx1-ubyte (train) or t10k-* (test), each optionally .gz.
// The labels are read whole and checked (as LoadMnist does); of the images,
// only each epoch's part (NewPartIter): plain files at the part's offsets,
// gzipped ones decompressed in chunks keeping the part's rows.
StatusOr<std::unique_ptr<DataIter>> NewMnistIter(const std::string& dir,
                                                 bool train,
                                                 const IterOptions& opts);

// Loads the MNIST images ((N, 28, 28) uint8) and labels ((N) uint8) of
// `dir`, checking that they agree and that labels are 0..9.
Status LoadMnist(const std::string& dir, bool train, Tensor* images,
                 Tensor* labels);

// `num_batches` batches of uniform [-1, 1) data of `batch_shape` and labels
// in [0, num_classes), fixed by `seed` (the same batches every epoch).
StatusOr<std::unique_ptr<DataIter>> NewSyntheticIter(const Shape& batch_shape,
                                                     int num_classes,
                                                     int64_t num_batches,
                                                     uint64_t seed);

// The default data set: Debian's dataset-fashion-mnist package.
inline constexpr char kDefaultMnistDir[] = "/usr/share/datasets/fashion-mnist";

}  // namespace kvtrain

#endif  // KVTRAIN_ENGINE_IO_DATA_ITER_H_
