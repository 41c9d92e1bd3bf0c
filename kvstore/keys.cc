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

namespace {

// The call's keys translated once: ids and the user's spelling.
struct Resolved {
  std::vector<uint64_t> ids;
  std::vector<std::string> names;
};

StatusOr<Resolved> Resolve(const std::vector<Key>& keys, KeyTable* table) {
  Resolved r;
  r.ids.reserve(keys.size());
  r.names.reserve(keys.size());
  for (const Key& k : keys) {
    KV_ASSIGN_OR_RETURN(uint64_t id, table->Id(k));
    r.ids.push_back(id);
    r.names.push_back(k.ToString());
  }
  return r;
}

Status CheckCount(const std::vector<Key>& keys, const std::vector<Tensor>& tensors,
                  const std::string& what) {
  if (keys.size() == tensors.size()) return Status::OK();
  return Status::InvalidArgument(what + ": " + std::to_string(keys.size()) + " keys but " +
                                 std::to_string(tensors.size()) + " tensors");
}

StatusOr<std::vector<KeyGroup>> Group(const Resolved& r, const std::vector<Tensor>& tensors,
                                      const std::string& what) {
  std::vector<KeyGroup> groups;
  std::map<uint64_t, size_t> index;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const uint64_t id = r.ids[i];
    const std::string& name = r.names[i];
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

}  // namespace

StatusOr<std::vector<KeyGroup>> GroupByKey(const std::vector<Key>& keys,
                                           const std::vector<Tensor>& tensors,
                                           const std::string& what,
                                           KeyTable* table) {
  KV_RETURN_IF_ERROR(CheckCount(keys, tensors, what));
  KV_ASSIGN_OR_RETURN(Resolved r, Resolve(keys, table));
  return Group(r, tensors, what);
}

StatusOr<PushPullGroups> GroupPushPull(const std::vector<Key>& keys,
                                       const std::vector<Tensor>& values,
                                       const std::vector<Tensor>& outs, KeyTable* table) {
  KV_RETURN_IF_ERROR(CheckCount(keys, values, "push"));
  KV_RETURN_IF_ERROR(CheckCount(keys, outs, "pull"));
  KV_ASSIGN_OR_RETURN(Resolved r, Resolve(keys, table));
  PushPullGroups g;
  KV_ASSIGN_OR_RETURN(g.pushes, Group(r, values, "push"));
  KV_ASSIGN_OR_RETURN(g.pulls, Group(r, outs, "pull"));
  return g;
}

}  // namespace kv
}  // namespace kvtrain
