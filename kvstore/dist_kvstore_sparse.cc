// DistKVStore's row-sparse keys: each table's rows live on the server
// sparse::ServerOfRow picks; a push sums repeats first and sends each
// server its rows, a pull asks each server for its unique ids and scatters
// the answer back to the caller's order.
#include <cstring>

#include "kvstore/dist_kvstore.h"
#include "kvstore/sparse/rows.h"
#include "kvstore/sparse/table.h"
#include "kvstore/keys.h"
#include "kvstore/row_sparse_call.h"

namespace kvtrain {
namespace kv {
namespace {

// The positions of `ids`, grouped by the server that holds each row.
std::vector<std::vector<uint32_t>> ByServer(const std::vector<int64_t>& ids, int num_servers) {
  std::vector<std::vector<uint32_t>> out(static_cast<size_t>(num_servers));
  for (size_t i = 0; i < ids.size(); ++i) {
    out[static_cast<size_t>(sparse::ServerOfRow(ids[i], num_servers))].push_back(
        static_cast<uint32_t>(i));
  }
  return out;
}

}  // namespace

StatusOr<DistKVStore::TableInfo*> DistKVStore::LookupTable(const Key& key) {
  KV_ASSIGN_OR_RETURN(const uint64_t id, keys_.Id(key));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tables_.find(id);
  if (it != tables_.end()) return &it->second;
  if (info_.count(id)) {
    return KeyError(Status::Code::kInvalidArgument, key.ToString(),
                    "is a dense key: push and pull it with Push and Pull");
  }
  return KeyError(Status::Code::kNotFound, key.ToString(),
                  "was never initialised (call InitRowSparse first)");
}

Status DistKVStore::InitRowSparse(const Key& key, const proto::SparseTableSpec& spec) {
  KV_RETURN_IF_ERROR(CheckWorker("InitRowSparse"));
  KV_RETURN_IF_ERROR(FlushBucket());
  if (rejoining_) {
    return Status::FailedPrecondition(
        po_->name() + " was started again, but workers that come back do not yet go on with "
        "row-sparse tables (" + key.ToString() + "): run the job without --max-restarts");
  }
  const std::string name = key.ToString();
  KV_RETURN_IF_ERROR(sparse::CheckSpec(name, spec));
  KV_ASSIGN_OR_RETURN(const uint64_t id, keys_.Id(key));
  TableInfo ti;
  ti.name = name;
  ti.spec = spec;
  for (const ps::KeyRange& range : po_->ServerKeyRanges()) {
    KV_ASSIGN_OR_RETURN(uint64_t server_key, ServerKey(range, id, 0, name));
    ti.server_keys.push_back(server_key);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (info_.count(id) || tables_.count(id)) {
      return KeyError(Status::Code::kAlreadyExists, name, "already initialised");
    }
    tables_.emplace(id, ti);
  }
  if (rank() == 0) {
    proto::RequestInfo info;
    info.set_mode(sync_ ? proto::KV_SYNC : proto::KV_ASYNC);
    info.set_key_name(name);
    *info.mutable_sparse() = spec;
    ps::RequestOptions opts;
    opts.head = proto::KV_SPARSE_INIT;
  opts.every_copy = true;  // each copy applies it itself
    opts.body = info.SerializeAsString();
    const std::vector<int64_t> lens(ti.server_keys.size(), 0);
    KV_ASSIGN_OR_RETURN(int64_t ts,
                        worker_->Push(ps::KVPairs::From(ti.server_keys, ps::Blob(), lens), opts));
    KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout).Annotate("key " + name));
  }
  return Barrier();
}

StatusOr<KVHandle> DistKVStore::PushRowSparseAsync(const Key& key, const Tensor& ids,
                                                   const Tensor& rows, int priority) {
  KV_RETURN_IF_ERROR(CheckWorker("PushRowSparse"));
  KV_ASSIGN_OR_RETURN(TableInfo * ti, LookupTable(key));
  KV_ASSIGN_OR_RETURN(SparseIds host_ids,
                      CheckRowSparseCall(ti->name, ti->spec, ids, rows, "pushed rows"));
  const int64_t width = ti->spec.width();

  Tensor host_rows = rows;
  if (!rows.device().is_cpu()) {
    KV_ASSIGN_OR_RETURN(host_rows, rows.CopyTo(Device::CPU()));
  }
  sparse::RowSum sum(width);
  sum.Add(host_ids.data, host_ids.n, host_rows.data<float>());

  // Each server's (ids, rows), in server order, in one buffer.
  const int num_servers = static_cast<int>(ti->server_keys.size());
  const std::vector<std::vector<uint32_t>> by_server = ByServer(sum.ids(), num_servers);
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  auto buffer = std::make_shared<std::string>(sum.size() * (sizeof(int64_t) + row_bytes), '\0');
  std::vector<uint64_t> keys;
  std::vector<int64_t> lens;
  char* p = buffer->data();
  for (int s = 0; s < num_servers; ++s) {
    const std::vector<uint32_t>& mine = by_server[static_cast<size_t>(s)];
    // dist_sync: every server hears from every worker each step.
    if (mine.empty() && !sync_) continue;
    keys.push_back(ti->server_keys[static_cast<size_t>(s)]);
    lens.push_back(static_cast<int64_t>(mine.size() * (sizeof(int64_t) + row_bytes)));
    for (uint32_t i : mine) {
      std::memcpy(p, &sum.ids()[i], sizeof(int64_t));
      p += sizeof(int64_t);
    }
    for (uint32_t i : mine) {
      std::memcpy(p, sum.rows().data() + static_cast<size_t>(i) * static_cast<size_t>(width),
                  row_bytes);
      p += row_bytes;
    }
  }
  Pending pending;
  if (keys.empty()) return Track(std::move(pending));  // async, no rows
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step = ++ti->pushes;
  }
  ps::RequestOptions opts;
  opts.head = proto::KV_SPARSE_PUSH;  // the primary passes it on to the copies
  opts.priority = priority;
  opts.body = RequestBody(sync_ ? proto::KV_SYNC : proto::KV_ASYNC, step, "");
  ps::Blob vals(buffer, buffer->data(), buffer->size());
  StatusOr<int64_t> ts = worker_->Push(ps::KVPairs::From(keys, vals, lens), opts);
  if (!ts.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ti->pushes == step) --ti->pushes;  // never left: the step is free again
    return ts.status().Annotate("key " + ti->name);
  }
  pending.timestamps.push_back(*ts);
  pending.names.push_back(ti->name);
  return Track(std::move(pending));
}

StatusOr<KVHandle> DistKVStore::RowSparsePullAsync(const Key& key, const Tensor& ids,
                                                   const Tensor& out, int priority) {
  KV_RETURN_IF_ERROR(CheckWorker("RowSparsePull"));
  KV_ASSIGN_OR_RETURN(TableInfo * ti, LookupTable(key));
  KV_ASSIGN_OR_RETURN(SparseIds host_ids,
                      CheckRowSparseCall(ti->name, ti->spec, ids, out, "output rows"));
  const int64_t width = ti->spec.width();

  std::vector<int64_t> unique;
  auto where = std::make_shared<std::vector<uint32_t>>();
  sparse::UniqueIds(host_ids.data, host_ids.n, &unique, where.get());

  const int num_servers = static_cast<int>(ti->server_keys.size());
  const std::vector<std::vector<uint32_t>> by_server = ByServer(unique, num_servers);
  // The ids each server is asked for, and `slot`: the unique index of each
  // answered row, in answer order.
  auto request_ids = std::make_shared<std::vector<int64_t>>();
  auto slot = std::make_shared<std::vector<uint32_t>>();
  std::vector<uint64_t> keys;
  std::vector<int64_t> id_lens, row_lens;
  const size_t row_bytes = static_cast<size_t>(width) * sizeof(float);
  for (int s = 0; s < num_servers; ++s) {
    const std::vector<uint32_t>& mine = by_server[static_cast<size_t>(s)];
    if (mine.empty()) continue;
    keys.push_back(ti->server_keys[static_cast<size_t>(s)]);
    id_lens.push_back(static_cast<int64_t>(mine.size() * sizeof(int64_t)));
    row_lens.push_back(static_cast<int64_t>(mine.size() * row_bytes));
    for (uint32_t i : mine) {
      request_ids->push_back(unique[i]);
      slot->push_back(i);
    }
  }
  Pending pending;
  auto answer = std::make_shared<std::vector<float>>(unique.size() * static_cast<size_t>(width));
  Tensor dst = out;
  pending.finish = [answer, slot, where, dst, width]() mutable -> Status {
    const size_t wb = static_cast<size_t>(width) * sizeof(float);
    // Unique rows back in unique order, then every requested position.
    std::vector<float> by_unique(answer->size());
    for (size_t k = 0; k < slot->size(); ++k) {
      std::memcpy(by_unique.data() + (*slot)[k] * static_cast<size_t>(width),
                  answer->data() + k * static_cast<size_t>(width), wb);
    }
    Tensor host = dst.device().is_cpu() ? dst : Tensor::Empty(dst.shape());
    float* o = host.data<float>();
    for (size_t i = 0; i < where->size(); ++i) {
      std::memcpy(o + i * static_cast<size_t>(width),
                  by_unique.data() + (*where)[i] * static_cast<size_t>(width), wb);
    }
    if (!dst.device().is_cpu()) KV_RETURN_IF_ERROR(dst.CopyFrom(host));
    return Status::OK();
  };
  if (keys.empty()) return Track(std::move(pending));
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step = ti->pushes;
  }
  ps::RequestOptions opts;
  opts.head = proto::KV_SPARSE_PULL;
  opts.priority = priority;
  opts.body = RequestBody(sync_ ? proto::KV_SYNC : proto::KV_ASYNC, step, "");
  ps::PullDest dest;
  dest.data = reinterpret_cast<char*>(answer->data());
  dest.size = answer->size() * sizeof(float);
  dest.lens = ps::Blob::FromVector(row_lens);
  ps::Blob id_blob(request_ids, request_ids->data(), request_ids->size() * sizeof(int64_t));
  KV_ASSIGN_OR_RETURN(int64_t ts,
                      worker_->PushPull(ps::KVPairs::From(keys, id_blob, id_lens), opts, dest));
  pending.timestamps.push_back(ts);
  pending.names.push_back(ti->name);
  return Track(std::move(pending));
}

Status DistKVStore::SaveRowSparse(const Key& key, const std::string& path) {
  KV_RETURN_IF_ERROR(CheckWorker("SaveRowSparse"));
  KV_ASSIGN_OR_RETURN(TableInfo * ti, LookupTable(key));
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step = ti->pushes;
  }
  ps::RequestOptions opts;
  opts.head = proto::KV_SPARSE_SAVE;
  opts.body = RequestBody(sync_ ? proto::KV_SYNC : proto::KV_ASYNC, step, "");
  const std::vector<int64_t> lens(ti->server_keys.size(), 0);
  KV_ASSIGN_OR_RETURN(int64_t ts,
                      worker_->PushPull(ps::KVPairs::From(ti->server_keys, ps::Blob(), lens), opts));
  ps::PullResult result;
  KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout, &result)
                         .Annotate("key " + ti->name + ": gathering the table's shards"));
  std::vector<std::string> shards;
  for (const ps::KVPairs& part : result.parts) shards.push_back(part.vals.ToString());
  return WriteTableFile(path, shards);
}

StatusOr<std::vector<proto::SparseTableStats>> DistKVStore::RowSparseStats(const Key& key) {
  KV_RETURN_IF_ERROR(CheckWorker("RowSparseStats"));
  KV_ASSIGN_OR_RETURN(TableInfo * ti, LookupTable(key));
  ps::RequestOptions opts;
  opts.head = proto::KV_SPARSE_STATS;
  opts.body = RequestBody(proto::KV_ASYNC, 0, "");
  const std::vector<int64_t> lens(ti->server_keys.size(), 0);
  KV_ASSIGN_OR_RETURN(int64_t ts,
                      worker_->PushPull(ps::KVPairs::From(ti->server_keys, ps::Blob(), lens), opts));
  ps::PullResult result;
  KV_RETURN_IF_ERROR(worker_->Wait(ts, settings_.timeout, &result)
                         .Annotate("key " + ti->name + ": the table's counters"));
  std::vector<proto::SparseTableStats> out;
  for (const ps::KVPairs& part : result.parts) {
    out.emplace_back();
    if (!out.back().ParseFromString(part.vals.ToString())) {
      return KeyError(Status::Code::kDataLoss, ti->name, "malformed table counters");
    }
  }
  return out;
}

Status DistKVStore::LoadRowSparse(const Key& key, const std::string& path) {
  KV_RETURN_IF_ERROR(CheckWorker("LoadRowSparse"));
  KV_ASSIGN_OR_RETURN(TableInfo * ti, LookupTable(key));
  KV_ASSIGN_OR_RETURN(std::vector<std::string> shards, ReadTableFile(path));
  if (shards.size() != ti->server_keys.size()) {
    // Saved by a job of another size (or a local store): cut again.
    StatusOr<std::vector<std::string>> cut = sparse::Table::Reshard(
        ti->name, ti->spec, shards, static_cast<int>(ti->server_keys.size()));
    if (!cut.ok()) return cut.status().Annotate(path);
    shards = std::move(cut).value();
  }
  std::vector<int64_t> lens;
  std::string all;
  for (const std::string& shard : shards) {
    lens.push_back(static_cast<int64_t>(shard.size()));
    all += shard;
  }
  ps::RequestOptions opts;
  opts.head = proto::KV_SPARSE_LOAD;
  opts.every_copy = true;  // each copy applies it itself
  opts.body = RequestBody(proto::KV_SYNC_UNSPECIFIED, 0, "");
  KV_ASSIGN_OR_RETURN(
      int64_t ts,
      worker_->Push(ps::KVPairs::From(ti->server_keys, ps::Blob::FromString(std::move(all)), lens),
                    opts));
  return worker_->Wait(ts, settings_.timeout)
      .Annotate("key " + ti->name + ": restoring the table from " + path);
}

}  // namespace kv
}  // namespace kvtrain
