// ArrayIter: batches from in-memory arrays, with shuffling, batch-interleaved
// partitioning, last-batch padding and a prefetch thread.
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "base/thread_annotations.h"
#include "engine/io/data_iter.h"

namespace kvtrain {

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

class ArrayIter : public DataIter {
 public:
  ArrayIter(Tensor data, Tensor label, const IterOptions& opts, int64_t n)
      : data_(std::move(data)), label_(std::move(label)), opts_(opts), n_(n) {
    row_elems_ = data_.shape().Product(1, data_.ndim());
    std::vector<int64_t> dims = data_.shape().dims();
    dims[0] = opts_.batch_size;
    batch_shape_ = Shape(dims);
    BuildOrder();
    if (opts_.prefetch) producer_ = std::thread([this] { Produce(); });
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
    if (given_ >= num_batches_) return false;
    if (!opts_.prefetch) {
      *batch = Make(given_++);
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return slot_.has_value(); });
    *batch = std::move(*slot_);
    slot_.reset();
    ++given_;
    cv_.notify_all();
    return true;
  }

  Status Reset() override { return StartEpoch(epoch_ + 1); }

  Status StartEpoch(int64_t epoch) override {
    if (epoch < 0) return Status::InvalidArgument("negative epoch");
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !making_; });
    slot_.reset();
    epoch_ = static_cast<uint64_t>(epoch);
    BuildOrder();
    made_ = given_ = 0;
    cv_.notify_all();
    return Status::OK();
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
  // This part's examples for the current epoch, padded to whole batches.
  void BuildOrder() {
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
  }

  Batch Make(int64_t index) const {
    Batch out;
    const int b = opts_.batch_size;
    out.data = Tensor::Empty(batch_shape_, DType::kFloat32);
    out.label = Tensor::Empty({b}, DType::kFloat32);
    float* dst = out.data.data<float>();
    float* lab = out.label.data<float>();
    for (int r = 0; r < b; ++r) {
      const int64_t ex = order_[index * b + r];
      CopyRow(ex, dst + r * row_elems_);
      lab[r] = LabelOf(ex);
    }
    out.pad = index == num_batches_ - 1 ? last_pad_ : 0;
    return out;
  }

  void CopyRow(int64_t ex, float* dst) const {
    if (data_.dtype() == DType::kUInt8) {
      ScaleRow(data_.data<uint8_t>() + ex * row_elems_, dst);
    } else {
      ScaleRow(data_.data<float>() + ex * row_elems_, dst);
    }
  }

  template <typename T>
  void ScaleRow(const T* __restrict src, float* __restrict dst) const {
    const float s = opts_.scale;
    // A body whose length is a multiple of 16 vectorises at -O2.
    const int64_t body = row_elems_ & ~int64_t{15};
    for (int64_t i = 0; i < body; ++i) dst[i] = src[i] * s;
    for (int64_t i = body; i < row_elems_; ++i) dst[i] = src[i] * s;
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
      Batch b = Make(index);
      lock.lock();
      making_ = false;
      slot_ = std::move(b);
      cv_.notify_all();
    }
  }

  const Tensor data_, label_;
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
  std::optional<Batch> slot_ GUARDED_BY(mu_);
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
  return std::unique_ptr<DataIter>(
      new ArrayIter(std::move(data), std::move(label), opts, n));
}

}  // namespace kvtrain
