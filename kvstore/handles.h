// The handles of a store's asynchronous calls.
#ifndef KVTRAIN_KVSTORE_HANDLES_H_
#define KVTRAIN_KVSTORE_HANDLES_H_

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "kvstore/kvstore.h"

namespace kvtrain {
namespace kv {

// The handles of a store's asynchronous calls: Add files what Wait will
// need and returns a new handle; Take hands it back once; an unknown or
// already-waited handle is an error naming it. Thread-safe.
template <typename T>
class HandleTable {
 public:
  KVHandle Add(T item) EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    const KVHandle h = next_++;
    items_.emplace(h, std::move(item));
    return h;
  }
  Status Take(KVHandle h, T* item) EXCLUDES(mu_) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = items_.find(h);
    if (it == items_.end()) {
      return Status::InvalidArgument("KVStore::Wait: unknown handle " +
                                     std::to_string(h) +
                                     " (each handle is waited for once)");
    }
    *item = std::move(it->second);
    items_.erase(it);
    return Status::OK();
  }

 private:
  std::mutex mu_;
  KVHandle next_ GUARDED_BY(mu_) = 1;
  std::map<KVHandle, T> items_ GUARDED_BY(mu_);
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_HANDLES_H_
