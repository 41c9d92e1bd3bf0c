// DType names and sizes.
#include "tensor/dtype.h"

namespace kvtrain {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  LOG(FATAL) << "unknown dtype " << static_cast<int>(dtype);
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUInt8:
      return "uint8";
    case DType::kFloat64:
      return "float64";
  }
  return "unknown";
}

StatusOr<DType> ParseDType(const std::string& name) {
  for (DType d : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kFloat64}) {
    if (name == DTypeName(d)) return d;
  }
  return Status::InvalidArgument(
      "unknown dtype \"" + name +
      "\": expected one of float32, int32, int64, uint8, float64");
}

}  // namespace kvtrain
