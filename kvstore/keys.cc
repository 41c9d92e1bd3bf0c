// KeyTable, GroupByKey, KeyError.
#include "kvstore/keys.h"

namespace kvtrain {
namespace kv {

namespace {
constexpr uint64_t kNameBase = uint64_t{1} << 32;
}  // namespace

StatusOr<uint64_t> KeyTable::Id(const Key& key) {
  if (!key.is_name()) {
    if (key.id() < 0) {
      return Status::InvalidArgument("key " + std::to_string(key.id()) +
                                     ": int keys must be >= 0 (or use a name)");
    }
    return static_cast<uint64_t>(key.id());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_name_.find(key.name());
  if (it != by_name_.end()) return it->second;
  const uint64_t id = kNameBase + by_name_.size();
  by_name_.emplace(key.name(), id);
  names_.emplace(id, key.name());
  return id;
}

std::string KeyTable::Name(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(id);
  return it != names_.end() ? it->second : std::to_string(id);
}

Status KeyError(Status::Code code, const std::string& name,
                const std::string& message) {
  const std::string m = "key " + name + ": " + message;
  switch (code) {
    case Status::Code::kNotFound: return Status::NotFound(m);
    case Status::Code::kAlreadyExists: return Status::AlreadyExists(m);
    case Status::Code::kFailedPrecondition: return Status::FailedPrecondition(m);
    case Status::Code::kInternal: return Status::Internal(m);
    default: return Status::InvalidArgument(m);
  }
}

StatusOr<std::vector<KeyGroup>> GroupByKey(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& tensors,
                                           const std::string& what,
                                           KeyTable* table) {
  if (keys.size() != tensors.size()) {
    return Status::InvalidArgument(what + ": " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(tensors.size()) +
                                   " tensors");
  }
  std::vector<KeyGroup> groups;
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < keys.size(); ++i) {
    KV_ASSIGN_OR_RETURN(uint64_t id, table->Id(keys[i]));
    const std::string name = keys[i].ToString();
    const Tensor& t = tensors[i];
    if (!t.defined()) {
      return KeyError(Status::Code::kInvalidArgument, name,
                      what + " got an undefined tensor");
    }
    if (t.dtype() != DType::kFloat32) {
      return KeyError(Status::Code::kInvalidArgument, name,
                      std::string(what) + " got a " + DTypeName(t.dtype()) +
                          " tensor; KVStore values are float32");
    }
    auto it = index.find(id);
    if (it == index.end()) {
      index.emplace(id, groups.size());
      groups.push_back(KeyGroup{id, name, {t}});
      continue;
    }
    KeyGroup& g = groups[it->second];
    if (g.tensors[0].shape() != t.shape()) {
      return KeyError(Status::Code::kInvalidArgument, name,
                      what + " got tensors of shapes " +
                          g.tensors[0].shape().ToString() + " and " +
                          t.shape().ToString() + " for one key");
    }
    g.tensors.push_back(t);
  }
  return groups;
}

}  // namespace kv
}  // namespace kvtrain
