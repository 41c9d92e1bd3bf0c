// MNIST-format directories (MNIST, Fashion-MNIST) and the synthetic iterator.
#include <sys/stat.h>

#include <random>

#include "engine/io/data_iter.h"
#include "engine/io/idx.h"

namespace kvtrain {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The first of the usual spellings of `stem` that exists in `dir`.
StatusOr<std::string> FindFile(const std::string& dir, const std::string& stem) {
  std::string dotted = stem;
  dotted[dotted.rfind('-')] = '.';  // train-images.idx3-ubyte
  for (const std::string& name : {stem, stem + ".gz", dotted, dotted + ".gz"}) {
    if (Exists(dir + "/" + name)) return dir + "/" + name;
  }
  return Status::NotFound(dir + "/" + stem + "[.gz] not found");
}

}  // namespace

Status LoadMnist(const std::string& dir, bool train, Tensor* images,
                 Tensor* labels) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("data directory " + dir + " does not exist");
  }
  const std::string prefix = train ? "train" : "t10k";
  KV_ASSIGN_OR_RETURN(std::string image_path,
                      FindFile(dir, prefix + "-images-idx3-ubyte"));
  KV_ASSIGN_OR_RETURN(std::string label_path,
                      FindFile(dir, prefix + "-labels-idx1-ubyte"));
  KV_ASSIGN_OR_RETURN(*images, ReadIdxFile(image_path));
  KV_ASSIGN_OR_RETURN(*labels, ReadIdxFile(label_path));
  if (images->ndim() != 3 || images->dtype() != DType::kUInt8) {
    return Status::DataLoss(image_path + ": expected (N, rows, cols) uint8 "
                            "images, got " + images->shape().ToString() + " " +
                            DTypeName(images->dtype()));
  }
  if (labels->ndim() != 1 || labels->dtype() != DType::kUInt8) {
    return Status::DataLoss(label_path + ": expected (N) uint8 labels, got " +
                            labels->shape().ToString() + " " +
                            DTypeName(labels->dtype()));
  }
  if (labels->dim(0) != images->dim(0)) {
    return Status::DataLoss(label_path + " has " + std::to_string(labels->dim(0)) +
                            " labels but " + image_path + " has " +
                            std::to_string(images->dim(0)) + " images");
  }
  const uint8_t* l = labels->data<uint8_t>();
  for (int64_t i = 0; i < labels->dim(0); ++i) {
    if (l[i] > 9) {
      return Status::DataLoss(label_path + ": label " + std::to_string(l[i]) +
                              " at index " + std::to_string(i) +
                              " is not a class 0-9");
    }
  }
  return Status::OK();
}

StatusOr<std::unique_ptr<DataIter>> NewMnistIter(const std::string& dir,
                                                 bool train,
                                                 const IterOptions& opts) {
  Tensor images, labels;
  KV_RETURN_IF_ERROR(LoadMnist(dir, train, &images, &labels));
  const int64_t n = images.dim(0), rows = images.dim(1), cols = images.dim(2);
  KV_ASSIGN_OR_RETURN(Tensor shaped,
                      opts.flat ? images.Reshape({n, rows * cols})
                                : images.Reshape({n, 1, rows, cols}));
  return NewArrayIter(std::move(shaped), std::move(labels), opts);
}

namespace {

class SyntheticIter : public DataIter {
 public:
  SyntheticIter(std::vector<Batch> batches, Shape shape)
      : batches_(std::move(batches)), shape_(std::move(shape)) {}

  StatusOr<bool> Next(Batch* batch) override {
    if (next_ >= batches_.size()) return false;
    *batch = batches_[next_++];
    return true;
  }
  Status Reset() override {
    next_ = 0;
    return Status::OK();
  }
  Status StartEpoch(int64_t) override { return Reset(); }
  int batch_size() const override { return static_cast<int>(shape_[0]); }
  Shape data_shape() const override { return shape_; }
  int64_t num_batches() const override { return batches_.size(); }

 private:
  std::vector<Batch> batches_;
  Shape shape_;
  size_t next_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<DataIter>> NewSyntheticIter(const Shape& batch_shape,
                                                     int num_classes,
                                                     int64_t num_batches,
                                                     uint64_t seed) {
  if (batch_shape.ndim() < 1 || batch_shape[0] < 1 || !batch_shape.IsValid()) {
    return Status::InvalidArgument("synthetic batch shape " +
                                   batch_shape.ToString() +
                                   " needs a positive batch dimension");
  }
  if (num_classes < 1 || num_batches < 1) {
    return Status::InvalidArgument("synthetic data needs num_classes >= 1 and "
                                   "num_batches >= 1");
  }
  std::mt19937_64 rng(seed);
  std::vector<Batch> batches(num_batches);
  for (Batch& b : batches) {
    b.data = Tensor::Empty(batch_shape);
    b.label = Tensor::Empty({batch_shape[0]});
    float* d = b.data.data<float>();
    for (int64_t i = 0; i < b.data.size(); ++i) {
      d[i] = static_cast<float>(rng() >> 40) / static_cast<float>(1 << 23) - 1.0f;
    }
    float* l = b.label.data<float>();
    for (int64_t i = 0; i < batch_shape[0]; ++i) {
      l[i] = static_cast<float>(rng() % num_classes);
    }
  }
  return std::unique_ptr<DataIter>(new SyntheticIter(std::move(batches), batch_shape));
}

}  // namespace kvtrain
