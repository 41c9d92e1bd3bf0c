// Table: one shard of a row-sparse key (proto::SparseTableSpec) as a server
// or a local store holds it. Rows live in arenas of fixed-size chunks (a
// row's weights followed by its optimizer state), found through a RowIndex:
// no allocation per row. A row exists once an update touched it (after
// admission); until then reads answer its initial value, which depends only
// on (seed, key name, row id), so the values a job sees do not depend on how
// many servers share the table. Updates are lazy: only the rows a step
// touched change, with the rule of the store's OptimizerSpec (ops/optimizer.h
// kernels on each row, optimizer state only for touched rows).
#ifndef KVTRAIN_KVSTORE_SPARSE_TABLE_H_
#define KVTRAIN_KVSTORE_SPARSE_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvstore/sparse/row_index.h"
#include "ops/optimizer.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace sparse {

// What a table holds and has done (one shard).
struct TableStats {
  int64_t rows = 0;           // held now
  int64_t created = 0;        // rows created (admitted)
  int64_t evicted = 0;        // dropped by the max_rows cap
  int64_t expired = 0;        // dropped after expire_after updates unseen
  int64_t pending = 0;        // ids seen but not yet admitted
  int64_t dropped_grads = 0;  // gradient rows of ids not yet admitted
  int64_t updates = 0;        // the table's updates (steps)
  int64_t bytes = 0;          // arena, index and counters
  int64_t admission_resets = 0;  // counters started again at max_pending
  // "rows 12 created 15 evicted 0 expired 3 pending 4 dropped 9 bytes 4096".
  std::string ToString() const;
  proto::SparseTableStats ToProto() const;
};

// The admission counters a table keeps at most (SparseTableSpec.max_pending
// and its default).
int64_t MaxPending(const proto::SparseTableSpec& spec);

// Checks a spec; errors name `key` and the field.
Status CheckSpec(const std::string& key, const proto::SparseTableSpec& spec);

// Checks row ids against the spec: an error naming `key`, the position and
// the id for a negative id or one >= num_rows.
Status CheckIds(const std::string& key, const proto::SparseTableSpec& spec,
                const int64_t* ids, size_t n);

// The server (of `num_servers`) that holds row `id` of every table.
inline int ServerOfRow(int64_t id, int num_servers) {
  return static_cast<int>(Mix64(static_cast<uint64_t>(id) ^ 0x5bd1e995ULL) %
                          static_cast<uint64_t>(num_servers));
}

// Not thread-safe: the caller serialises calls (a lock per key).
class Table {
 public:
  // `key`: the user's name of the key ("emb" or "3"), which seeds the
  // initial values and names the key in errors.
  static StatusOr<std::unique_ptr<Table>> Create(const std::string& key,
                                                 const proto::SparseTableSpec& spec);

  const std::string& key() const { return key_; }
  const proto::SparseTableSpec& spec() const { return spec_; }
  int64_t width() const { return width_; }

  // Row `id`'s initial value into out[width].
  void InitialRow(int64_t id, float* out) const;

  // Copies the rows of `ids` (n, any order, repeats allowed) into
  // out[n x width]: the held row, or the initial value of one not held.
  // With `use`, counts as a use of the held rows (recency, expiry). Ids
  // must have passed CheckIds.
  void Read(const int64_t* ids, size_t n, float* out, bool use = true);

  // One update of the table: `ids` unique, `grads` n x width. With an
  // optimizer (the spec's own, else `optimizer`, which may be null), each
  // touched row (created or admitted as needed) is updated by its rule at
  // the table's update count; without one, it becomes its gradient (the
  // step's sum). Then rows unseen for expire_after updates are dropped. Ids
  // must have passed CheckIds; the rule's state must not change kind once
  // rows exist (an error naming the key).
  Status Update(const int64_t* ids, size_t n, const float* grads,
                const Optimizer* optimizer);

  TableStats stats() const;

  // The shard: spec, counters, every held row with its state and recency,
  // the admission counters. Load replaces the table's contents with a
  // saved shard of the same key and spec (an error naming both otherwise);
  // a loaded table continues exactly as the saved one would.
  std::string Save() const;
  Status Load(const std::string& bytes);

  // The shards of a table saved on shards.size() servers (Save of each), cut
  // again for `servers` servers (row id -> ServerOfRow): every row keeps its
  // values, optimizer state and last use, admission counters follow their
  // id, recency is merged by last use. The shards must be of `key` and
  // `spec` (an error naming both otherwise).
  static StatusOr<std::vector<std::string>> Reshard(const std::string& key,
                                                    const proto::SparseTableSpec& spec,
                                                    const std::vector<std::string>& shards,
                                                    int servers);

  // The key and spec a saved shard (Save's bytes) was of; InvalidArgument
  // when the bytes are no shard.
  static Status PeekShard(const std::string& bytes, std::string* key,
                          proto::SparseTableSpec* spec);

  // Calls fn(id, weights[width]) for every held row, least recently used
  // first (no use is counted).
  template <typename Fn>
  void ForEachRow(Fn fn) const {
    for (uint32_t s = tail_; s != kNone; s = prev_[s]) fn(ids_[s], Weights(s));
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr int64_t kChunkRows = 4096;

  Table(const std::string& key, const proto::SparseTableSpec& spec);

  float* Weights(uint32_t slot) const {
    return chunks_[slot / kChunkRows].get() +
           static_cast<int64_t>(slot % kChunkRows) * stride_;
  }
  // A new row for `id` (evicting the least recently used at max_rows) with
  // its initial value and zero optimizer state.
  uint32_t NewRow(int64_t id);
  void DropRow(uint32_t slot);
  // Marks `slot` used now: recency list head.
  void Touch(uint32_t slot);
  void Unlink(uint32_t slot);
  void PushFront(uint32_t slot);
  // Sets the state floats per row for `optimizer`'s rule; an error when
  // rows already hold another rule's state.
  Status UseRule(const Optimizer* optimizer);

  const std::string key_;
  const proto::SparseTableSpec spec_;
  std::unique_ptr<Optimizer> own_;  // the spec's optimizer, if it has one
  const int64_t width_;
  const uint64_t key_seed_;
  int num_states_ = -1;   // optimizer state arrays per row; -1 until known
  int64_t stride_ = 0;    // floats per slot

  RowIndex index_;     // id -> slot
  RowIndex counters_;  // admission: id -> times seen, for ids not yet rows
  int64_t max_pending_ = 0;  // MaxPending(spec_)
  std::vector<std::unique_ptr<float[]>> chunks_;
  std::vector<int64_t> ids_;       // per slot
  std::vector<int64_t> last_use_;  // per slot: the update count at its last use
  std::vector<uint32_t> prev_, next_;  // recency list, most recent first
  std::vector<uint32_t> free_;     // slots of dropped rows
  uint32_t head_ = kNone, tail_ = kNone;
  int64_t num_slots_ = 0;

  int64_t updates_ = 0;
  TableStats counts_;
};

}  // namespace sparse
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SPARSE_TABLE_H_
