// dist_allreduce's background thread: the order in which buckets are
// sealed, and their all-reduce (compressed or not) and updates.
#include <glog/logging.h>

#include <cstring>

#include "base/trace.h"
#include "kvstore/allreduce_kvstore.h"

namespace kvtrain {
namespace kv {

uint64_t AllreduceKVStore::Enqueue(std::function<Status()> fn) {
  const uint64_t seq = next_seq_++;
  work_.emplace_back(seq, std::move(fn));
  cv_.notify_all();
  return seq;
}

void AllreduceKVStore::WorkLoop() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [this] { return stop_ || !work_.empty(); });
    if (work_.empty()) return;
    auto item = std::move(work_.front());
    work_.pop_front();
    Status s;
    if (error_.ok()) {
      l.unlock();
      s = item.second();
      l.lock();
    }
    if (!s.ok() && error_.ok()) {
      error_ = s.Annotate("dist_allreduce rank " + std::to_string(rank()));
      LOG(ERROR) << error_;
    }
    done_seq_ = item.first;
    cv_.notify_all();
  }
}

Status AllreduceKVStore::WaitSeq(std::unique_lock<std::mutex>* lock,
                                 uint64_t seq) {
  const bool done = cv_.wait_for(
      *lock, timeout_, [&] { return done_seq_ >= seq || !error_.ok(); });
  if (!error_.ok()) return error_;
  if (!done) {
    return Status::DeadlineExceeded(
        "dist_allreduce rank " + std::to_string(rank()) + ": an all-reduce " +
        "did not finish within KVTRAIN_KVSTORE_TIMEOUT (" +
        std::to_string(timeout_.count() / 1000) +
        " s); do all workers push the same keys?");
  }
  return Status::OK();
}

void AllreduceKVStore::SealOne() {
  const int b = seal_cursor_;
  seal_cursor_ = (seal_cursor_ + 1) % static_cast<int>(buckets_.size());
  Bucket& bucket = buckets_[b];
  if (bucket.pushed == 0) return;
  std::vector<uint64_t> ids;
  for (uint64_t id : bucket.ids) {
    if (store_[id].pending) ids.push_back(id);
  }
  std::vector<float> buffer(bucket.count);
  buffer.swap(bucket.buffer);
  bucket.pushed = 0;
  const uint64_t seq = next_seq_;
  for (uint64_t id : ids) {
    store_[id].pending = false;
    store_[id].last_seq = seq;
  }
  Enqueue(
      [this, b, buffer = std::move(buffer), ids = std::move(ids)]() mutable {
        return ReduceBucket(b, std::move(buffer), std::move(ids));
      });
}

void AllreduceKVStore::SealReady() {
  while (!buckets_.empty()) {
    const Bucket& b = buckets_[seal_cursor_];
    if (b.pushed == 0 || b.pushed < static_cast<int>(b.ids.size())) return;
    SealOne();
  }
}

void AllreduceKVStore::SealThrough(int bucket) {
  for (;;) {
    const int b = seal_cursor_;
    SealOne();
    if (b == bucket) break;
  }
  SealReady();
}

Status AllreduceKVStore::ReduceBucket(int bucket, std::vector<float> buffer,
                                      std::vector<uint64_t> ids) {
  // Offsets and sizes of the pushed members; a partly pushed bucket is
  // compacted so only those travel.
  std::vector<std::pair<size_t, size_t>> parts;  // (offset, count)
  size_t full = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (uint64_t id : ids) {
      const Entry& e = store_[id];
      parts.push_back({e.offset, static_cast<size_t>(e.value.size())});
    }
    full = buckets_[bucket].count;
  }
  size_t total = 0;
  for (auto& p : parts) total += p.second;
  std::vector<float> compact;
  float* data = buffer.data();
  if (total != full) {
    compact.resize(total);
    size_t at = 0;
    for (auto& p : parts) {
      std::memcpy(compact.data() + at, buffer.data() + p.first, p.second * 4);
      at += p.second;
    }
    data = compact.data();
  }
  bool compressed = false;
  for (const auto& p : parts) {
    compressed =
        compressed || compressor_.TypeFor(static_cast<int64_t>(p.second)) !=
                          proto::GradientCompression::NONE;
  }
  if (!compressed) {
    trace::Scope span("kvstore", "allreduce bucket", "",
                      static_cast<int64_t>(total));
    KV_RETURN_IF_ERROR(comm_->AllReduceSum(data, total));
  } else {
    trace::Scope span("kvstore", "allgather compressed bucket", "",
                      static_cast<int64_t>(total));
    KV_RETURN_IF_ERROR(GatherCompressed(ids, parts, data));
  }
  std::lock_guard<std::mutex> l(mu_);
  size_t at = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    Entry& e = store_[ids[i]];
    float* grad_data = data + at;
    at += parts[i].second;
    Tensor grad = Tensor::Wrap(grad_data, e.value.shape(), DType::kFloat32,
                               Device::CPU(), nullptr);
    if (update_.active()) {
      KV_RETURN_IF_ERROR(
          update_.Apply(e.key, keys_.Name(ids[i]), grad, &e.value));
    } else {
      std::memcpy(e.value.data<float>(), grad_data, parts[i].second * 4);
    }
  }
  return Status::OK();
}

Status AllreduceKVStore::GatherCompressed(
    const std::vector<uint64_t>& ids,
    const std::vector<std::pair<size_t, size_t>>& parts, float* data) {
  // Each key's gradient is encoded on its own (with its residual); every
  // rank's encoding of the bucket is gathered, decoded and summed in rank
  // order into `data`, so every rank gets the same bits. The buffers are
  // kept between buckets (one background thread runs this).
  std::string& mine = gather_mine_;
  std::vector<size_t> at = {0};  // each key's place in a rank's block
  std::vector<CompressionType> types;
  for (const auto& p : parts) {
    const int64_t n = static_cast<int64_t>(p.second);
    types.push_back(compressor_.TypeFor(n));
    at.push_back(at.back() + EncodedBytes(types.back(), n));
  }
  mine.resize(at.back());
  size_t total = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t n = static_cast<int64_t>(parts[i].second);
    compressor_.EncodeTo(ids[i], n, data + total, 0, n, mine.data() + at[i]);
    total += parts[i].second;
  }
  const size_t block = mine.size();
  gather_all_.resize(block * static_cast<size_t>(comm_->size()));
  {
    trace::Scope span("kvstore", "allgather", "", static_cast<int64_t>(block));
    KV_RETURN_IF_ERROR(
        comm_->AllGather(mine.data(), block, gather_all_.data()));
  }
  // Rank 0's values decode straight into `data`; the others' are added.
  for (int r = 0; r < comm_->size(); ++r) {
    const char* rank_block =
        gather_all_.data() + static_cast<size_t>(r) * block;
    size_t offset = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t n = static_cast<int64_t>(parts[i].second);
      const char* in = rank_block + at[i];
      const size_t bytes = at[i + 1] - at[i];
      KV_RETURN_IF_ERROR(
          (r == 0 ? Decode(types[i], in, bytes, n, data + offset)
                  : DecodeAdd(types[i], in, bytes, n, data + offset))
              .Annotate("key " + keys_.Name(ids[i]) + " from rank " +
                        std::to_string(r)));
      offset += parts[i].second;
    }
  }
  return Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
