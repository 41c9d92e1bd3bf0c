// The dist stores' one path for pushes, pulls and push-pulls: buckets of
// keys and pieces that travel together, one request per server carrying
// that server's keys (see DistKVStore::Bucket).
#include "kvstore/dist_kvstore.h"
#include "kvstore/keys.h"

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

namespace {

// Elements [p.offset, p.offset + p.count) of `t`, as a flat view.
StatusOr<Tensor> PartOf(const Tensor& t, const Part& p) {
  if (p.offset == 0 && p.count == t.size()) return t;
  KV_ASSIGN_OR_RETURN(Tensor flat, t.Reshape(Shape({t.size()})));
  return flat.Slice(p.offset, p.offset + p.count);
}

}  // namespace

Status DistKVStore::AddToBucket(const KeyGroup* push, const KeyGroup* pull, int priority,
                                Pending* pending) {
  const KeyGroup& g = push != nullptr ? *push : *pull;
  KV_ASSIGN_OR_RETURN(KeyInfo * ki, Lookup(g, push != nullptr ? "push" : "pull"));
  if (push != nullptr && pull != nullptr) KV_RETURN_IF_ERROR(Lookup(*pull, "pull").status());
  const Bucket::Kind kind = pull == nullptr ? Bucket::Kind::kPush
                            : push == nullptr ? Bucket::Kind::kPull
                                              : Bucket::Kind::kPushPull;
  // Zero-copy (PushAsync's contract): copied when the bucket is sent.
  // Reduced before the push takes its step: a failed reduce leaves the
  // key's step counter alone.
  Tensor sum;
  if (push != nullptr) {
    KV_ASSIGN_OR_RETURN(sum, Reduce(push->tensors));
  }
  int64_t step;
  {
    std::lock_guard<std::mutex> lock(mu_);
    step = push != nullptr ? ++ki->pushes : ki->pushes;
  }
  const int64_t size = ki->shape.NumElements();
  const CompressionType compression =
      push != nullptr ? compressor_.TypeFor(size) : proto::GradientCompression::NONE;
  // Coded answers (fp16 halves, the step's sum as levels) for push-pulls.
  const bool half = kind == Bucket::Kind::kPushPull && compressor_.HalfAnswer(size);
  const int levels = kind == Bucket::Kind::kPushPull ? LevelAnswer(size) : 0;
  // Each piece is an entry of its own; a key's pieces fill buckets in
  // element order, so its first pieces leave while the rest are added.
  for (size_t j = 0; j < ki->parts.size(); ++j) {
    const Part& part = ki->parts[j];
    Bucket::Entry entry;
    entry.name = g.name;
    entry.server_key = ki->server_keys[j];
    entry.step = step;
    entry.key = ki;
    entry.count = part.count;
    entry.compression = compression;
    entry.half = half;
    entry.levels = levels;
    if (push != nullptr) {
      entry.value =
          PartValue(g.id, *ki, j, sum, compression != proto::GradientCompression::NONE);
    }
    if (pull != nullptr) {
      for (const Tensor& out : pull->tensors) {
        KV_ASSIGN_OR_RETURN(Tensor piece, PartOf(out, part));
        entry.outs.push_back(std::move(piece));
      }
    }
    // A bucket fills by what its entries move on the wire, the heavier way:
    // a compressed piece's push, or its answer (float32, halves or levels).
    // So a key's small compressed pieces travel together, while pieces
    // answered in float32 still go one by one, overlapping their answers.
    const int64_t answer =
        pull != nullptr ? static_cast<int64_t>(AnswerBytes(part.count, half, levels)) : 0;
    const int64_t bytes = std::max(static_cast<int64_t>(entry.value.size()), answer);
    // A piece of a key cut in several travels in a request of at most
    // piece_bytes, so that its answer can come back while the next one is
    // still going out; whole keys fill requests up to bucket_bytes.
    const int64_t limit = ki->parts.size() > 1 && settings_.piece_bytes > 0
                              ? settings_.piece_bytes
                              : settings_.bucket_bytes;
    for (;;) {
      std::shared_ptr<Bucket> b;
      bool full = false;
      {
        std::lock_guard<std::mutex> lock(bucket_mu_);
        if (open_ != nullptr && open_->entries.empty()) {
          open_->kind = kind;
          b = open_;
        } else if (open_ != nullptr) {
          bool again = false;
          for (const Bucket::Entry& e : open_->entries) {
            again = again || e.server_key == entry.server_key;
          }
          // The key waits in this bucket already, the bucket is of another
          // kind, or this piece would overfill it: send the bucket first.
          if (!again && open_->kind == kind && open_->bytes + bytes <= limit) b = open_;
        } else {
          open_ = std::make_shared<Bucket>();
          open_->kind = kind;
          open_->priority = priority;
          b = open_;
        }
        if (b != nullptr) {
          b->entries.push_back(std::move(entry));
          b->bytes += bytes;
          b->priority = std::max(b->priority, priority);
          full = b->bytes >= limit;
        }
      }
      if (b == nullptr) {
        KV_RETURN_IF_ERROR(FlushBucket());
        continue;
      }
      if (pending->buckets.empty() || pending->buckets.back() != b) pending->buckets.push_back(b);
      if (full) KV_RETURN_IF_ERROR(FlushBucket());
      break;
    }
  }
  trace::Instant("kvstore", "bucket ", g.name, step);
  return Status::OK();
}

void DistKVStore::BucketRequest(Bucket* b, std::vector<uint64_t>* keys,
                                std::vector<int64_t>* lens,
                                std::vector<KeyRecord>* records) const {
  const size_t n = b->entries.size();
  b->order.resize(n);
  for (size_t i = 0; i < n; ++i) b->order[i] = i;
  std::sort(b->order.begin(), b->order.end(), [&](size_t x, size_t y) {
    return b->entries[x].server_key < b->entries[y].server_key;
  });
  // Each key says its encoding (keys below min_bytes travel as float32).
  for (size_t i : b->order) {
    const Bucket::Entry& e = b->entries[i];
    keys->push_back(e.server_key);
    if (b->push()) lens->push_back(static_cast<int64_t>(e.value.size()));
    KeyRecord r;
    r.step = e.step;
    r.compression = static_cast<uint8_t>(e.compression);
    r.half = e.half ? 1 : 0;
    r.level_bits = static_cast<uint8_t>(e.levels);
    records->push_back(r);
  }
}

ps::Blob DistKVStore::JoinValues(const Bucket& b) {
  // One entry (a large key's piece) goes out as it is.
  if (b.entries.size() == 1) return b.entries[0].value;
  size_t total = 0;
  for (const Bucket::Entry& e : b.entries) total += e.value.size();
  // Every byte is copied in below: no zeroing pass.
  std::shared_ptr<char[]> all(new char[std::max<size_t>(total, 1)]);
  size_t off = 0;
  for (size_t i : b.order) {
    const ps::Blob& v = b.entries[i].value;
    std::memcpy(all.get() + off, v.data(), v.size());
    off += v.size();
  }
  return ps::Blob(all, all.get(), total);
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
  std::vector<uint64_t> keys;
  std::vector<int64_t> lens;
  std::vector<KeyRecord> records;
  BucketRequest(b.get(), &keys, &lens, &records);
  ps::KVPairs kvs = ps::KVPairs::From(std::move(keys), ps::Blob(), std::move(lens));
  kvs.attrs = EncodeKeyRecords(records);
  if (b->push()) {
    kvs.vals = JoinValues(*b);
    for (Bucket::Entry& e : b->entries) e.value = ps::Blob();
  }
  proto::RequestInfo info;
  SetMode(&info);
  if (const int64_t resume = resume_step_.load(); resume >= 0 && sync_) {
    // A worker started again: it first reads the values the job had after
    // the step it goes on from, then pushes that step's successor, which
    // its dead process may have pushed in part.
    if (b->kind == Bucket::Kind::kPull && exact_pulls_.load()) info.set_exact(true);
    if (b->push()) {
      exact_pulls_.store(false);
      if (b->entries[0].step == resume + 1) info.set_replay(true);
    }
  }
  ps::RequestOptions opts;
  opts.head = b->push() ? proto::KV_PUSH : proto::KV_PULL;
  opts.body = info.SerializeAsString();
  opts.priority = b->priority;
  // One entry with one host output: the transport copies the answer
  // straight into it as it arrives (while the step waits for other pieces).
  // Otherwise the answers stay in the received messages until WaitBucket
  // copies each key's part into its outputs.
  ps::PullDest dest;
  const Bucket::Entry& only = b->entries[0];
  if (b->pull() && n == 1 && only.outs.size() == 1 && only.outs[0].device().is_cpu() &&
      !only.half && only.levels == 0) {
    dest.data = static_cast<char*>(only.outs[0].raw_data());
    dest.size = only.outs[0].nbytes();
    b->landed = true;
  }
  const int64_t issued_us = trace::Enabled() ? trace::NowUs() : 0;
  StatusOr<int64_t> ts = b->kind == Bucket::Kind::kPush ? worker_->Push(kvs, opts)
                         : b->kind == Bucket::Kind::kPull
                             ? worker_->Pull(kvs, opts, dest)
                             : worker_->PushPull(kvs, opts, dest);
  b->sent = true;
  if (!ts.ok()) {
    if (b->push()) {
      for (const Bucket::Entry& e : b->entries) UndoPush(e.key, e.step);
    }
    b->status = ts.status().Annotate("keys " + b->Names());
    return b->status;
  }
  b->ts = *ts;
  if (trace::Enabled()) {
    const char* what = b->kind == Bucket::Kind::kPush   ? "push bucket of "
                       : b->kind == Bucket::Kind::kPull ? "pull bucket of "
                                                        : "pushpull bucket of ";
    trace::InstantAt(issued_us, "kvstore", what, std::to_string(n), *ts);
  }
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
    b->status = b->landed ? worker_->Wait(b->ts, timeout) : worker_->Wait(b->ts, timeout, &answer);
  }
  if (!b->status.ok()) {
    // Server errors name the key already; transport errors do not.
    if (b->status.message().find("key ") == std::string::npos) {
      b->status = b->status.Annotate("keys " + b->Names());
    }
    return b->status;
  }
  if (b->landed) return Status::OK();
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
      const size_t want = AnswerBytes(e.count, e.half, e.levels);
      if (part.key(k) != e.server_key || bytes != want || off + bytes > part.vals.size()) {
        b->status = Status::DataLoss("key " + e.name + ": the server's answer does not match");
        return b->status;
      }
      ps::Blob value = part.vals.Slice(off, bytes);
      off += bytes;
      if (e.half || e.levels > 0) {
        // Halves are copied out first, for their alignment.
        std::vector<char> aligned;
        const char* in = value.data();
        if (e.half) {
          aligned.assign(value.data(), value.data() + bytes);
          in = aligned.data();
        }
        // Decoded straight into a single host output.
        const bool direct = e.outs.size() == 1 && e.outs[0].device().is_cpu() &&
                            e.outs[0].size() == e.count;
        std::vector<float> floats(direct ? 0 : static_cast<size_t>(e.count));
        float* out = direct ? static_cast<float*>(e.outs[0].raw_data()) : floats.data();
        b->status = DecodeAnswer(in, e.count, e.half, e.levels, out).Annotate("key " + e.name);
        if (!b->status.ok()) return b->status;
        if (direct) continue;
        value = ps::Blob::FromVector(std::move(floats));
      }
      for (const Tensor& out : e.outs) {
        Tensor view = Tensor::Wrap(const_cast<char*>(value.data()), out.shape(), DType::kFloat32,
                                   Device::CPU(), [value] {});
        b->status = Tensor(out).CopyFrom(view).Annotate("key " + e.name);
        if (!b->status.ok()) return b->status;
      }
    }
  }
  if (b->pull() && next != b->order.size()) {
    b->status = Status::DataLoss("keys " + b->Names() + ": the servers answered " +
                                 std::to_string(next) + " of " +
                                 std::to_string(b->order.size()) + " keys");
  }
  return b->status;
}

}  // namespace kv
}  // namespace kvtrain
