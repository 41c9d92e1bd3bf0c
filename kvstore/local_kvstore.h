// The non-distributed stores: `local` (reduce and update on the CPU) and
// `device` (reduce and update on a GPU; without one, on the CPU, said once).
#ifndef KVTRAIN_KVSTORE_LOCAL_KVSTORE_H_
#define KVTRAIN_KVSTORE_LOCAL_KVSTORE_H_

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/thread_annotations.h"
#include "kvstore/handles.h"
#include "kvstore/in_process.h"
#include "kvstore/keys.h"
#include "kvstore/kvstore.h"
#include "kvstore/sparse/table.h"
#include "ops/optimizer.h"

namespace kvtrain {
namespace kv {

// Thread-safe (one mutex; operations run to completion in the call).
class LocalKVStore : public InProcessKVStore {
 public:
  // `on_gpu`: the device type.
  LocalKVStore(const std::string& type, bool on_gpu);

  Status Init(const std::vector<Key>& keys,
              const std::vector<Tensor>& values) override;
  StatusOr<KVHandle> PushAsync(const std::vector<Key>& keys,
                               const std::vector<Tensor>& values,
                               int priority) override;
  StatusOr<KVHandle> PullAsync(const std::vector<Key>& keys,
                               const std::vector<Tensor>& outs,
                               int priority) override;
  StatusOr<KVHandle> PushPullAsync(const std::vector<Key>& keys,
                                   const std::vector<Tensor>& values,
                                   const std::vector<Tensor>& outs,
                                   int priority) override;
  Status Wait(KVHandle handle) override;
  // Row-sparse tables live in host memory, whatever the type; rows go to
  // and come from the callers' devices.
  Status InitRowSparse(const Key& key, const proto::SparseTableSpec& spec) override;
  StatusOr<KVHandle> PushRowSparseAsync(const Key& key, const Tensor& ids,
                                        const Tensor& rows, int priority) override;
  StatusOr<KVHandle> RowSparsePullAsync(const Key& key, const Tensor& ids,
                                        const Tensor& out, int priority) override;
  Status SaveRowSparse(const Key& key, const std::string& path) override;
  Status LoadRowSparse(const Key& key, const std::string& path) override;
  StatusOr<std::vector<proto::SparseTableStats>> RowSparseStats(const Key& key) override;

 private:
  struct Entry {
    Key key;
    Tensor value;
  };

  // The device a key's merge and update run on.
  Device ReduceDevice(const std::vector<Tensor>& values) const;
  Status DoPush(const std::vector<Key>& keys, const std::vector<Tensor>& values)
      EXCLUDES(mu_);
  Status DoPull(const std::vector<Key>& keys, const std::vector<Tensor>& outs)
      EXCLUDES(mu_);
  KVHandle Finish(Status status);
  // The entry of g's key, or a not-found error naming it.
  StatusOr<Entry*> Find(const KeyGroup& g) REQUIRES(mu_);
  // The table of a row-sparse key, or an error naming the key.
  StatusOr<sparse::Table*> FindTable(const Key& key, uint64_t* id) REQUIRES(mu_);
  Status DoPushRows(const Key& key, const Tensor& ids, const Tensor& rows) EXCLUDES(mu_);
  Status DoPullRows(const Key& key, const Tensor& ids, const Tensor& out) EXCLUDES(mu_);

  const bool on_gpu_;
  std::map<uint64_t, Entry> store_ GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<sparse::Table>> tables_ GUARDED_BY(mu_);

  // Each call's outcome until its Wait.
  kv::HandleTable<Status> done_;
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_LOCAL_KVSTORE_H_
