// The dist stores' buckets: push-pulls of small keys that travel together, one
// multi-key request per server (see DistKVStore::Bucket).
#include "kvstore/dist_kvstore.h"

#include <algorithm>
#include <cstring>

#include "base/trace.h"

namespace kvtrain {
namespace kv {

std::string DistKVStore::Bucket::Names() const {
  std::string names;
  for (const Entry& e : entries) names += (names.empty() ? "" : ", ") + e.name;
  return names;
}

bool DistKVStore::Bucketed(const KeyInfo& ki) const {
  return settings_.bucket_bytes > 0 && ki.parts.size() == 1 &&
         ki.part_bytes[0] < settings_.bucket_bytes;
}

Status DistKVStore::AddToBucket(KeyInfo* ki, const KeyGroup& push, const KeyGroup& pull,
                                int priority, Pending* pending) {
  KV_RETURN_IF_ERROR(Lookup(pull, "pull").status());
  // Zero-copy (PushAsync's contract): copied when the bucket is sent.
  KV_ASSIGN_OR_RETURN(Tensor sum, Reduce(push.tensors));
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step = ++ki->pushes;
  }
  const uint64_t server_key = ki->server_keys[0];
  for (;;) {
    std::shared_ptr<Bucket> b;
    bool full = false;
    {
      std::lock_guard<std::mutex> lock(bucket_mu_);
      if (open_ == nullptr) {
        open_ = std::make_shared<Bucket>();
        open_->priority = priority;
      }
      b = open_;
      bool again = false;
      for (const Bucket::Entry& e : b->entries) again = again || e.server_key == server_key;
      if (!again) {
        b->entries.push_back({push.name, server_key, step, ki, sum, pull.tensors});
        b->bytes += ki->part_bytes[0];
        b->priority = std::max(b->priority, priority);
        full = b->bytes >= settings_.bucket_bytes;
      } else {
        b = nullptr;  // the key waits in this bucket already: send it first
      }
    }
    if (b == nullptr) {
      KV_RETURN_IF_ERROR(FlushBucket());
      continue;
    }
    if (pending->buckets.empty() || pending->buckets.back() != b) pending->buckets.push_back(b);
    trace::Instant("kvstore", "bucket ", push.name, step);
    return full ? FlushBucket() : Status::OK();
  }
}

Status DistKVStore::FlushBucket() {
  std::shared_ptr<Bucket> b;
  std::unique_lock<std::mutex> l;
  {
    // b->mu is taken before the bucket stops being open_: a waiter that
    // finds it no longer open blocks on b->mu until it is sent.
    std::lock_guard<std::mutex> lock(bucket_mu_);
    b.swap(open_);
    if (b == nullptr) return Status::OK();
    l = std::unique_lock<std::mutex>(b->mu);
  }
  const size_t n = b->entries.size();
  b->order.resize(n);
  for (size_t i = 0; i < n; ++i) b->order[i] = i;
  std::sort(b->order.begin(), b->order.end(), [&](size_t x, size_t y) {
    return b->entries[x].server_key < b->entries[y].server_key;
  });
  std::vector<uint64_t> keys;
  std::vector<int64_t> lens;
  auto vals = std::make_shared<std::vector<char>>(b->bytes);
  proto::RequestInfo info;
  info.set_mode(sync_ ? proto::KV_SYNC : proto::KV_ASYNC);
  size_t off = 0;
  for (size_t i : b->order) {
    Bucket::Entry& e = b->entries[i];
    keys.push_back(e.server_key);
    lens.push_back(static_cast<int64_t>(e.value.nbytes()));
    std::memcpy(vals->data() + off, e.value.raw_data(), e.value.nbytes());
    off += e.value.nbytes();
    e.value = Tensor();  // copied: the caller may reuse it once Wait returns
    proto::KeyEntry* k = info.add_keys();
    k->set_key(e.server_key);
    k->set_step(e.step);
  }
  ps::RequestOptions opts;
  opts.head = proto::KV_PUSH;
  opts.body = info.SerializeAsString();
  opts.priority = b->priority;
  opts.dtype = "float32";
  // The answers stay in the received messages until WaitBucket copies each
  // key's part straight into its outputs.
  StatusOr<int64_t> ts = worker_->PushPull(
      ps::KVPairs::From(std::move(keys), ps::Blob(vals, vals->data(), vals->size()),
                        std::move(lens)),
      opts);
  b->sent = true;
  if (!ts.ok()) {
    for (const Bucket::Entry& e : b->entries) UndoPush(e.key, e.step);
    b->status = ts.status().Annotate("keys " + b->Names());
    return b->status;
  }
  b->ts = *ts;
  if (trace::Enabled()) trace::Instant("kvstore", "pushpull bucket of ", std::to_string(n), *ts);
  return Status::OK();
}

Status DistKVStore::WaitBucket(Bucket* b, ps::Duration timeout) {
  std::lock_guard<std::mutex> l(b->mu);
  if (b->waited || !b->status.ok()) return b->status;
  b->waited = true;
  if (!b->sent) return Status::Internal("waiting for a bucket that was never sent");
  ps::PullResult answer;
  {
    trace::Scope span("kvstore", "wait bucket", "", b->ts);
    b->status = worker_->Wait(b->ts, timeout, &answer);
  }
  if (!b->status.ok()) {
    // Server errors name the key already; transport errors do not.
    if (b->status.message().find("key ") == std::string::npos) {
      b->status = b->status.Annotate("keys " + b->Names());
    }
    return b->status;
  }
  // The parts come in server-key order, as the entries were sent.
  size_t next = 0;
  for (const ps::KVPairs& part : answer.parts) {
    size_t off = 0;
    for (size_t k = 0; k < part.num_keys(); ++k, ++next) {
      if (next >= b->order.size()) {
        b->status = Status::DataLoss("a bucket's answer holds more keys than were sent");
        return b->status;
      }
      const Bucket::Entry& e = b->entries[b->order[next]];
      const size_t bytes = part.lens.empty() ? part.vals.size() / part.num_keys()
                                             : static_cast<size_t>(part.lens.as<int64_t>()[k]);
      if (part.key(k) != e.server_key || (!e.outs.empty() && bytes != e.outs[0].nbytes())) {
        b->status = Status::DataLoss("key " + e.name + ": the server's answer does not match");
        return b->status;
      }
      const ps::Blob value = part.vals.Slice(off, bytes);
      off += bytes;
      for (const Tensor& out : e.outs) {
        Tensor view = Tensor::Wrap(const_cast<char*>(value.data()), out.shape(), DType::kFloat32,
                                   Device::CPU(), [value] {});
        b->status = Tensor(out).CopyFrom(view).Annotate("key " + e.name);
        if (!b->status.ok()) return b->status;
      }
    }
  }
  return Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
