// Tensor: a shape, a dtype and a view into reference-counted storage on a
// device. CPU storage is 64-byte aligned; GPU storage comes from cudaMalloc.
// Views (Reshape, Slice) share storage with the tensor they come from; copies
// between devices go through CopyFrom.
#ifndef KVTRAIN_TENSOR_TENSOR_H_
#define KVTRAIN_TENSOR_TENSOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/shape.h"

namespace kvtrain {

// A block of device memory. Owned through shared_ptr by the tensors viewing it.
class Storage {
 public:
  // Allocates `bytes` on `device` (uninitialised).
  static StatusOr<std::shared_ptr<Storage>> Allocate(const Device& device,
                                                     size_t bytes);
  // Wraps memory owned elsewhere; `release` runs when the last view is gone.
  static std::shared_ptr<Storage> Wrap(void* data, size_t bytes,
                                       const Device& device,
                                       std::function<void()> release);
  ~Storage();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

 private:
  Storage(void* data, size_t bytes, const Device& device,
          std::function<void()> release)
      : data_(data), bytes_(bytes), device_(device),
        release_(std::move(release)) {}

  void* data_;
  size_t bytes_;
  Device device_;
  std::function<void()> release_;
};

// Value type with shared storage: copying a Tensor makes another view of the
// same memory (use Clone() for a deep copy). Not thread-safe for concurrent
// writes to the same memory; distinct tensors may be used from any thread.
class Tensor {
 public:
  // An undefined tensor (no storage).
  Tensor() = default;

  // Allocates a tensor; errors for negative dimensions or unusable devices.
  static StatusOr<Tensor> Create(const Shape& shape,
                                 DType dtype = DType::kFloat32,
                                 const Device& device = Device::CPU());
  // As Create, zero-filled.
  static StatusOr<Tensor> CreateZeros(const Shape& shape,
                                      DType dtype = DType::kFloat32,
                                      const Device& device = Device::CPU());
  // Convenience for code that already validated shape and device: CHECK-fails
  // instead of returning an error.
  static Tensor Empty(const Shape& shape, DType dtype = DType::kFloat32,
                      const Device& device = Device::CPU());
  static Tensor Zeros(const Shape& shape, DType dtype = DType::kFloat32,
                      const Device& device = Device::CPU());
  // A CPU float32 tensor holding `values`; their count must match `shape`.
  static Tensor FromVector(const std::vector<float>& values,
                           const Shape& shape);
  // Zero-copy view of memory owned elsewhere (e.g. a received message frame).
  static Tensor Wrap(void* data, const Shape& shape, DType dtype,
                     const Device& device, std::function<void()> release);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return shape_.ndim(); }
  int64_t dim(int i) const { return shape_[i]; }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  int64_t size() const { return shape_.NumElements(); }
  size_t nbytes() const { return size() * DTypeSize(dtype_); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw_data() const;
  // Typed access; a dtype mismatch is a programmer bug (CHECK).
  template <typename T>
  T* data() const {
    CHECK(dtype_ == DTypeOf<T>::value)
        << "tensor holds " << DTypeName(dtype_) << ", accessed as "
        << DTypeName(DTypeOf<T>::value);
    return static_cast<T*>(raw_data());
  }

  // A view with another shape of the same number of elements.
  StatusOr<Tensor> Reshape(const Shape& shape) const;
  // A view of rows [begin, end) along the first dimension.
  StatusOr<Tensor> Slice(int64_t begin, int64_t end) const;

  // Copies `src` into this tensor (shapes and dtypes must match; devices may
  // differ). Returns when the copy is complete, except where the GPU's
  // stream orders it for every reader (CopyBytes).
  Status CopyFrom(const Tensor& src);
  // A new tensor on `device` holding a copy of this one.
  StatusOr<Tensor> CopyTo(const Device& device) const;
  // A deep copy on the same device.
  Tensor Clone() const;

  // Sets every element to `value` (converted to the dtype).
  Status Fill(double value);
  Status SetZero();

  // Copies the elements to host memory, converted to float (any dtype, any
  // device). For tests and debugging.
  std::vector<float> ToVector() const;
  // "float32 (2, 3) on cpu(0): [1, 2, 3, ...]".
  std::string DebugString(int max_elements = 8) const;

  // True when both tensors view the same bytes of the same storage.
  bool SharesMemoryWith(const Tensor& other) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t offset, const Shape& shape,
         DType dtype)
      : storage_(std::move(storage)), offset_(offset), shape_(shape),
        dtype_(dtype), device_(storage_->device()) {}

  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes from storage_->data()
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  Device device_;
};

// Copies `bytes` between any two devices. Returns when done, except for a
// copy within one GPU or from pageable host memory to a GPU: that one is
// queued on the GPU's stream, which orders it before every later use there,
// and the source may be reused at once.
Status CopyBytes(void* dst, const Device& dst_device, const void* src,
                 const Device& src_device, size_t bytes);

// "shape mismatch: (2, 3) vs (3, 2)"-style helper shared by callers that
// check two tensors against each other.
Status CheckSameShapeAndType(const Tensor& a, const Tensor& b,
                             const std::string& what);

}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_TENSOR_H_
