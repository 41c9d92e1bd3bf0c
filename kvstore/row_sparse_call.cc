// Row-sparse call checks and table files.
#include "kvstore/row_sparse_call.h"

#include <cstring>

#include "base/file.h"
#include "kvstore/keys.h"
#include "kvstore/sparse/table.h"

namespace kvtrain {
namespace kv {

StatusOr<SparseIds> SparseIdsOnHost(const std::string& name,
                                    const proto::SparseTableSpec& spec,
                                    const Tensor& ids) {
  if (!ids.defined()) {
    return KeyError(Status::Code::kInvalidArgument, name, "row ids are undefined");
  }
  if (ids.dtype() != DType::kInt64) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    std::string("row ids must be int64, got ") + DTypeName(ids.dtype()));
  }
  if (ids.ndim() != 1) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    "row ids must be 1-D, got shape " + ids.shape().ToString());
  }
  SparseIds out;
  if (ids.device().is_cpu()) {
    out.host = ids;
  } else {
    KV_ASSIGN_OR_RETURN(out.host, ids.CopyTo(Device::CPU()));
  }
  out.data = out.host.data<int64_t>();
  out.n = static_cast<size_t>(ids.size());
  KV_RETURN_IF_ERROR(sparse::CheckIds(name, spec, out.data, out.n));
  return out;
}

Status CheckSparseRows(const std::string& name, int64_t width, size_t n,
                       const Tensor& rows, const char* what) {
  if (!rows.defined()) {
    return KeyError(Status::Code::kInvalidArgument, name, std::string(what) + " are undefined");
  }
  if (rows.dtype() != DType::kFloat32) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    std::string(what) + " must be float32, got " + DTypeName(rows.dtype()));
  }
  const Shape want({static_cast<int64_t>(n), width});
  if (rows.shape() != want) {
    return KeyError(Status::Code::kInvalidArgument, name,
                    std::string(what) + " have shape " + rows.shape().ToString() +
                        " but " + std::to_string(n) + " row ids of a table of width " +
                        std::to_string(width) + " need " + want.ToString());
  }
  return Status::OK();
}

StatusOr<SparseIds> CheckRowSparseCall(const std::string& name,
                                       const proto::SparseTableSpec& spec, const Tensor& ids,
                                       const Tensor& rows, const char* what) {
  KV_ASSIGN_OR_RETURN(SparseIds out, SparseIdsOnHost(name, spec, ids));
  KV_RETURN_IF_ERROR(CheckSparseRows(name, spec.width(), out.n, rows, what));
  return out;
}

namespace {
constexpr char kTableFileMagic[8] = {'K', 'V', 'S', 'P', 'F', 'I', 'L', '1'};
}  // namespace

Status WriteTableFile(const std::string& path, const std::vector<std::string>& shards) {
  std::string out(kTableFileMagic, sizeof(kTableFileMagic));
  auto put = [&out](int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(static_cast<int64_t>(shards.size()));
  for (const std::string& shard : shards) {
    put(static_cast<int64_t>(shard.size()));
    out += shard;
  }
  return WriteChecksummedFile(path, out);
}

StatusOr<std::vector<std::string>> ReadTableFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  const Status bad = Status::DataLoss(path + " is not a kvtrain table file");
  size_t pos = 0;
  auto get = [&](int64_t* v) {
    if (bytes.size() - pos < sizeof(*v)) return false;
    std::memcpy(v, bytes.data() + pos, sizeof(*v));
    pos += sizeof(*v);
    return true;
  };
  if (bytes.size() < sizeof(kTableFileMagic) ||
      std::memcmp(bytes.data(), kTableFileMagic, sizeof(kTableFileMagic)) != 0) {
    return bad;
  }
  pos = sizeof(kTableFileMagic);
  int64_t n = 0;
  if (!get(&n) || n <= 0 || n > (1 << 20)) return bad;
  std::vector<std::string> shards;
  for (int64_t i = 0; i < n; ++i) {
    int64_t len = 0;
    if (!get(&len) || len < 0 || static_cast<uint64_t>(len) > bytes.size() - pos) return bad;
    shards.emplace_back(bytes.data() + pos, static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
  }
  if (pos != bytes.size()) return bad;
  return shards;
}

}  // namespace kv
}  // namespace kvtrain
