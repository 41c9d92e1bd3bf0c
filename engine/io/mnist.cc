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

// The images and labels files of a data set.
struct MnistFiles {
  std::string images, labels;
};

StatusOr<MnistFiles> FindMnistFiles(const std::string& dir, bool train) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("data directory " + dir + " does not exist");
  }
  const std::string prefix = train ? "train" : "t10k";
  MnistFiles f;
  KV_ASSIGN_OR_RETURN(f.images, FindFile(dir, prefix + "-images-idx3-ubyte"));
  KV_ASSIGN_OR_RETURN(f.labels, FindFile(dir, prefix + "-labels-idx1-ubyte"));
  return f;
}

Status CheckImages(const std::string& path, const IdxInfo& images) {
  if (images.shape.ndim() != 3 || images.dtype != DType::kUInt8) {
    return Status::DataLoss(path + ": expected (N, rows, cols) uint8 images, got " +
                            images.shape.ToString() + " " + DTypeName(images.dtype));
  }
  return Status::OK();
}

// Labels agree with the images' count and are classes 0-9.
Status CheckLabels(const MnistFiles& f, int64_t num_images, const Tensor& labels) {
  if (labels.ndim() != 1 || labels.dtype() != DType::kUInt8) {
    return Status::DataLoss(f.labels + ": expected (N) uint8 labels, got " +
                            labels.shape().ToString() + " " + DTypeName(labels.dtype()));
  }
  if (labels.dim(0) != num_images) {
    return Status::DataLoss(f.labels + " has " + std::to_string(labels.dim(0)) +
                            " labels but " + f.images + " has " +
                            std::to_string(num_images) + " images");
  }
  const uint8_t* l = labels.data<uint8_t>();
  for (int64_t i = 0; i < labels.dim(0); ++i) {
    if (l[i] > 9) {
      return Status::DataLoss(f.labels + ": label " + std::to_string(l[i]) + " at index " +
                              std::to_string(i) + " is not a class 0-9");
    }
  }
  return Status::OK();
}

}  // namespace

Status LoadMnist(const std::string& dir, bool train, Tensor* images,
                 Tensor* labels) {
  KV_ASSIGN_OR_RETURN(MnistFiles f, FindMnistFiles(dir, train));
  KV_ASSIGN_OR_RETURN(*images, ReadIdxFile(f.images));
  KV_ASSIGN_OR_RETURN(*labels, ReadIdxFile(f.labels));
  KV_RETURN_IF_ERROR(CheckImages(f.images, IdxInfo{images->dtype(), images->shape()}));
  return CheckLabels(f, images->dim(0), *labels);
}

StatusOr<std::unique_ptr<DataIter>> NewMnistIter(const std::string& dir,
                                                 bool train,
                                                 const IterOptions& opts) {
  KV_ASSIGN_OR_RETURN(MnistFiles f, FindMnistFiles(dir, train));
  KV_ASSIGN_OR_RETURN(IdxInfo info, ReadIdxInfo(f.images));
  KV_RETURN_IF_ERROR(CheckImages(f.images, info));
  // One byte per example: the labels are held whole.
  KV_ASSIGN_OR_RETURN(Tensor labels, ReadIdxFile(f.labels));
  KV_RETURN_IF_ERROR(CheckLabels(f, info.shape[0], labels));
  const int64_t rows = info.shape[1], cols = info.shape[2];
  const Shape row = opts.flat ? Shape({rows * cols}) : Shape({1, rows, cols});
  ExampleReader read = [path = f.images, info, labels, row](
                           const std::vector<int64_t>& examples, Tensor* data,
                           Tensor* label) -> Status {
    KV_ASSIGN_OR_RETURN(Tensor images, ReadIdxRows(path, examples));
    const int64_t k = static_cast<int64_t>(examples.size());
    if (images.shape() != Shape({k, info.shape[1], info.shape[2]})) {
      return Status::DataLoss(path + ": changed while in use: it held " +
                              info.shape.ToString() + " images, now " +
                              std::to_string(k) + " of them read as " +
                              images.shape().ToString());
    }
    std::vector<int64_t> dims = row.dims();
    dims.insert(dims.begin(), k);
    KV_ASSIGN_OR_RETURN(*data, images.Reshape(Shape(dims)));
    *label = Tensor::Empty({k}, DType::kUInt8);
    for (int64_t i = 0; i < k; ++i) {
      label->data<uint8_t>()[i] = labels.data<uint8_t>()[examples[i]];
    }
    return Status::OK();
  };
  return NewPartIter(info.shape[0], row, std::move(read), opts);
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
