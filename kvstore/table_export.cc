// ExportRowSparseTable: a saved table file's weights as plain rows.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>

#include "base/file.h"
#include "kvstore/row_sparse_call.h"
#include "kvstore/kvstore.h"
#include "kvstore/sparse/table.h"

namespace kvtrain {
namespace {

constexpr char kRowsMagic[8] = {'K', 'V', 'R', 'O', 'W', 'S', '0', '1'};

}  // namespace

StatusOr<TableRows> ReadRowSparseTable(const std::string& table_path) {
  KV_ASSIGN_OR_RETURN(std::vector<std::string> shards, kv::ReadTableFile(table_path));
  TableRows out;
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string key;
    proto::SparseTableSpec spec;
    const Status peek = sparse::Table::PeekShard(shards[i], &key, &spec);
    if (!peek.ok()) {
      return Status::DataLoss(table_path + ": shard " + std::to_string(i) + ": " +
                              peek.message());
    }
    if (i == 0) {
      out.key = key;
      out.spec = spec;
    } else if (key != out.key || spec.SerializeAsString() != out.spec.SerializeAsString()) {
      return Status::DataLoss(table_path + ": shard " + std::to_string(i) + " is of key " +
                              key + ", shard 0 of key " + out.key + " (or their specs differ)");
    }
    KV_ASSIGN_OR_RETURN(std::unique_ptr<sparse::Table> t, sparse::Table::Create(key, spec));
    KV_RETURN_IF_ERROR(t->Load(shards[i]).Annotate(table_path + ": shard " + std::to_string(i)));
    const int64_t w = t->width();
    t->ForEachRow([&](int64_t id, const float* row) {
      out.ids.push_back(id);
      out.rows.insert(out.rows.end(), row, row + w);
    });
  }
  out.width = out.spec.width();
  // By id: the same table always exports alike, however many servers held it.
  std::vector<size_t> order(out.ids.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return out.ids[a] < out.ids[b]; });
  std::vector<int64_t> ids(order.size());
  std::vector<float> rows(out.rows.size());
  const size_t w = static_cast<size_t>(out.width);
  for (size_t i = 0; i < order.size(); ++i) {
    ids[i] = out.ids[order[i]];
    std::memcpy(rows.data() + i * w, out.rows.data() + order[i] * w, w * sizeof(float));
  }
  out.ids = std::move(ids);
  out.rows = std::move(rows);
  return out;
}

Status ExportRowSparseTable(const std::string& table_path, const std::string& out_path,
                            RowExportFormat format) {
  KV_ASSIGN_OR_RETURN(TableRows t, ReadRowSparseTable(table_path));
  std::string bytes;
  const size_t w = static_cast<size_t>(t.width);
  if (format == RowExportFormat::kBinary) {
    auto put = [&bytes](const void* p, size_t n) {
      bytes.append(static_cast<const char*>(p), n);
    };
    const int64_t width = t.width, n = static_cast<int64_t>(t.ids.size());
    put(kRowsMagic, sizeof(kRowsMagic));
    put(&width, sizeof(width));
    put(&n, sizeof(n));
    put(t.ids.data(), t.ids.size() * sizeof(int64_t));
    put(t.rows.data(), t.rows.size() * sizeof(float));
  } else {
    char buf[32];
    bytes.reserve(t.ids.size() * (w * 12 + 12));
    for (size_t i = 0; i < t.ids.size(); ++i) {
      bytes.append(buf, static_cast<size_t>(std::snprintf(buf, sizeof(buf), "%" PRId64,
                                                          t.ids[i])));
      for (size_t c = 0; c < w; ++c) {
        // %.9g: every float32 reads back exactly.
        bytes.append(buf, static_cast<size_t>(
                              std::snprintf(buf, sizeof(buf), " %.9g", t.rows[i * w + c])));
      }
      bytes += '\n';
    }
  }
  return WriteFileAtomic(out_path, bytes);
}

}  // namespace kvtrain
