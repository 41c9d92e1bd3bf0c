// ServerHandler's multi-key push-pulls: a worker's bucket of keys (or
// pieces) handled together, each key by its own rules, and answered with one
// message gathered as the keys' steps complete.
#include <cstring>
#include <map>

#include "kvstore/common.h"
#include "kvstore/compression.h"
#include "kvstore/server.h"

namespace kvtrain {
namespace kv {

// The answer to one multi-key push-pull, filled as its keys' steps complete
// (in any order, on any handler thread). Values are copied in when known:
// a key's value may change again before the last key is done.
struct ServerHandler::Gather {
  std::mutex mu;
  ps::RequestMeta meta;
  ps::Blob keys, lens;
  std::vector<size_t> offsets;  // per key, into `values` (one more at the end)
  // offsets.back() bytes, not zeroed; to a worker on this host, in the
  // connection's shared memory (sent without a copy).
  ps::SendBuffer values;
  int remaining = 0;
  Status error;
};

void ServerHandler::Answer(const Deferred& d, KeyState* st, uint64_t key,
                           ps::KVServer* server) {
  if (d.gather == nullptr) return RespondValue(st, key, d.meta, d.info, server);
  // Encoded before the gather's lock: levels take a pass over the value.
  StatusOr<ps::Blob> vals = EncodedValue(st, d.info);
  Gather& g = *d.gather;
  std::lock_guard<std::mutex> lock(g.mu);
  const size_t off = g.offsets[d.index], bytes = g.offsets[d.index + 1] - off;
  if (!vals.ok()) {
    if (g.error.ok()) g.error = vals.status();
  } else if (bytes == vals->size()) {
    std::memcpy(g.values.data + off, vals->data(), bytes);
  } else if (g.error.ok()) {
    g.error = KeyError(Status::Code::kInvalidArgument, st->name,
                       "answer of " + std::to_string(bytes / 4) +
                           " values requested but this server holds " +
                           std::to_string(st->value.size()));
  }
  if (--g.remaining > 0) return;
  if (!g.error.ok()) {
    server->RespondError(g.meta, g.error);
    return;
  }
  ps::KVPairs out;
  out.keys = g.keys;
  out.lens = g.lens;
  out.vals = g.values.blob;
  server->Respond(g.meta, out);
}

void ServerHandler::Fail(const Deferred& d, const Status& error,
                         ps::KVServer* server) {
  if (d.gather == nullptr) {
    server->RespondError(d.meta, error);
    return;
  }
  Gather& g = *d.gather;
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.error.ok()) g.error = error;
  if (--g.remaining == 0) server->RespondError(g.meta, g.error);
}

void ServerHandler::Ack(const Deferred& d, ps::KVServer* server) {
  // Multi-key requests are push-pulls: they are answered with values.
  if (d.gather == nullptr) server->Respond(d.meta);
}

void ServerHandler::MultiPush(const ps::RequestMeta& meta,
                              const ps::KVPairs& data,
                              const proto::RequestInfo& info,
                              ps::KVServer* server) {
  const size_t n = data.num_keys();
  if (!meta.pull || n == 0) {
    server->RespondError(meta, Status::InvalidArgument(
                                   "a multi-key push from " + meta.sender_name +
                                   " must be a push-pull of some keys"));
    return;
  }
  std::map<uint64_t, const proto::KeyEntry*> entries;
  for (const proto::KeyEntry& e : info.keys()) entries[e.key()] = &e;
  auto g = std::make_shared<Gather>();
  g->meta = meta;
  g->keys = data.keys;
  g->lens = data.lens;
  g->offsets.push_back(0);
  std::vector<KeyState*> states(n);
  std::vector<proto::RequestInfo> infos(n);
  // Where each key's pushed values lie in the request (compressed values
  // differ in size from the answer's float32 or halves).
  std::vector<size_t> pushed_at = {0};
  std::vector<int64_t> answer_lens;
  bool recoded = false;  // some key's answer differs in size from its push
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = data.key(i);
    auto e = entries.find(key);
    if (e == entries.end()) {
      server->RespondError(
          meta,
          Status::InvalidArgument("multi-key push from " + meta.sender_name +
                                  ": no entry for key " + std::to_string(key)));
      return;
    }
    infos[i] = info;
    infos[i].clear_keys();
    infos[i].set_step(e->second->step());
    infos[i].set_compression(e->second->compression());
    infos[i].set_half_answer(e->second->half_answer());
    infos[i].set_level_bits(e->second->level_bits());
    states[i] = FindOrRespond(key, meta, server);
    if (states[i] == nullptr) return;
    const size_t bytes = data.lens.empty()
                             ? data.vals.size() / n
                             : static_cast<size_t>(data.lens.as<int64_t>()[i]);
    if (pushed_at.back() + bytes > data.vals.size()) {
      server->RespondError(meta, Status::InvalidArgument(
                                     "multi-key push from " + meta.sender_name +
                                     ": its lengths exceed the values sent"));
      return;
    }
    pushed_at.push_back(pushed_at.back() + bytes);
    size_t answer;
    {
      std::lock_guard<std::mutex> lock(states[i]->mu);
      answer = AnswerBytes(states[i]->value.size(), infos[i].half_answer(),
                           static_cast<int>(infos[i].level_bits()));
    }
    // A key pushed with the wrong size is answered with its error (below).
    const bool plain =
        infos[i].compression() == proto::GradientCompression::NONE &&
        !infos[i].half_answer() && infos[i].level_bits() == 0;
    if (plain) answer = bytes;
    recoded = recoded || !plain;
    answer_lens.push_back(static_cast<int64_t>(answer));
    g->offsets.push_back(g->offsets.back() + answer);
  }
  if (recoded) g->lens = ps::Blob::FromVector(answer_lens);
  // Every byte is written by its key's answer: no zeroing pass. (A single
  // key is answered with its value as it is: no gather.)
  if (n > 1) g->values = server->NewAnswerBuffer(meta, g->offsets.back());
  g->remaining = static_cast<int>(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = data.key(i);
    KeyState* st = states[i];
    // A single key is answered with its value as it is (no gather copy).
    Deferred d{meta, {}, infos[i], n == 1 ? nullptr : g, static_cast<int>(i)};
    d.data.keys = data.keys.Slice(i * sizeof(uint64_t), sizeof(uint64_t));
    d.data.vals =
        data.vals.Slice(pushed_at[i], pushed_at[i + 1] - pushed_at[i]);
    std::lock_guard<std::mutex> lock(st->mu);
    if (infos[i].compression() != proto::GradientCompression::NONE) {
      StatusOr<ps::Blob> vals = PushedFloats(
          infos[i], d.data.vals, st->value.size(), st->name, meta.sender_name);
      if (!vals.ok()) {
        Fail(d, vals.status(), server);
        continue;
      }
      d.data.vals = *vals;
    }
    if (d.data.vals.size() != st->value.nbytes()) {
      Fail(d,
           KeyError(Status::Code::kInvalidArgument, st->name,
                    "pushed " + std::to_string(d.data.vals.size() / 4) +
                        " values but this server holds " +
                        std::to_string(st->value.size()) + " of it"),
           server);
    } else if (info.mode() == proto::KV_ASYNC) {
      AsyncPush(st, key, d, server);
    } else {
      SyncPush(st, key, d, server);
    }
  }
}

}  // namespace kv
}  // namespace kvtrain
