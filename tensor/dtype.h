// Element types a Tensor can hold.
#ifndef KVTRAIN_TENSOR_DTYPE_H_
#define KVTRAIN_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace kvtrain {

enum class DType : uint8_t {
  kFloat32 = 0,
  kInt32 = 1,
  kInt64 = 2,
  kUInt8 = 3,
  kFloat64 = 4,
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// "float32", "int32", "int64", "uint8", "float64".
const char* DTypeName(DType dtype);
// Inverse of DTypeName; an unknown name is an error listing the known ones.
StatusOr<DType> ParseDType(const std::string& name);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kFloat64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kUInt8;
};

}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_DTYPE_H_
