// KVWorker: slices requests by server key range, tracks the responses, and
// delivers pulled values as views or into caller buffers.
#include <algorithm>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "base/logging.h"
#include "base/trace.h"
#include "transport/ps/answer_poll.h"
#include "transport/ps/postoffice_impl.h"

namespace kvtrain {
namespace ps {
namespace {

// Requests whose Wait polls before it sleeps (answer_poll.h).
constexpr size_t kSmallRequestBytes = 64 << 10;

// Byte offset of each key's value (n + 1 entries) for `lens`, or for an
// equal split of `total` bytes among n keys.
std::vector<size_t> Offsets(const Blob& lens, size_t n, size_t total) {
  std::vector<size_t> off(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    off[i + 1] =
        off[i] +
        (lens.empty() ? total / n : static_cast<size_t>(lens.as<int64_t>()[i]));
  }
  return off;
}

const char* Kind(bool push, bool pull) {
  return push ? (pull ? "push+pull" : "push") : (pull ? "pull" : "command");
}

}  // namespace

class KVWorker::Impl : public Customer {
 public:
  // A process started again numbers its requests above its dead
  // predecessors' (an answer still on its way to one is never taken for
  // one of this process's).
  Impl(PostofficeImpl* po, int app_id)
      : po_(po), app_id_(app_id), next_ts_((int64_t{po->incarnation()} << 40) + 1) {}
  ~Impl() override { po_->UnregisterCustomer(this); }

  int app_id() const override { return app_id_; }
  // `to` > 0: to that node alone (PushTo).
  StatusOr<int64_t> Request(const KVPairs& kvs, bool push, bool pull,
                            const RequestOptions& opts, const PullDest& dest, int to = 0);
  Status Wait(int64_t ts, Duration timeout, PullResult* result);
  void Accept(Message&& msg) override;
  void Abort(const Status& reason) override;
  void PeerLost(int id) override;
  KVWorker::Losses TakeLosses() {
    std::lock_guard<std::mutex> l(mu_);
    KVWorker::Losses out = losses_;
    losses_ = {};
    return out;
  }

 private:
  struct Slice {
    int server = 0;
    size_t key_begin = 0, key_end = 0;  // key indices of the request
    bool answered = false;
    // With server replicas: the key range (-1: a command to every server),
    // what this copy of the request does, and its own timestamp (an alias
    // of the request's; 0 without replicas).
    int range = -1;
    bool primary = false;  // to the range's primary (else to a copy)
    bool push = false, pull = false;
    int64_t sub_ts = 0;
    bool resent = false;
  };
  struct Pending {
    const char* kind = "";
    bool pull = false;
    std::vector<Slice> slices;
    int remaining = 0;
    int copying = 0;  // responses being copied into dest outside mu_
    bool done = false;
    Status status;
    Blob keys;
    PullDest dest;
    std::vector<size_t> dest_off;  // per key, into dest
    std::vector<KVPairs> parts;    // per slice (views)
    std::function<void(const Status&)> callback;
    // At most kSmallRequestBytes pushed and pulled: Wait polls first.
    bool small = false;
    // What a slice needs to be sent again to another copy of its key range
    // (PeerLost): the request, and whether its pushes went to every copy
    // (RequestOptions::every_copy).
    KVPairs kvs;
    RequestOptions opts;
    std::vector<size_t> val_off;
    bool push = false;
    bool replicated = false;
  };

  Status CheckPullDest(const PullDest& dest, size_t n) const;
  // The request's key ranges per server (every live server for no keys):
  // with replicas, to each range's primary, and a push with `every_copy`
  // to each live copy as well.
  std::vector<Slice> SliceByServer(const KVPairs& kvs, const std::vector<KeyRange>& ranges,
                                   bool push, bool pull, bool every_copy) const;
  // The DATA request for slice `s` of `kvs`, under timestamp `ts`.
  Message BuildRequest(int64_t ts, const KVPairs& kvs, const Slice& s,
                       const RequestOptions& opts,
                       const std::vector<size_t>& val_off) const;
  // Erases a request and its slices' timestamps.
  void Erase(std::unordered_map<int64_t, Pending>::iterator it) REQUIRES(mu_);
  Status CheckResponse(const Pending& p, size_t s, const KVPairs& kv) const;
  // Completes `ts` if nothing is outstanding; returns what to run once mu_
  // is released (the request's callback, or the wake-up of its waiter).
  std::function<void()> MaybeFinish(int64_t ts) REQUIRES(mu_);

  PostofficeImpl* const po_;
  const int app_id_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Requests completed so far: a spinning Wait watches it without the lock.
  std::atomic<uint64_t> finished_{0};
  // Whether a request's Wait polls first; set at the first Wait, once the
  // node table says whether the job is on one host.
  std::optional<AnswerPoll> poll_ GUARDED_BY(mu_);
  bool poll_any_size_ GUARDED_BY(mu_) = false;
  std::unordered_map<int64_t, Pending> pending_ GUARDED_BY(mu_);
  // With server replicas: a slice's timestamp -> its request's.
  std::unordered_map<int64_t, int64_t> alias_ GUARDED_BY(mu_);
  int64_t next_ts_ GUARDED_BY(mu_);
  // The last server lost, when, and whether the first answer since to a
  // request it held up is still to be reported: a re-sent slice's, or,
  // when nothing was re-sent (the lost server was a copy its primary
  // waited on), any request's in flight then (timestamp below held_below_).
  std::string lost_name_ GUARDED_BY(mu_);
  Clock::time_point lost_at_ GUARDED_BY(mu_);
  Duration lost_silent_ GUARDED_BY(mu_){};
  bool report_resumed_ GUARDED_BY(mu_) = false;
  int64_t held_below_ GUARDED_BY(mu_) = 0;
  // Servers lost so far (written under mu_, read without it): a request
  // whose slices were cut before a loss that PeerLost handled is cut again
  // (PeerLost never saw it).
  std::atomic<uint64_t> loss_epoch_{0};
  KVWorker::Losses losses_ GUARDED_BY(mu_);
  LogRateLimiter log_;
};

Status KVWorker::Impl::CheckPullDest(const PullDest& dest, size_t n) const {
  if (dest.data == nullptr) return Status::OK();
  if (n == 0) return Status::InvalidArgument("a pull into a buffer needs keys");
  if (!dest.lens.empty()) {
    // Checked like KVPairs::Validate: a negative or wrapping length could
    // otherwise sum to the buffer's size and place a key past its end.
    KV_ASSIGN_OR_RETURN(uint64_t total, SumLens(dest.lens, n, "PullDest.lens"));
    if (total != dest.size) {
      return Status::InvalidArgument(
          "PullDest.lens add up to " + std::to_string(total) +
          " bytes but the buffer has " + std::to_string(dest.size));
    }
    return Status::OK();
  }
  if (dest.size % n != 0) {
    return Status::InvalidArgument(
        "a pull buffer of " + std::to_string(dest.size) +
        " bytes does not split equally among " + std::to_string(n) +
        " keys (give PullDest.lens)");
  }
  return Status::OK();
}

std::vector<KVWorker::Impl::Slice> KVWorker::Impl::SliceByServer(
    const KVPairs& kvs, const std::vector<KeyRange>& ranges, bool push, bool pull,
    bool every_copy) const {
  const size_t n = kvs.num_keys();
  const uint64_t* k = kvs.keys.as<uint64_t>();
  const bool replicas = po_->server_replicas() > 0;
  std::vector<Slice> slices;
  for (size_t r = 0; r < ranges.size(); ++r) {
    Slice s;
    s.server = ServerId(static_cast<int>(r));
    s.push = push;
    s.pull = pull;
    s.key_begin = std::lower_bound(k, k + n, ranges[r].begin) - k;
    s.key_end = std::lower_bound(k, k + n, ranges[r].end) - k;
    if (n > 0 && s.key_end == s.key_begin) continue;
    if (!replicas) {
      slices.push_back(s);
      continue;
    }
    if (n == 0) {  // a command: every live server
      if (po_->ServerLive(static_cast<int>(r))) slices.push_back(s);
      continue;
    }
    s.range = static_cast<int>(r);
    const std::vector<int> copies = po_->RangeServers(s.range);
    for (size_t c = 0; c < copies.size(); ++c) {
      if (c > 0 && !(push && every_copy)) break;
      s.server = copies[c];
      s.primary = c == 0;
      s.pull = pull && c == 0;  // copies take the push only
      slices.push_back(s);
    }
  }
  return slices;
}

Message KVWorker::Impl::BuildRequest(int64_t ts, const KVPairs& kvs,
                                     const Slice& s, const RequestOptions& opts,
                                     const std::vector<size_t>& val_off) const {
  const bool push = s.push, pull = s.pull;
  Message m;
  wire::Header& h = m.meta;
  h.set_command(wire::DATA);
  h.set_app_id(app_id_);
  h.set_timestamp(ts);
  h.set_request(true);
  h.set_push(push);
  h.set_pull(pull);
  h.set_priority(opts.priority);
  h.set_head(opts.head);
  h.set_body(opts.body);
  const size_t kb = s.key_begin, ke = s.key_end;
  // The values go last (see KVServer::Impl::Respond).
  if (ke > kb) m.AddFrame(wire::KEYS, kvs.keys.Slice(kb * 8, (ke - kb) * 8));
  if (ke > kb && !kvs.attrs.empty()) {
    const size_t width = kvs.attrs.size() / kvs.num_keys();
    m.AddFrame(wire::ATTRS, kvs.attrs.Slice(kb * width, (ke - kb) * width));
  }
  if (push && ke > kb) {
    if (!kvs.lens.empty()) {
      m.AddFrame(wire::LENS, kvs.lens.Slice(kb * 8, (ke - kb) * 8));
    }
    m.AddFrame(wire::VALUES,
               kvs.vals.Slice(val_off[kb], val_off[ke] - val_off[kb]));
  } else if (push && kvs.num_keys() == 0 && !kvs.vals.empty()) {
    m.AddFrame(wire::VALUES, kvs.vals);  // a command's payload
  }
  return m;
}

StatusOr<int64_t> KVWorker::Impl::Request(const KVPairs& kvs, bool push,
                                          bool pull, const RequestOptions& opts,
                                          const PullDest& dest, int to) {
  KV_RETURN_IF_ERROR(po_->CheckRunning());
  KV_RETURN_IF_ERROR(kvs.Validate());
  const size_t n = kvs.num_keys();
  if (n > 0 && kvs.key(n - 1) == UINT64_MAX) {
    return Status::InvalidArgument(
        "key 18446744073709551615 (2^64-1) is "
        "reserved");
  }
  if (pull) KV_RETURN_IF_ERROR(CheckPullDest(dest, n));
  uint64_t epoch = loss_epoch_.load(std::memory_order_acquire);
  for (;;) {
    const std::vector<KeyRange> ranges = po_->ServerKeyRanges();
    if (ranges.empty()) {
      return Status::FailedPrecondition("the job has no servers");
    }
    Pending p;
    p.kind = Kind(push, pull);
    p.pull = pull;
    p.keys = kvs.keys;
    p.dest = dest;
    p.callback = opts.callback;
    p.push = push;
    p.replicated = push && opts.every_copy && po_->server_replicas() > 0;
    if (to > 0) {
      Slice s;
      s.server = to;
      s.push = push;
      s.pull = pull;
      s.key_end = n;
      p.slices = {s};
    } else {
      p.slices = SliceByServer(kvs, ranges, push, pull, opts.every_copy);
    }
    if (p.slices.empty())
      return Status::Unavailable("no live server to send the request to");
    p.remaining = static_cast<int>(p.slices.size());
    p.parts.resize(p.slices.size());
    // Pulled size: the buffer's, or as pushed (a pull without a buffer counts
    // as small: its size is not known).
    const size_t pushed = push ? kvs.vals.size() : 0;
    const size_t pulled = !pull ? 0 : dest.data != nullptr ? dest.size : pushed;
    p.small = pushed <= kSmallRequestBytes && pulled <= kSmallRequestBytes;
    if (pull && dest.data != nullptr) {
      p.dest_off = Offsets(dest.lens, n, dest.size);
    }
    const std::vector<size_t> val_off =
        push && n > 0 ? Offsets(kvs.lens, n, kvs.vals.size())
                      : std::vector<size_t>();
    if (po_->server_replicas() > 0) {
      p.kvs = kvs;
      p.opts = opts;
      p.opts.callback = nullptr;
      p.val_off = val_off;
    }
    std::vector<Slice> slices;
    int64_t ts;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (const uint64_t now = loss_epoch_.load(std::memory_order_relaxed); now != epoch) {
        // A server was lost while this request was cut by the ranges
        // before it: cut it again by the ranges after.
        epoch = now;
        continue;
      }
      ts = next_ts_++;
      if (po_->server_replicas() > 0) {
        for (Slice& s : p.slices) {
          s.sub_ts = next_ts_++;
          alias_[s.sub_ts] = ts;
        }
      }
      slices = p.slices;
      pending_.emplace(ts, std::move(p));
    }
    // (A server lost while this sends: PeerLost re-sent its slices already,
    // and the copy sent here to the dead server goes nowhere.)
    for (size_t i = 0; i < slices.size(); ++i) {
      Message m = BuildRequest(slices[i].sub_ts != 0 ? slices[i].sub_ts : ts,
                               kvs, slices[i], opts, val_off);
      Status st = po_->SendData(slices[i].server, &m);
      if (st.ok()) continue;
      std::function<void()> cb;
      {
        std::lock_guard<std::mutex> l(mu_);
        Pending& q = pending_.at(ts);
        if (q.status.ok()) q.status = st;
        q.slices[i].answered = true;
        --q.remaining;
        cb = MaybeFinish(ts);
      }
      if (cb) cb();
    }
    return ts;
  }
}

std::function<void()> KVWorker::Impl::MaybeFinish(int64_t ts) {
  auto it = pending_.find(ts);
  if (it == pending_.end()) return nullptr;
  Pending& p = it->second;
  if (p.remaining > 0 || p.copying > 0) return nullptr;
  p.done = true;
  trace::Instant("van", "answered", "", ts);
  if (!p.callback) {
    finished_.fetch_add(1, std::memory_order_release);
    // The waiter is woken after mu_ is released, so that it does not wake
    // only to block on mu_ again. (This Impl outlives the call: Accept runs
    // under the Postoffice's customer lock, which ~Impl takes.)
    return [this] {
      cv_.notify_all();
    };
  }
  auto cb = std::move(p.callback);
  Status status = p.status;
  Erase(it);
  return [cb = std::move(cb), status] { cb(status); };
}

void KVWorker::Impl::Erase(std::unordered_map<int64_t, Pending>::iterator it) {
  for (const Slice& s : it->second.slices) {
    if (s.sub_ts != 0) alias_.erase(s.sub_ts);
  }
  pending_.erase(it);
}

Status KVWorker::Impl::CheckResponse(const Pending& p, size_t s,
                                     const KVPairs& kv) const {
  KV_RETURN_IF_ERROR(kv.Validate());
  const Slice& sl = p.slices[s];
  const size_t nk = sl.key_end - sl.key_begin;
  if (kv.keys.size() != nk * 8 ||
      (nk > 0 && std::memcmp(kv.keys.data(), p.keys.data() + sl.key_begin * 8,
                             nk * 8) != 0)) {
    return Status::DataLoss("response keys do not match the requested keys");
  }
  if (p.dest.data == nullptr) return Status::OK();
  const std::vector<size_t> got = Offsets(kv.lens, nk, kv.vals.size());
  for (size_t i = 0; i < nk; ++i) {
    const size_t want =
        p.dest_off[sl.key_begin + i + 1] - p.dest_off[sl.key_begin + i];
    if (got[i + 1] - got[i] != want) {
      return Status::InvalidArgument("key " + std::to_string(kv.key(i)) +
                                     ": got " +
                                     std::to_string(got[i + 1] - got[i]) +
                                     " bytes, the pull buffer "
                                     "expects " +
                                     std::to_string(want));
    }
  }
  return Status::OK();
}

void KVWorker::Impl::Accept(Message&& msg) {
  const wire::Header& h = msg.meta;
  int64_t ts = h.timestamp();
  const int64_t slice_ts = ts;
  const int from = h.sender();
  KVPairs kv{msg.Frame(wire::KEYS), msg.Frame(wire::VALUES),
             msg.Frame(wire::LENS)};
  char* copy_to = nullptr;
  std::function<void()> cb;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto alias = alias_.find(ts);
    const bool aliased = !h.request() && alias != alias_.end();
    if (aliased) ts = alias->second;
    auto it = h.request() ? pending_.end() : pending_.find(ts);
    size_t s = 0;
    if (it != pending_.end()) {
      auto& sl = it->second.slices;
      while (s < sl.size() && (sl[s].server != from || sl[s].answered ||
                               (aliased && sl[s].sub_ts != slice_ts))) {
        ++s;
      }
    }
    if (it == pending_.end() || s == it->second.slices.size() ||
        it->second.done) {
      KV_LOG_LIMITED(WARNING, log_)
          << po_->name() << ": dropped an unexpected message (request ts " << ts
          << ") from " << po_->PeerName(from);
      return;
    }
    Pending& p = it->second;
    p.slices[s].answered = true;
    if (report_resumed_ && (p.slices[s].resent || ts < held_below_)) {
      report_resumed_ = false;
      const double since_known = std::chrono::duration<double>(Clock::now() - lost_at_).count();
      const double since_silent = since_known + std::chrono::duration<double>(lost_silent_).count();
      losses_.pause_seconds += since_silent;
      // One line per death in the job's output: worker 0's.
      LOG_IF(WARNING, po_->role() == Role::kWorker && po_->rank() == 0)
          << po_->name() << ": resumed, answered by " << po_->PeerName(from) << " "
          << net::FormatSeconds(since_silent) << " after the last word from " << lost_name_
          << " (" << net::FormatSeconds(since_known) << " after its death was known)";
    }
    Status st;
    if (h.status_code() != 0) {
      st = StatusFromWire(h.status_code(), h.status_message());
    } else if (p.slices[s].pull) {
      st = CheckResponse(p, s, kv);
    }
    if (!st.ok()) {
      if (p.status.ok()) p.status = st.Annotate(po_->PeerName(from));
    } else if (p.slices[s].pull && p.dest.data != nullptr) {
      copy_to = p.dest.data + p.dest_off[p.slices[s].key_begin];
      ++p.copying;
    } else if (p.slices[s].pull) {
      p.parts[s] = kv;
    }
    --p.remaining;
    cb = MaybeFinish(ts);
  }
  if (copy_to != nullptr) {
    if (!kv.vals.empty()) std::memcpy(copy_to, kv.vals.data(), kv.vals.size());
    std::lock_guard<std::mutex> l(mu_);
    auto it = pending_.find(ts);
    if (it != pending_.end()) {
      --it->second.copying;
      cb = MaybeFinish(ts);
      // A Wait that timed out may be waiting for this copy to end.
      if (!cb) cv_.notify_all();
    }
  }
  if (cb) cb();
}

Status KVWorker::Impl::Wait(int64_t ts, Duration timeout, PullResult* result) {
  std::unique_lock<std::mutex> l(mu_);
  auto it = pending_.find(ts);
  if (it == pending_.end()) {
    return Status::NotFound("no request with timestamp " + std::to_string(ts) +
                            " to wait for (already waited for, never issued, "
                            "or it has a callback)");
  }
  if (it->second.callback) {
    return Status::InvalidArgument("request " + std::to_string(ts) +
                                   " has a callback; it cannot be waited for");
  }
  const auto deadline = Clock::now() + timeout;
  auto ready = [&] {
    auto i = pending_.find(ts);
    return i == pending_.end() || (i->second.done && i->second.copying == 0);
  };
  // A small request's answer is polled for first, any request's when the
  // job is on one host (answer_poll.h).
  if (!poll_ && po_->table() != nullptr) {
    poll_.emplace(po_->wait_spin_us());
    poll_any_size_ = po_->one_host();
  }
  if (poll_ && (it->second.small || poll_any_size_) && !ready()) {
    const int poll_us = poll_->Next();
    if (poll_us > 0) poll_->Polled(PollForAnswer(&l, finished_, poll_us, ready));
  }
  const bool answered = cv_.wait_until(l, deadline, ready);
  if (!answered) {
    std::ostringstream os;
    {
      const Pending& p = pending_.at(ts);
      os << po_->name() << ": " << p.kind << " request " << ts
         << " not answered within "
         << std::chrono::duration<double>(timeout).count() << " s by";
      for (const Slice& s : p.slices) {
        if (!s.answered) os << " " << po_->PeerName(s.server);
      }
    }
    // Cancelled: an answer that arrives later finds no request and is
    // dropped, never copied into the caller's buffer (which it may free as
    // soon as this returns). A copy already under way finishes first.
    cv_.wait(l, [&] {
      auto i = pending_.find(ts);
      return i == pending_.end() || i->second.copying == 0;
    });
    if (auto left = pending_.find(ts); left != pending_.end()) Erase(left);
    os << " (cancelled: a later answer is dropped)";
    return Status::DeadlineExceeded(os.str());
  }
  it = pending_.find(ts);
  if (it == pending_.end()) {
    return Status::NotFound("request " + std::to_string(ts) +
                            " was waited for by another thread");
  }
  Pending p = std::move(it->second);
  Erase(it);
  l.unlock();
  if (result != nullptr && po_->server_replicas() > 0) {
    // The answers of the ranges' primaries; backups only took pushes.
    result->parts.clear();
    for (size_t s = 0; s < p.slices.size(); ++s) {
      if (p.slices[s].pull) result->parts.push_back(std::move(p.parts[s]));
    }
  } else if (result != nullptr) {
    result->parts = std::move(p.parts);
  }
  return p.status;
}

void KVWorker::Impl::Abort(const Status& reason) {
  std::vector<std::function<void(const Status&)>> callbacks;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      Pending& p = it->second;
      if (p.status.ok()) p.status = reason;
      p.remaining = 0;
      if (p.callback && p.copying == 0) {
        callbacks.push_back(std::move(p.callback));
        for (const Slice& sl : p.slices) {
          if (sl.sub_ts != 0) alias_.erase(sl.sub_ts);
        }
        it = pending_.erase(it);
        continue;
      }
      if (p.copying == 0) p.done = true;
      ++it;
    }
    finished_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
  }
  for (auto& cb : callbacks) cb(reason);
}

void KVWorker::Impl::PeerLost(int id) {
  std::vector<std::pair<int, Message>> resend;
  std::vector<std::function<void()>> finished;
  {
    std::lock_guard<std::mutex> l(mu_);
    lost_name_ = po_->PeerName(id);
    lost_at_ = Clock::now();
    ++losses_.servers;
    // Silent since: the pause the job sees starts there.
    lost_silent_ = std::chrono::nanoseconds(0);
    if (const NodeTable* t = po_->table(); t != nullptr && t->IndexOf(id) >= 0) {
      lost_silent_ = std::chrono::nanoseconds(
          std::max<int64_t>(0, NowNs() - t->liveness().last_heard_ns(t->IndexOf(id))));
    }
    loss_epoch_.fetch_add(1, std::memory_order_release);
    report_resumed_ = false;
    held_below_ = 0;
    bool in_flight = false;
    std::vector<int64_t> touched;
    // In the order they were first sent.
    std::vector<int64_t> order;
    for (const auto& [ts, p] : pending_) order.push_back(ts);
    std::sort(order.begin(), order.end());
    for (int64_t ts : order) {
      Pending& p = pending_.at(ts);
      if (p.done) continue;
      in_flight = true;
      for (Slice& sl : p.slices) {
        if (sl.answered || sl.server != id) continue;
        // To the range's new primary: the pull, and the push unless it
        // went to every copy (then it reached the new primary already, in
        // order, on the same connection); the primary that died may have
        // applied and passed it on, which the new one recognises.
        const bool again = sl.range >= 0 && sl.primary && (sl.pull || !p.replicated);
        const std::vector<int> copies = again ? po_->RangeServers(sl.range) : std::vector<int>();
        if (copies.empty()) {
          // A copy's share of a push, a command to the lost server, or a
          // request to it alone: nothing more is owed. (A range without
          // any copy fails the job.)
          sl.answered = true;
          --p.remaining;
          touched.push_back(ts);
          continue;
        }
        sl.server = copies[0];
        sl.push = p.push && !p.replicated;
        sl.resent = true;
        alias_.erase(sl.sub_ts);
        sl.sub_ts = next_ts_++;
        alias_[sl.sub_ts] = ts;
        resend.emplace_back(sl.server, BuildRequest(sl.sub_ts, p.kvs, sl, p.opts, p.val_off));
        resend.back().second.meta.set_resent(true);
      }
    }
    report_resumed_ = in_flight;
    if (resend.empty()) held_below_ = next_ts_;
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (int64_t ts : touched) {
      if (auto cb = MaybeFinish(ts)) finished.push_back(std::move(cb));
    }
  }
  for (auto& [to, m] : resend) {
    const Status s = po_->SendData(to, &m);
    LOG_IF(WARNING, !s.ok()) << po_->name() << ": re-sending to " << po_->PeerName(to) << ": "
                             << s;
  }
  for (auto& cb : finished) cb();
}

// ---- KVWorker (public) ----

StatusOr<std::unique_ptr<KVWorker>> KVWorker::Create(Postoffice* po,
                                                     int app_id) {
  auto impl = std::make_unique<Impl>(po->impl(), app_id);
  KV_RETURN_IF_ERROR(po->impl()->RegisterCustomer(impl.get()));
  return std::unique_ptr<KVWorker>(new KVWorker(std::move(impl)));
}

KVWorker::KVWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KVWorker::~KVWorker() = default;

StatusOr<int64_t> KVWorker::Push(const KVPairs& kvs,
                                 const RequestOptions& opts) {
  return impl_->Request(kvs, true, false, opts, PullDest());
}

StatusOr<int64_t> KVWorker::Pull(const Blob& keys, const RequestOptions& opts,
                                 const PullDest& dest) {
  KVPairs kv;
  kv.keys = keys;
  return impl_->Request(kv, false, true, opts, dest);
}

StatusOr<int64_t> KVWorker::Pull(const KVPairs& kvs, const RequestOptions& opts,
                                 const PullDest& dest) {
  if (!kvs.vals.empty()) {
    return Status::InvalidArgument("a pull carries no values (" +
                                   std::to_string(kvs.vals.size()) + " bytes given)");
  }
  return impl_->Request(kvs, false, true, opts, dest);
}

StatusOr<int64_t> KVWorker::PushPull(const KVPairs& kvs,
                                     const RequestOptions& opts,
                                     const PullDest& dest) {
  return impl_->Request(kvs, true, true, opts, dest);
}

Status KVWorker::Wait(int64_t ts, Duration timeout, PullResult* result) {
  return impl_->Wait(ts, timeout, result);
}

KVWorker::Losses KVWorker::TakeLosses() { return impl_->TakeLosses(); }

StatusOr<int64_t> KVWorker::PushToServer(int rank, const KVPairs& kvs,
                                         const RequestOptions& opts) {
  return impl_->Request(kvs, true, false, opts, PullDest(), ServerId(rank));
}

}  // namespace ps
}  // namespace kvtrain
