// A store's keys: the user's keys mapped to internal ids, a call's tensors
// grouped by key with their checks, and errors that name the key.
#ifndef KVTRAIN_KVSTORE_KEYS_H_
#define KVTRAIN_KVSTORE_KEYS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "kvstore/kvstore.h"
#include "tensor/tensor.h"

namespace kvtrain {
namespace kv {

// Maps keys to internal ids: int keys to themselves, names to 2^32 + the
// order in which this process first saw them (every worker of a job sees
// the same names in the same order, so ids agree). Thread-safe.
class KeyTable {
 public:
  StatusOr<uint64_t> Id(const Key& key) EXCLUDES(mu_);
  // The user's spelling of an internal id.
  std::string Name(uint64_t id) const EXCLUDES(mu_);

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> by_name_ GUARDED_BY(mu_);
  std::map<uint64_t, std::string> names_ GUARDED_BY(mu_);
};

// One key's tensors within a call, in call order.
struct KeyGroup {
  uint64_t id = 0;
  std::string name;
  std::vector<Tensor> tensors;
};

// Groups `tensors` by key (order of first appearance). Errors name the call
// and key: count mismatch, undefined tensor, non-float32, shapes of one key
// that differ.
StatusOr<std::vector<KeyGroup>> GroupByKey(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& tensors,
                                           const std::string& what,
                                           KeyTable* table);

// The one key space of optimizer state (the keys of ops/optimizer.h): a
// store key's id, plus which part of it the state is for, counted in the
// bits from kStatePartShift up: a server's piece of the key (the key's
// pieces on that server, from 0), or a device's copy in a trainer's own
// optimizer. So a whole key's state is keyed by its id alone in a local
// store, on the server that holds it and on a trainer's first device. A
// server key is its server's first key plus the StateKey of its piece.
inline constexpr int kStatePartShift = 40;
inline int64_t StateKey(uint64_t id, int64_t part) {
  return static_cast<int64_t>(id + (static_cast<uint64_t>(part) << kStatePartShift));
}

// A push-pull's keys grouped for its pushes and its pulls alike (the same
// groups, in the same order), each key translated once.
struct PushPullGroups {
  std::vector<KeyGroup> pushes;
  std::vector<KeyGroup> pulls;
};
StatusOr<PushPullGroups> GroupPushPull(const std::vector<Key>& keys,
                                       const std::vector<Tensor>& values,
                                       const std::vector<Tensor>& outs, KeyTable* table);

// "key fc1_weight: <message>", with `code`.
Status KeyError(Status::Code code, const std::string& name,
                const std::string& message);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_KEYS_H_
