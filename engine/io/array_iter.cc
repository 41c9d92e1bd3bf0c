// ArrayIter: batches from in-memory arrays, or from a part of a data set
// read per epoch, with shuffling, batch-interleaved partitioning, last-batch
// padding and a prefetch thread.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "base/thread_annotations.h"
#include "engine/io/data_iter.h"

namespace kvtrain {

StatusOr<bool> DataIter::NextRows(Batch* batch, RowWriter* rows) {
  KV_ASSIGN_OR_RETURN(bool more, Next(batch));
  if (!more) return false;
  *rows = [data = batch->data](int64_t begin, int64_t end,
                               Tensor dst) -> Status {
    KV_ASSIGN_OR_RETURN(Tensor part, data.Slice(begin, end));
    return dst.CopyFrom(part);
  };
  return true;
}

Status CheckIterOptions(const IterOptions& o, int64_t count) {
  if (o.batch_size < 1) {
    return Status::InvalidArgument("batch size must be at least 1, got " +
                                   std::to_string(o.batch_size));
  }
  if (o.num_parts < 1 || o.part_index < 0 || o.part_index >= o.num_parts) {
    return Status::InvalidArgument(
        "part_index " + std::to_string(o.part_index) + " is not in [0, " +
        "num_parts=" + std::to_string(o.num_parts) + ")");
  }
  if (o.num_examples < 0) {
    return Status::InvalidArgument("num_examples must be >= 0, got " +
                                   std::to_string(o.num_examples));
  }
  const int64_t n = o.num_examples > 0 ? std::min(o.num_examples, count) : count;
  if (n < static_cast<int64_t>(o.batch_size) * o.num_parts &&
      o.last_batch == LastBatch::kDiscard) {
    return Status::InvalidArgument(
        std::to_string(n) + " examples are fewer than one batch of " +
        std::to_string(o.batch_size) + " for each of " +
        std::to_string(o.num_parts) + " parts");
  }
  if (n == 0) return Status::InvalidArgument("the data set is empty");
  return Status::OK();
}

namespace {

// Not inlined: its restrict-qualified pointers are what lets the body
// vectorise at -O2 (a body whose length is a multiple of 16).
template <typename T>
__attribute__((noinline)) void ScaleRow(const T* __restrict src,
                                        float* __restrict dst, int64_t n,
                                        float s) {
  const int64_t body = n & ~int64_t{15};
  for (int64_t i = 0; i < body; ++i) dst[i] = src[i] * s;
  for (int64_t i = body; i < n; ++i) dst[i] = src[i] * s;
}

// n values of `src` (uint8 or float32) from element `at` on, times `s`.
void ScaleValues(const Tensor& src, int64_t at, int64_t n, float s,
                 float* dst) {
  if (src.dtype() == DType::kUInt8) {
    ScaleRow(src.data<uint8_t>() + at, dst, n, s);
  } else {
    ScaleRow(src.data<float>() + at, dst, n, s);
  }
}

// A batch's examples gathered: their rows as float32, scaled, or (for
// NextRows) uint8 rows as they are, a quarter of the bytes, converted where
// they are used; labels as float32.
struct Gathered {
  Tensor rows;  // (batch, ...) uint8 or float32
  Tensor label;
  int pad = 0;
};

// Rows [begin, end) of `g` as float32 into `dst` (CPU, float32, as many
// values), scaling uint8 rows by `scale`.
Status WriteRows(const Gathered& g, float scale, int64_t begin, int64_t end,
                 Tensor dst) {
  const int64_t n = g.rows.dim(0);
  const int64_t row_elems = n == 0 ? 0 : g.rows.size() / n;
  if (begin < 0 || begin > end || end > n) {
    return Status::InvalidArgument("rows [" + std::to_string(begin) + ", " +
                                   std::to_string(end) + ") of a batch of " +
                                   std::to_string(n));
  }
  if (!dst.device().is_cpu() || dst.dtype() != DType::kFloat32 ||
      dst.size() != (end - begin) * row_elems) {
    return Status::InvalidArgument("batch rows go to a CPU float32 array of " +
                                   std::to_string((end - begin) * row_elems) +
                                   " values, got " + dst.shape().ToString() +
                                   " " + DTypeName(dst.dtype()) + " on " +
                                   dst.device().ToString());
  }
  // Float32 rows are scaled already (times 1 is exact).
  ScaleValues(g.rows, begin * row_elems, (end - begin) * row_elems,
              g.rows.dtype() == DType::kUInt8 ? scale : 1.0f,
              dst.data<float>());
  return Status::OK();
}

// Over arrays holding every example, or (with a reader) over the examples
// of this part of the current epoch, read when an epoch's part differs from
// the one held. Examples are named by their index in the whole data set;
// with a reader, order_ holds their rows in the part held.
class ArrayIter : public DataIter {
 public:
  ArrayIter(Tensor data, Tensor label, const IterOptions& opts, int64_t n)
      : data_(std::move(data)), label_(std::move(label)), opts_(opts), n_(n) {
    const std::vector<int64_t>& dims = data_.shape().dims();
    SetRowShape(Shape(std::vector<int64_t>(dims.begin() + 1, dims.end())));
  }

  ArrayIter(ExampleReader read, const Shape& row_shape, const IterOptions& opts,
            int64_t n)
      : read_(std::move(read)), opts_(opts), n_(n) {
    SetRowShape(row_shape);
  }

  ~ArrayIter() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (producer_.joinable()) producer_.join();
  }

  StatusOr<bool> Next(Batch* batch) override {
    std::optional<Gathered> g = Take(/*for_rows=*/false);
    if (!g.has_value()) return false;
    batch->data = g->rows;  // float32
    batch->label = g->label;
    batch->pad = g->pad;
    return true;
  }

  StatusOr<bool> NextRows(Batch* batch, RowWriter* rows) override {
    std::optional<Gathered> g = Take(/*for_rows=*/true);
    if (!g.has_value()) return false;
    batch->data = Tensor();
    batch->label = g->label;
    batch->pad = g->pad;
    // By value: the writer may run after this iterator moved on.
    *rows = [g = std::move(*g), scale = opts_.scale](int64_t begin, int64_t end,
                                                     Tensor dst) -> Status {
      return WriteRows(g, scale, begin, end, std::move(dst));
    };
    return true;
  }

  Status Reset() override { return StartEpoch(epoch_ + 1); }

  Status StartEpoch(int64_t epoch) override {
    if (epoch < 0) return Status::InvalidArgument("negative epoch");
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !making_; });
    slot_.reset();
    epoch_ = static_cast<uint64_t>(epoch);
    made_ = given_ = 0;
    Status s = BuildOrder();
    if (!s.ok()) {
      // An epoch whose part could not be read gives no batches.
      order_.clear();
      num_batches_ = 0;
    }
    cv_.notify_all();
    return s;
  }

  int batch_size() const override { return opts_.batch_size; }
  Shape data_shape() const override { return batch_shape_; }
  int64_t num_batches() const override { return num_batches_; }
  int64_t max_part_batches() const override {
    // Part 0 holds chunks 0, parts, 2 parts, ...: the most of any part.
    const int64_t b = opts_.batch_size;
    const int64_t chunks = (n_ + b - 1) / b;
    const int64_t mine = (chunks + opts_.num_parts - 1) / opts_.num_parts;
    if (opts_.last_batch != LastBatch::kDiscard) return mine;
    // Discard: only whole chunks make batches (the last may be short).
    const int64_t whole = n_ / b;
    return (whole + opts_.num_parts - 1) / opts_.num_parts;
  }

 private:
  void SetRowShape(const Shape& row) {
    row_elems_ = row.NumElements();
    std::vector<int64_t> dims = row.dims();
    dims.insert(dims.begin(), opts_.batch_size);
    batch_shape_ = Shape(dims);
  }

  // This part's examples for the current epoch, padded to whole batches
  // (and, with a reader, read when they are not the ones held).
  Status BuildOrder() {
    std::vector<int64_t> perm(n_);
    for (int64_t i = 0; i < n_; ++i) perm[i] = i;
    if (opts_.shuffle) {
      // Fisher-Yates with an explicit generator, so every build of kvtrain
      // produces the same order for the same seed and epoch.
      std::mt19937_64 rng(opts_.seed * 1000003ULL + epoch_);
      for (int64_t i = n_ - 1; i > 0; --i) {
        std::swap(perm[i], perm[rng() % static_cast<uint64_t>(i + 1)]);
      }
    }
    const int64_t b = opts_.batch_size;
    order_.clear();
    for (int64_t c = opts_.part_index; c * b < n_; c += opts_.num_parts) {
      for (int64_t i = c * b; i < std::min(n_, (c + 1) * b); ++i) {
        order_.push_back(perm[i]);
      }
    }
    const int64_t len = static_cast<int64_t>(order_.size());
    if (opts_.last_batch == LastBatch::kDiscard || len == 0) {
      num_batches_ = len / b;
      order_.resize(num_batches_ * b);
      last_pad_ = 0;
    } else {
      num_batches_ = (len + b - 1) / b;
      last_pad_ = static_cast<int>(num_batches_ * b - len);
      for (int i = 0; i < last_pad_; ++i) order_.push_back(order_[i % len]);
    }
    return read_ ? ReadPart() : Status::OK();
  }

  // Holds this epoch's part: reads it unless held already (it always is
  // without shuffling, or with one part), then points order_ at its rows.
  Status ReadPart() {
    std::vector<int64_t> wanted = order_;
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    if (!held_.has_value() || wanted != *held_) {
      // The part held goes before the next comes: one part at a time.
      data_ = label_ = Tensor();
      held_.reset();
      Tensor data, label;
      if (!wanted.empty()) KV_RETURN_IF_ERROR(read_(wanted, &data, &label));
      KV_RETURN_IF_ERROR(CheckPart(data, label, wanted.size()));
      data_ = std::move(data);
      label_ = std::move(label);
      held_ = std::move(wanted);
    }
    for (int64_t& ex : order_) {
      ex = std::lower_bound(held_->begin(), held_->end(), ex) - held_->begin();
    }
    return Status::OK();
  }

  // What a reader gave for `k` examples has their rows and labels.
  Status CheckPart(const Tensor& data, const Tensor& label, size_t k) const {
    if (k == 0) return Status::OK();
    const int64_t n = static_cast<int64_t>(k);
    const bool rows_ok = data.defined() && data.device().is_cpu() &&
                         (data.dtype() == DType::kUInt8 || data.dtype() == DType::kFloat32) &&
                         data.ndim() == batch_shape_.ndim() && data.dim(0) == n &&
                         data.size() == n * row_elems_;
    const bool labels_ok = label.defined() && label.device().is_cpu() && label.ndim() == 1 &&
                           label.dim(0) == n;
    if (rows_ok && labels_ok) return Status::OK();
    return Status::Internal(
        "the example reader gave data " + (data.defined() ? data.shape().ToString() : "()") +
        " and labels " + (label.defined() ? label.shape().ToString() : "()") + " for " +
        std::to_string(k) + " examples of " + batch_shape_.ToString() + " batches");
  }

  // Batch `index`; uint8 rows stay uint8 when `keep_raw`.
  Gathered Gather(int64_t index, bool keep_raw) const {
    Gathered out;
    const int b = opts_.batch_size;
    const bool raw = keep_raw && data_.dtype() == DType::kUInt8;
    out.rows =
        Tensor::Empty(batch_shape_, raw ? DType::kUInt8 : DType::kFloat32);
    out.label = Tensor::Empty({b}, DType::kFloat32);
    float* lab = out.label.data<float>();
    const int64_t* examples = order_.data() + index * b;
    // The rows are scattered over the data set: a few rows ahead are
    // fetched while one is copied (a copy otherwise waits on memory).
    constexpr int kAhead = 6;
    for (int r = 0; r < std::min(b, kAhead); ++r) PrefetchRow(examples[r]);
    for (int r = 0; r < b; ++r) {
      const int64_t ex = examples[r];
      if (r + kAhead < b) PrefetchRow(examples[r + kAhead]);
      if (raw) {
        std::memcpy(out.rows.data<uint8_t>() + r * row_elems_,
                    data_.data<uint8_t>() + ex * row_elems_, row_elems_);
      } else {
        ScaleValues(data_, ex * row_elems_, row_elems_, opts_.scale,
                    out.rows.data<float>() + r * row_elems_);
      }
      lab[r] = LabelOf(ex);
    }
    out.pad = index == num_batches_ - 1 ? last_pad_ : 0;
    return out;
  }

  // The next batch of the epoch. For Next: from the producer thread
  // (started by the first call) when prefetching, else gathered here. For
  // NextRows: gathered here, raw, unless the producer made it ahead (after
  // a Next): what is left before the consumer converts the rows, a copy of
  // the examples' bytes, costs less than handing a batch between threads.
  std::optional<Gathered> Take(bool for_rows) {
    if (given_ >= num_batches_) return std::nullopt;
    std::unique_lock<std::mutex> lock(mu_);
    if (for_rows || !opts_.prefetch) {
      cv_.wait(lock, [this] { return !making_; });
      if (!slot_.has_value()) {
        const int64_t index = given_++;
        made_ = std::max(made_, given_);  // a running producer skips it
        lock.unlock();
        return Gather(index, /*keep_raw=*/for_rows);
      }
    }
    if (!producer_.joinable()) producer_ = std::thread([this] { Produce(); });
    cv_.wait(lock, [this] { return slot_.has_value(); });
    std::optional<Gathered> out = std::move(slot_);
    slot_.reset();
    ++given_;
    cv_.notify_all();
    return out;
  }

  void PrefetchRow(int64_t ex) const {
    const int64_t bytes =
        row_elems_ * static_cast<int64_t>(DTypeSize(data_.dtype()));
    const char* row = static_cast<const char*>(data_.raw_data()) + ex * bytes;
    for (int64_t at = 0; at < bytes; at += 64) __builtin_prefetch(row + at);
  }

  float LabelOf(int64_t ex) const {
    switch (label_.dtype()) {
      case DType::kUInt8: return label_.data<uint8_t>()[ex];
      case DType::kInt32: return static_cast<float>(label_.data<int32_t>()[ex]);
      case DType::kInt64: return static_cast<float>(label_.data<int64_t>()[ex]);
      case DType::kFloat64: return static_cast<float>(label_.data<double>()[ex]);
      case DType::kFloat32: return label_.data<float>()[ex];
    }
    return 0;
  }

  void Produce() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] {
        return stop_ || (!slot_.has_value() && made_ < num_batches_);
      });
      if (stop_) return;
      const int64_t index = made_++;
      making_ = true;
      lock.unlock();
      Gathered b = Gather(index, /*keep_raw=*/false);
      lock.lock();
      making_ = false;
      slot_ = std::move(b);
      cv_.notify_all();
    }
  }

  // Every example, or (with read_) the part held: the rows of held_'s
  // examples. Written by StartEpoch while the producer is idle.
  Tensor data_, label_;
  const ExampleReader read_;
  std::optional<std::vector<int64_t>> held_;
  const IterOptions opts_;
  const int64_t n_;
  int64_t row_elems_ = 0;
  Shape batch_shape_;

  std::mutex mu_;
  std::condition_variable cv_;
  // The epoch's layout: written by Reset while the producer is idle.
  std::vector<int64_t> order_;
  int64_t num_batches_ = 0;
  int last_pad_ = 0;
  uint64_t epoch_ = 0;
  int64_t made_ GUARDED_BY(mu_) = 0;
  int64_t given_ = 0;  // consumer's count
  bool making_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::optional<Gathered> slot_ GUARDED_BY(mu_);
  std::thread producer_;
};

}  // namespace

StatusOr<std::unique_ptr<DataIter>> NewArrayIter(Tensor data, Tensor label,
                                                 const IterOptions& opts) {
  if (!data.defined() || data.ndim() < 1 || !data.device().is_cpu()) {
    return Status::InvalidArgument("iterator data must be a CPU array of at "
                                   "least one dimension");
  }
  if (data.dtype() != DType::kUInt8 && data.dtype() != DType::kFloat32) {
    return Status::InvalidArgument(std::string("iterator data must be uint8 or "
                                               "float32, got ") +
                                   DTypeName(data.dtype()));
  }
  if (!label.defined() || label.ndim() != 1 || label.dim(0) != data.dim(0)) {
    return Status::InvalidArgument(
        "iterator labels " + (label.defined() ? label.shape().ToString() : "()") +
        " do not match data " + data.shape().ToString() +
        ": expected one label per row");
  }
  KV_RETURN_IF_ERROR(CheckIterOptions(opts, data.dim(0)));
  const int64_t n = opts.num_examples > 0
                        ? std::min<int64_t>(opts.num_examples, data.dim(0))
                        : data.dim(0);
  auto it = std::make_unique<ArrayIter>(std::move(data), std::move(label), opts, n);
  KV_RETURN_IF_ERROR(it->StartEpoch(0));
  return std::unique_ptr<DataIter>(std::move(it));
}

StatusOr<std::unique_ptr<DataIter>> NewPartIter(int64_t count, const Shape& row_shape,
                                                ExampleReader read, const IterOptions& opts) {
  if (!read || count < 0 || !row_shape.IsValid()) {
    return Status::InvalidArgument("a part iterator needs a reader, a count >= 0 and a valid "
                                   "row shape, got " + std::to_string(count) + " rows of " +
                                   row_shape.ToString());
  }
  KV_RETURN_IF_ERROR(CheckIterOptions(opts, count));
  const int64_t n = opts.num_examples > 0 ? std::min(opts.num_examples, count) : count;
  auto it = std::make_unique<ArrayIter>(std::move(read), row_shape, opts, n);
  KV_RETURN_IF_ERROR(it->StartEpoch(0));
  return std::unique_ptr<DataIter>(std::move(it));
}

}  // namespace kvtrain
