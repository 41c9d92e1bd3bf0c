// KVPairs validation and helpers, PullResult, group names.
#include <string>

#include "transport/ps/ps.h"

namespace kvtrain {
namespace ps {

StatusOr<uint64_t> SumLens(const Blob& lens, size_t n, const std::string& what) {
  if (lens.size() != n * sizeof(int64_t)) {
    return Status::InvalidArgument(what + " hold " + std::to_string(lens.size() / 8) +
                                   " entries for " + std::to_string(n) + " keys");
  }
  const int64_t* l = lens.as<int64_t>();
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (l[i] < 0) {
      return Status::InvalidArgument(what + ": entry " + std::to_string(i) +
                                     " is negative (" + std::to_string(l[i]) + ")");
    }
    // Lengths that wrap around 2^64 must not add up to the right total.
    if (__builtin_add_overflow(total, static_cast<uint64_t>(l[i]), &total)) {
      return Status::InvalidArgument(what + " add up to more than 2^64 bytes (at entry " +
                                     std::to_string(i) + ")");
    }
  }
  return total;
}

Status KVPairs::Validate() const {
  if (keys.size() % sizeof(uint64_t) != 0) {
    return Status::InvalidArgument("keys hold " + std::to_string(keys.size()) +
                                   " bytes, not a multiple of 8 (uint64)");
  }
  const size_t n = num_keys();
  const uint64_t* k = keys.as<uint64_t>();
  for (size_t i = 1; i < n; ++i) {
    if (k[i] <= k[i - 1]) {
      return Status::InvalidArgument("keys must be sorted and unique: key " +
                                     std::to_string(k[i]) + " at position " +
                                     std::to_string(i) + " follows key " +
                                     std::to_string(k[i - 1]));
    }
  }
  if (!attrs.empty() && (n == 0 || attrs.size() % n != 0)) {
    return Status::InvalidArgument(std::to_string(attrs.size()) +
                                   " bytes of per-key records do not split equally among " +
                                   std::to_string(n) + " keys");
  }
  if (!lens.empty()) {
    KV_ASSIGN_OR_RETURN(uint64_t total, SumLens(lens, n, "lens"));
    if (total != vals.size()) {
      return Status::InvalidArgument(
          "lens add up to " + std::to_string(total) + " bytes but " +
          std::to_string(vals.size()) + " value bytes are given");
    }
    return Status::OK();
  }
  if (n == 0) return Status::OK();  // vals, if any, is an opaque payload
  if (vals.size() % n != 0) {
    return Status::InvalidArgument(std::to_string(vals.size()) +
                                   " value bytes do not split equally "
                                   "among " +
                                   std::to_string(n) +
                                   " keys (give per-key lens)");
  }
  return Status::OK();
}

KVPairs KVPairs::From(std::vector<uint64_t> keys, Blob vals,
                      std::vector<int64_t> lens) {
  KVPairs kv;
  kv.keys = Blob::FromVector(std::move(keys));
  kv.vals = std::move(vals);
  if (!lens.empty()) kv.lens = Blob::FromVector(std::move(lens));
  return kv;
}

size_t PullResult::total_bytes() const {
  size_t n = 0;
  for (const KVPairs& p : parts) n += p.vals.size();
  return n;
}

Status PullResult::CopyTo(char* dst, size_t size) const {
  if (size != total_bytes()) {
    return Status::InvalidArgument("pulled " + std::to_string(total_bytes()) +
                                   " bytes into a buffer of " +
                                   std::to_string(size));
  }
  for (const KVPairs& p : parts) {
    if (!p.vals.empty()) std::memcpy(dst, p.vals.data(), p.vals.size());
    dst += p.vals.size();
  }
  return Status::OK();
}

std::string GroupName(int groups) {
  std::string out;
  const std::pair<int, const char*> kNames[] = {{kSchedulerGroup, "scheduler"},
                                                {kServerGroup, "servers"},
                                                {kWorkerGroup, "workers"}};
  for (const auto& [bit, name] : kNames) {
    if (groups & bit) {
      if (!out.empty()) out += "+";
      out += name;
    }
  }
  return out.empty() ? "(no group)" : out;
}

}  // namespace ps
}  // namespace kvtrain
