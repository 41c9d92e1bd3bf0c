// Shape helpers.
#include "tensor/shape.h"

namespace kvtrain {

int64_t Shape::NumElements() const { return Product(0, ndim()); }

int64_t Shape::Product(int begin, int end) const {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= dims_[i];
  return n;
}

bool Shape::IsValid() const {
  for (int64_t d : dims_) {
    if (d < 0) return false;
  }
  return true;
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
