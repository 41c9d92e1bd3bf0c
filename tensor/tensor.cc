// Tensor storage, views and copies.
#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#ifdef KVTRAIN_CUDA
#include <cuda_runtime.h>

#include "tensor/cuda_check.h"
#include "tensor/fill_kernels.h"
#endif

namespace kvtrain {
namespace {

constexpr size_t kCpuAlignment = 64;

}  // namespace

StatusOr<std::shared_ptr<Storage>> Storage::Allocate(const Device& device,
                                                     size_t bytes) {
  KV_RETURN_IF_ERROR(CheckDevice(device));
  // Zero-byte tensors still get a distinct, valid pointer.
  const size_t padded =
      ((bytes == 0 ? 1 : bytes) + kCpuAlignment - 1) / kCpuAlignment *
      kCpuAlignment;
  if (device.is_cpu()) {
    void* p = std::aligned_alloc(kCpuAlignment, padded);
    if (p == nullptr) {
      return Status::Unavailable("out of host memory allocating " +
                                 std::to_string(bytes) + " bytes");
    }
    return std::shared_ptr<Storage>(
        new Storage(p, bytes, device, [p] { std::free(p); }));
  }
#ifdef KVTRAIN_CUDA
  KV_CUDA_CHECK(cudaSetDevice(device.id));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, padded);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable("cannot allocate " + std::to_string(bytes) +
                               " bytes on " + device.ToString() + ": " +
                               cudaGetErrorString(err));
  }
  const int id = device.id;
  return std::shared_ptr<Storage>(new Storage(p, bytes, device, [p, id] {
    KV_CUDA_CHECK(cudaSetDevice(id));
    KV_CUDA_CHECK(cudaFree(p));
  }));
#else
  return Status::Internal("unreachable: GPU allocation without CUDA");
#endif
}

std::shared_ptr<Storage> Storage::Wrap(void* data, size_t bytes,
                                       const Device& device,
                                       std::function<void()> release) {
  return std::shared_ptr<Storage>(
      new Storage(data, bytes, device, std::move(release)));
}

Storage::~Storage() {
  if (release_) release_();
}

StatusOr<Tensor> Tensor::Create(const Shape& shape, DType dtype,
                                const Device& device) {
  if (!shape.IsValid()) {
    return Status::InvalidArgument("negative dimension in shape " +
                                   shape.ToString());
  }
  const size_t bytes = shape.NumElements() * DTypeSize(dtype);
  KV_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage,
                      Storage::Allocate(device, bytes));
  return Tensor(std::move(storage), 0, shape, dtype);
}

StatusOr<Tensor> Tensor::CreateZeros(const Shape& shape, DType dtype,
                                     const Device& device) {
  KV_ASSIGN_OR_RETURN(Tensor t, Create(shape, dtype, device));
  KV_RETURN_IF_ERROR(t.SetZero());
  return t;
}

Tensor Tensor::Empty(const Shape& shape, DType dtype, const Device& device) {
  StatusOr<Tensor> t = Create(shape, dtype, device);
  CHECK(t.ok()) << t.status();
  return std::move(t).value();
}

Tensor Tensor::Zeros(const Shape& shape, DType dtype, const Device& device) {
  StatusOr<Tensor> t = CreateZeros(shape, dtype, device);
  CHECK(t.ok()) << t.status();
  return std::move(t).value();
}

Tensor Tensor::FromVector(const std::vector<float>& values,
                          const Shape& shape) {
  CHECK_EQ(static_cast<int64_t>(values.size()), shape.NumElements())
      << "FromVector: " << values.size() << " values for shape "
      << shape.ToString();
  Tensor t = Empty(shape);
  if (!values.empty()) {
    std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(float));
  }
  return t;
}

Tensor Tensor::Wrap(void* data, const Shape& shape, DType dtype,
                    const Device& device, std::function<void()> release) {
  const size_t bytes = shape.NumElements() * DTypeSize(dtype);
  return Tensor(Storage::Wrap(data, bytes, device, std::move(release)), 0,
                shape, dtype);
}

void* Tensor::raw_data() const {
  CHECK(defined()) << "data of an undefined tensor";
  return static_cast<char*>(storage_->data()) + offset_;
}

StatusOr<Tensor> Tensor::Reshape(const Shape& shape) const {
  if (!shape.IsValid() || shape.NumElements() != size()) {
    return Status::InvalidArgument("cannot reshape " + shape_.ToString() +
                                   " (" + std::to_string(size()) +
                                   " elements) to " + shape.ToString());
  }
  return Tensor(storage_, offset_, shape, dtype_);
}

StatusOr<Tensor> Tensor::Slice(int64_t begin, int64_t end) const {
  if (ndim() == 0) {
    return Status::InvalidArgument("cannot slice a scalar");
  }
  if (begin < 0 || end < begin || end > dim(0)) {
    return Status::InvalidArgument(
        "slice [" + std::to_string(begin) + ", " + std::to_string(end) +
        ") out of range for shape " + shape_.ToString());
  }
  Shape s = shape_;
  s[0] = end - begin;
  const size_t row_bytes = shape_.Product(1, ndim()) * DTypeSize(dtype_);
  return Tensor(storage_, offset_ + begin * row_bytes, s, dtype_);
}

Status CopyBytes(void* dst, const Device& dst_device, const void* src,
                 const Device& src_device, size_t bytes) {
  if (bytes == 0 || dst == src) return Status::OK();
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return Status::OK();
  }
#ifdef KVTRAIN_CUDA
  const Device& gpu = dst_device.is_gpu() ? dst_device : src_device;
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(gpu));
  cudaStream_t stream = KV_CUDA_STREAM(ctx);
  KV_CUDA_CHECK(cudaSetDevice(gpu.id));
  if (dst_device.is_gpu() && src_device.is_gpu() &&
      dst_device.id != src_device.id) {
    KV_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.id, src, src_device.id,
                                      bytes, stream));
  } else {
    KV_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  }
  // No wait where the stream orders everything that could observe the
  // copy: a copy within one GPU (the destination is read there, or through
  // a copy that waits), and one from pageable host memory (CUDA has staged
  // the source before returning, so the caller may reuse it). Copies to the
  // host, to another GPU or from pinned host memory wait here.
  if (dst_device == src_device) return Status::OK();
  if (src_device.is_cpu()) {
    cudaPointerAttributes attr;
    KV_CUDA_CHECK(cudaPointerGetAttributes(&attr, src));
    if (attr.type == cudaMemoryTypeUnregistered) return Status::OK();
  }
  KV_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::OK();
#else
  return CheckDevice(dst_device.is_gpu() ? dst_device : src_device);
#endif
}

Status CheckSameShapeAndType(const Tensor& a, const Tensor& b,
                             const std::string& what) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) {
    return Status::InvalidArgument(
        what + ": shape mismatch: " + a.shape().ToString() + " " +
        DTypeName(a.dtype()) + " vs " + b.shape().ToString() + " " +
        DTypeName(b.dtype()));
  }
  return Status::OK();
}

Status Tensor::CopyFrom(const Tensor& src) {
  if (!defined() || !src.defined()) {
    return Status::InvalidArgument("copy involving an undefined tensor");
  }
  KV_RETURN_IF_ERROR(CheckSameShapeAndType(*this, src, "copy"));
  return CopyBytes(raw_data(), device_, src.raw_data(), src.device(),
                   nbytes());
}

StatusOr<Tensor> Tensor::CopyTo(const Device& device) const {
  KV_ASSIGN_OR_RETURN(Tensor out, Create(shape_, dtype_, device));
  KV_RETURN_IF_ERROR(out.CopyFrom(*this));
  return out;
}

Tensor Tensor::Clone() const {
  StatusOr<Tensor> t = CopyTo(device_);
  CHECK(t.ok()) << t.status();
  return std::move(t).value();
}

namespace {

// The element pattern of `value` in `dtype`, as the low bytes of a uint64.
uint64_t Pattern(double value, DType dtype) {
  uint64_t bits = 0;
  switch (dtype) {
    case DType::kFloat32: {
      const float f = static_cast<float>(value);
      std::memcpy(&bits, &f, 4);
      break;
    }
    case DType::kFloat64:
      std::memcpy(&bits, &value, 8);
      break;
    case DType::kInt32: {
      const int32_t i = static_cast<int32_t>(value);
      std::memcpy(&bits, &i, 4);
      break;
    }
    case DType::kInt64: {
      const int64_t i = static_cast<int64_t>(value);
      std::memcpy(&bits, &i, 8);
      break;
    }
    case DType::kUInt8:
      bits = static_cast<uint8_t>(value);
      break;
  }
  return bits;
}

}  // namespace

Status Tensor::Fill(double value) {
  if (!defined()) return Status::InvalidArgument("fill of an undefined tensor");
  const int64_t n = size();
  const size_t esize = DTypeSize(dtype_);
  const uint64_t bits = Pattern(value, dtype_);
  if (device_.is_cpu()) {
    char* p = static_cast<char*>(raw_data());
    if (bits == 0) {
      std::memset(p, 0, nbytes());
      return Status::OK();
    }
    for (int64_t i = 0; i < n; ++i) std::memcpy(p + i * esize, &bits, esize);
    return Status::OK();
  }
#ifdef KVTRAIN_CUDA
  KV_ASSIGN_OR_RETURN(DeviceContext * ctx, DeviceContext::Get(device_));
  KV_CUDA_CHECK(cudaSetDevice(device_.id));
  gpu::FillPattern(raw_data(), n, static_cast<int>(esize), bits,
                   ctx->stream());
  return ctx->Synchronize();
#else
  return CheckDevice(device_);
#endif
}

Status Tensor::SetZero() { return Fill(0.0); }

std::vector<float> Tensor::ToVector() const {
  if (!defined()) return {};
  Tensor host = *this;
  if (device_.is_gpu()) {
    StatusOr<Tensor> h = CopyTo(Device::CPU());
    CHECK(h.ok()) << h.status();
    host = std::move(h).value();
  }
  std::vector<float> out(size());
  const void* p = host.raw_data();
  for (int64_t i = 0; i < size(); ++i) {
    switch (dtype_) {
      case DType::kFloat32:
        out[i] = static_cast<const float*>(p)[i];
        break;
      case DType::kFloat64:
        out[i] = static_cast<float>(static_cast<const double*>(p)[i]);
        break;
      case DType::kInt32:
        out[i] = static_cast<float>(static_cast<const int32_t*>(p)[i]);
        break;
      case DType::kInt64:
        out[i] = static_cast<float>(static_cast<const int64_t*>(p)[i]);
        break;
      case DType::kUInt8:
        out[i] = static_cast<const uint8_t*>(p)[i];
        break;
    }
  }
  return out;
}

std::string Tensor::DebugString(int max_elements) const {
  if (!defined()) return "undefined tensor";
  std::ostringstream os;
  os << DTypeName(dtype_) << " " << shape_.ToString() << " on "
     << device_.ToString() << ": [";
  const std::vector<float> v = ToVector();
  const int64_t shown = std::min<int64_t>(max_elements, v.size());
  for (int64_t i = 0; i < shown; ++i) os << (i ? ", " : "") << v[i];
  if (shown < static_cast<int64_t>(v.size())) os << ", ...";
  os << "]";
  return os.str();
}

bool Tensor::SharesMemoryWith(const Tensor& other) const {
  if (!defined() || !other.defined() || storage_ != other.storage_) {
    return false;
  }
  const size_t a0 = offset_, a1 = offset_ + nbytes();
  const size_t b0 = other.offset_, b1 = other.offset_ + other.nbytes();
  return a0 < b1 && b0 < a1;
}

}  // namespace kvtrain
