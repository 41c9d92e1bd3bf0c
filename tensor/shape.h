// Shape: the dimensions of a Tensor, outermost first.
#ifndef KVTRAIN_TENSOR_SHAPE_H_
#define KVTRAIN_TENSOR_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace kvtrain {

// Value type. A shape with no dimensions is a scalar (one element).
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int ndim() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }

  // At most this many elements (2^60): byte counts of any dtype fit in
  // int64 and size_t.
  static constexpr int64_t kMaxElements = int64_t{1} << 60;

  // Product of the dimensions (1 for a scalar); INT64_MAX when the product
  // overflows (check IsValid first where a shape comes from outside).
  int64_t NumElements() const;
  // True when no dimension is negative and the product is at most
  // kMaxElements (so NumElements() * DTypeSize never overflows).
  bool IsValid() const;
  // Product of dims [begin, end); INT64_MAX when it overflows.
  int64_t Product(int begin, int end) const;

  // "(10, 64)"; a scalar is "()".
  std::string ToString() const;

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  std::vector<int64_t> dims_;
};

}  // namespace kvtrain

#endif  // KVTRAIN_TENSOR_SHAPE_H_
