// Row-sparse values on the way to a table: unique ids with their rows summed
// (RowSum), and the unique ids of a pull with where each request lands
// (UniqueIds). Both keep first-appearance order, so the same input always
// gives the same output.
#ifndef KVTRAIN_KVSTORE_SPARSE_ROWS_H_
#define KVTRAIN_KVSTORE_SPARSE_ROWS_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "kvstore/sparse/row_index.h"

namespace kvtrain {
namespace sparse {

// Sums rows of `width` floats by id. Not thread-safe.
class RowSum {
 public:
  explicit RowSum(int64_t width) : width_(width) {}

  int64_t width() const { return width_; }
  size_t size() const { return ids_.size(); }
  const std::vector<int64_t>& ids() const { return ids_; }
  const std::vector<float>& rows() const { return rows_; }

  // Adds n rows (n x width floats) under their ids.
  void Add(const int64_t* ids, size_t n, const float* rows) {
    for (size_t i = 0; i < n; ++i) {
      const float* src = rows + static_cast<int64_t>(i) * width_;
      uint32_t* at = index_.Find(ids[i]);
      if (at == nullptr) {
        index_.Insert(ids[i], static_cast<uint32_t>(ids_.size()));
        ids_.push_back(ids[i]);
        rows_.insert(rows_.end(), src, src + width_);
        continue;
      }
      float* dst = rows_.data() + static_cast<int64_t>(*at) * width_;
      for (int64_t j = 0; j < width_; ++j) dst[j] += src[j];
    }
  }
  void Clear() {
    ids_.clear();
    rows_.clear();
    index_.Clear();
  }

 private:
  int64_t width_;
  std::vector<int64_t> ids_;
  std::vector<float> rows_;
  RowIndex index_;
};

// unique <- ids without repeats (first appearance order); where[i] <- the
// position of ids[i] in unique.
inline void UniqueIds(const int64_t* ids, size_t n, std::vector<int64_t>* unique,
                      std::vector<uint32_t>* where) {
  unique->clear();
  where->resize(n);
  RowIndex index;
  for (size_t i = 0; i < n; ++i) {
    uint32_t* at = index.Find(ids[i]);
    if (at == nullptr) {
      (*where)[i] = static_cast<uint32_t>(unique->size());
      index.Insert(ids[i], (*where)[i]);
      unique->push_back(ids[i]);
    } else {
      (*where)[i] = *at;
    }
  }
}

}  // namespace sparse
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SPARSE_ROWS_H_
