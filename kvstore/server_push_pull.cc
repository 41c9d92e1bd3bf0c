// ServerHandler's one path for pushes, pulls and push-pulls: a request
// carries this server's keys (one or a worker's bucket of them) with a
// KeyRecord each; every key goes by its own rules, and the request is
// answered once, with one message gathered as the keys' steps complete.
#include <cstring>

#include "kvstore/keys.h"
#include "compression/compression.h"
#include "kvstore/server.h"

namespace kvtrain {
namespace kv {

// The answer to a request of several keys, filled as its keys' steps
// complete (in any order, on any handler thread). Values are copied in when
// known: a key's value may change again before the last key is done.
struct ServerHandler::Gather {
  std::mutex mu;
  ps::RequestMeta meta;
  bool pull = false;
  ps::Blob keys, lens;
  std::vector<size_t> offsets;  // per key, into `values` (one more at the end)
  // offsets.back() bytes, not zeroed; to a worker on this host, in the
  // connection's shared memory (sent without a copy).
  ps::SendBuffer values;
  int remaining = 0;
  Status error;

  // One key is done (its lock held by the caller): the last one answers.
  void Done(ps::KVServer* server) REQUIRES(mu) {
    if (--remaining > 0) return;
    if (!error.ok()) {
      server->RespondError(meta, error);
    } else if (!pull) {
      server->Respond(meta);
    } else {
      ps::KVPairs out;
      out.keys = keys;
      out.lens = lens;
      out.vals = values.blob;
      server->Respond(meta, out);
    }
  }
};

void ServerHandler::Answer(const Deferred& d, KeyState* st, uint64_t key,
                           ps::KVServer* server) {
  // Encoded before the gather's lock: levels take a pass over the value.
  StatusOr<ps::Blob> vals = EncodedValue(st, d);
  if (d.gather == nullptr) {
    if (!vals.ok()) {
      server->RespondError(d.meta(), vals.status());
    } else {
      server->Respond(d.meta(), ps::KVPairs::From({key}, *std::move(vals)));
    }
    return;
  }
  Gather& g = *d.gather;
  std::lock_guard<std::mutex> lock(g.mu);
  const size_t off = g.offsets[d.index], bytes = g.offsets[d.index + 1] - off;
  if (!vals.ok()) {
    if (g.error.ok()) g.error = vals.status();
  } else if (bytes == vals->size()) {
    std::memcpy(g.values.data + off, vals->data(), bytes);
  } else if (g.error.ok()) {
    g.error = KeyError(Status::Code::kInvalidArgument, st->name,
                       "answer of " + std::to_string(bytes) + " bytes sized for " +
                           std::to_string(vals->size()) + " (the key changed size?)");
  }
  g.Done(server);
}

void ServerHandler::Fail(const Deferred& d, const Status& error,
                         ps::KVServer* server) {
  if (d.gather == nullptr) {
    server->RespondError(d.meta(), error);
    return;
  }
  Gather& g = *d.gather;
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.error.ok()) g.error = error;
  g.Done(server);
}

void ServerHandler::Ack(const Deferred& d, ps::KVServer* server) {
  if (d.gather == nullptr) {
    server->Respond(d.meta());
    return;
  }
  Gather& g = *d.gather;
  std::lock_guard<std::mutex> lock(g.mu);
  g.Done(server);
}

void ServerHandler::Serve(const ps::RequestMeta& meta, const ps::KVPairs& data,
                          const proto::RequestInfo& info, ps::KVServer* server) {
  const size_t n = data.num_keys();
  const bool push = meta.push;
  if (n == 0 || (!push && !meta.pull) || (!push && !data.vals.empty())) {
    server->RespondError(meta, Status::InvalidArgument(
                                   "KVStore request from " + meta.sender_name +
                                   (n == 0 ? " has no keys" : " is neither a push nor a pull") +
                                   " (a push or pull names its keys; a pull sends no values)"));
    return;
  }
  StatusOr<std::vector<KeyRecord>> records = DecodeKeyRecords(data, n, meta.sender_name);
  if (!records.ok()) {
    server->RespondError(meta, records.status());
    return;
  }
  // Every key is looked up before any is applied: a request naming a key
  // this server does not hold changes nothing.
  std::vector<KeyState*> states(n);
  for (size_t i = 0; i < n; ++i) {
    states[i] = FindOrRespond(data.key(i), meta, server);
    if (states[i] == nullptr) return;
  }
  // Where each key's pushed values lie (compressed values differ in size
  // from the answer's float32 or halves), and where its answer goes.
  std::vector<size_t> pushed_at = {0};
  if (push) {
    for (size_t i = 0; i < n; ++i) {
      const size_t bytes = data.lens.empty()
                               ? data.vals.size() / n
                               : static_cast<size_t>(data.lens.as<int64_t>()[i]);
      pushed_at.push_back(pushed_at.back() + bytes);
    }
  }
  auto req = std::make_shared<const Request>(Request{meta, info});
  std::shared_ptr<Gather> g;
  if (n > 1) {
    g = std::make_shared<Gather>();
    g->meta = meta;
    g->pull = meta.pull;
    g->remaining = static_cast<int>(n);
    if (meta.pull) {
      g->keys = data.keys;
      std::vector<int64_t> lens;
      g->offsets.push_back(0);
      for (size_t i = 0; i < n; ++i) {
        int64_t size;
        {
          std::lock_guard<std::mutex> lock(states[i]->mu);
          size = states[i]->value.size();
        }
        lens.push_back(static_cast<int64_t>((*records)[i].AnswerBytes(size)));
        g->offsets.push_back(g->offsets.back() + static_cast<size_t>(lens.back()));
      }
      g->lens = ps::Blob::FromVector(std::move(lens));
      // Every byte is written by its key's answer: no zeroing pass.
      g->values = server->NewAnswerBuffer(meta, g->offsets.back());
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Deferred d{req, {}, (*records)[i], g, static_cast<int>(i)};
    d.data.keys = data.keys.Slice(i * sizeof(uint64_t), sizeof(uint64_t));
    if (push) d.data.vals = data.vals.Slice(pushed_at[i], pushed_at[i + 1] - pushed_at[i]);
    KeyState* st = states[i];
    std::lock_guard<std::mutex> lock(st->mu);
    ServeKey(st, data.key(i), d, server);
  }
}

void ServerHandler::ServeKey(KeyState* st, uint64_t key, const Deferred& pushed,
                             ps::KVServer* server) {
  const bool async = pushed.info().mode() == proto::KV_ASYNC;
  if (!pushed.meta().push) {
    if (async) return AnswerAsync(st, key, pushed, server);
    const int64_t step = pushed.rec.step;
    if (pushed.info().exact()) return AnswerExact(st, key, pushed, server);
    if (step <= st->step) return Answer(pushed, st, key, server);
    if (step > st->step + kSyncWindow) {
      return Fail(pushed,
                  KeyError(Status::Code::kInvalidArgument, st->name,
                           pushed.meta().sender_name + " pulled step " + std::to_string(step) +
                               ", more than " + std::to_string(kSyncWindow) +
                               " steps ahead of step " + std::to_string(st->step) +
                               ", the last this server applied"),
                  server);
    }
    if (const std::string why = Blocking(*st, step); !why.empty()) {
      return Fail(pushed, KeyError(Status::Code::kFailedPrecondition, st->name, why), server);
    }
    st->pulls.push_back(pushed);
    return;
  }
  Deferred d = pushed;
  if (d.rec.compression != proto::GradientCompression::NONE) {
    StatusOr<ps::Blob> vals =
        PushedFloats(d.rec, d.data.vals, st->value.size(), st->name, d.meta().sender_name);
    if (!vals.ok()) return Fail(d, vals.status(), server);
    d.data.vals = *vals;
  }
  if (d.data.vals.size() != st->value.nbytes()) {
    return Fail(d,
                KeyError(Status::Code::kInvalidArgument, st->name,
                         "pushed " + std::to_string(d.data.vals.size() / 4) +
                             " values but this server holds " +
                             std::to_string(st->value.size()) + " of it"),
                server);
  }
  if (async) return AsyncPush(st, key, d, server);
  SyncPush(st, key, d, server);
}

}  // namespace kv
}  // namespace kvtrain
