// Shape helpers.
#include "tensor/shape.h"

namespace kvtrain {

int64_t Shape::NumElements() const { return Product(0, ndim()); }

int64_t Shape::Product(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) {
    if (__builtin_mul_overflow(n, dims_[i], &n)) return INT64_MAX;
  }
  return n;
}

bool Shape::IsValid() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  // Byte counts of the widest dtype must fit too.
  return n <= kMaxElements;
}

std::string Shape::ToString() const {
  std::string s = "(";
  for (int i = 0; i < ndim(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + ")";
}

}  // namespace kvtrain
