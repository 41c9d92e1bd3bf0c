// The checks of a row-sparse call (ids and rows), and a row-sparse key's
// saved table file.
#ifndef KVTRAIN_KVSTORE_ROW_SPARSE_CALL_H_
#define KVTRAIN_KVSTORE_ROW_SPARSE_CALL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/kvstore.pb.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace kv {

// A row-sparse call's row ids, checked (int64, 1-D, valid for `spec`) and
// on the host.
struct SparseIds {
  Tensor host;
  const int64_t* data = nullptr;
  size_t n = 0;
};
StatusOr<SparseIds> SparseIdsOnHost(const std::string& name,
                                    const proto::SparseTableSpec& spec,
                                    const Tensor& ids);
// Checks that `rows` is float32 (n, width); errors name the key, `what`
// ("pushed rows", "pull output") and the shapes.
Status CheckSparseRows(const std::string& name, int64_t width, size_t n,
                       const Tensor& rows, const char* what);
// Both checks of a row-sparse push (`rows`: the gradients) or pull (the
// output): the ids on the host.
StatusOr<SparseIds> CheckRowSparseCall(const std::string& name,
                                       const proto::SparseTableSpec& spec, const Tensor& ids,
                                       const Tensor& rows, const char* what);

// A row-sparse key's saved table: its shards (one per server; one for the
// non-distributed types) in one checksummed file. Errors name the file.
Status WriteTableFile(const std::string& path, const std::vector<std::string>& shards);
StatusOr<std::vector<std::string>> ReadTableFile(const std::string& path);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_ROW_SPARSE_CALL_H_
