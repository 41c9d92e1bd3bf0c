#include "kvstore/sparse/table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "ops/optimizer_kernels.h"

namespace kvtrain {
namespace sparse {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'P', 'T', 'B', 'L', '1'};

uint64_t HashName(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return Mix64(h);
}

// A uniform float in [0, 1) from 24 bits of a hash.
inline float Unit(uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

Status Bad(const std::string& key, const std::string& what) {
  return Status::InvalidArgument("key " + key + ": " + what);
}

class Writer {
 public:
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void Raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  void Str(const std::string& s) {
    I64(static_cast<int64_t>(s.size()));
    out += s;
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool I64(int64_t* v) { return Raw(v, sizeof(*v)); }
  bool Raw(void* p, size_t n) {
    if (s_.size() - pos_ < n) return false;
    std::memcpy(p, s_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool Str(std::string* v) {
    int64_t n = 0;
    if (!I64(&n) || n < 0 || static_cast<uint64_t>(n) > s_.size() - pos_) return false;
    v->assign(s_.data() + pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return true;
  }
  bool done() const { return pos_ == s_.size(); }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

std::string TableStats::ToString() const {
  std::ostringstream o;
  o << "rows " << rows << " created " << created << " evicted " << evicted
    << " expired " << expired << " pending " << pending << " dropped " << dropped_grads
    << " updates " << updates << " bytes " << bytes;
  if (admission_resets > 0) o << " admission resets " << admission_resets;
  return o.str();
}

proto::SparseTableStats TableStats::ToProto() const {
  proto::SparseTableStats p;
  p.set_rows(rows);
  p.set_created(created);
  p.set_evicted(evicted);
  p.set_expired(expired);
  p.set_pending(pending);
  p.set_dropped_grads(dropped_grads);
  p.set_updates(updates);
  p.set_bytes(bytes);
  p.set_admission_resets(admission_resets);
  return p;
}

int64_t MaxPending(const proto::SparseTableSpec& spec) {
  if (spec.max_pending() > 0) return spec.max_pending();
  return spec.max_rows() > 0 ? spec.max_rows() : int64_t{1} << 22;
}

Status CheckSpec(const std::string& key, const proto::SparseTableSpec& spec) {
  if (spec.width() <= 0) {
    return Bad(key, "a row-sparse key needs a row width > 0, got " +
                        std::to_string(spec.width()));
  }
  if (spec.width() > (int64_t{1} << 24)) {
    return Bad(key, "row width " + std::to_string(spec.width()) +
                        " is over 16777216 values; make it a dense key");
  }
  if (spec.num_rows() < 0) {
    return Bad(key, "num_rows " + std::to_string(spec.num_rows()) +
                        " must be >= 0 (0: any id >= 0)");
  }
  if (!proto::SparseTableSpec::Init_IsValid(spec.init())) {
    return Bad(key, "unknown initialiser " + std::to_string(spec.init()) +
                        " (zeros, uniform, normal or constant)");
  }
  if (!std::isfinite(spec.scale())) {
    return Bad(key, "initialiser scale must be finite");
  }
  if (spec.init() != proto::SparseTableSpec::CONSTANT && !(spec.scale() >= 0)) {
    return Bad(key, "initialiser scale must be >= 0 (a negative value is for constant)");
  }
  if (spec.admit_after() < 0 || spec.expire_after() < 0 || spec.max_rows() < 0 ||
      spec.max_pending() < 0) {
    return Bad(key, "admit_after, expire_after, max_rows and max_pending must be >= 0");
  }
  if (spec.max_rows() >= int64_t{UINT32_MAX}) {
    return Bad(key, "max_rows " + std::to_string(spec.max_rows()) +
                        " is over a server's limit of 4294967294 rows");
  }
  return Status::OK();
}

Status CheckIds(const std::string& key, const proto::SparseTableSpec& spec,
                const int64_t* ids, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] < 0) {
      return Bad(key, "row id " + std::to_string(ids[i]) + " at position " +
                          std::to_string(i) + " is negative");
    }
    if (spec.num_rows() > 0 && ids[i] >= spec.num_rows()) {
      return Bad(key, "row id " + std::to_string(ids[i]) + " at position " +
                          std::to_string(i) + " is outside the table's " +
                          std::to_string(spec.num_rows()) + " rows");
    }
  }
  return Status::OK();
}

Table::Table(const std::string& key, const proto::SparseTableSpec& spec)
    : key_(key), spec_(spec), width_(spec.width()), key_seed_(HashName(key) ^ spec.seed()) {
  max_pending_ = MaxPending(spec);
}

StatusOr<std::unique_ptr<Table>> Table::Create(const std::string& key,
                                               const proto::SparseTableSpec& spec) {
  KV_RETURN_IF_ERROR(CheckSpec(key, spec));
  auto table = std::unique_ptr<Table>(new Table(key, spec));
  if (spec.has_optimizer()) {
    StatusOr<std::unique_ptr<Optimizer>> own = Optimizer::Create(spec.optimizer());
    if (!own.ok()) return Bad(key, "the table's " + own.status().message());
    table->own_ = std::move(own).value();
  }
  return table;
}

void Table::InitialRow(int64_t id, float* out) const {
  const uint64_t base = Mix64(key_seed_ ^ Mix64(static_cast<uint64_t>(id)));
  const float scale = spec_.scale();
  switch (spec_.init()) {
    case proto::SparseTableSpec::UNIFORM:
      for (int64_t j = 0; j < width_; ++j) {
        out[j] = (2.0f * Unit(Mix64(base + static_cast<uint64_t>(j))) - 1.0f) * scale;
      }
      break;
    case proto::SparseTableSpec::NORMAL:
      // Box-Muller on two hashes per value.
      for (int64_t j = 0; j < width_; ++j) {
        const uint64_t h = Mix64(base + static_cast<uint64_t>(j));
        const double u1 = (static_cast<double>(h >> 11) + 1.0) * (1.0 / 9007199254740993.0);
        const double u2 = Unit(Mix64(h));
        out[j] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) *
                                    std::cos(6.283185307179586 * u2) * scale);
      }
      break;
    case proto::SparseTableSpec::CONSTANT:
      std::fill(out, out + width_, scale);
      break;
    default:
      std::memset(out, 0, static_cast<size_t>(width_) * sizeof(float));
      break;
  }
}

void Table::Unlink(uint32_t s) {
  if (prev_[s] != kNone) next_[prev_[s]] = next_[s]; else head_ = next_[s];
  if (next_[s] != kNone) prev_[next_[s]] = prev_[s]; else tail_ = prev_[s];
  prev_[s] = next_[s] = kNone;
}

void Table::PushFront(uint32_t s) {
  prev_[s] = kNone;
  next_[s] = head_;
  if (head_ != kNone) prev_[head_] = s;
  head_ = s;
  if (tail_ == kNone) tail_ = s;
}

void Table::Touch(uint32_t s) {
  last_use_[s] = updates_;
  if (head_ == s) return;
  Unlink(s);
  PushFront(s);
}

void Table::DropRow(uint32_t s) {
  Unlink(s);
  index_.Erase(ids_[s]);
  free_.push_back(s);
}

uint32_t Table::NewRow(int64_t id) {
  if (spec_.max_rows() > 0 && static_cast<int64_t>(index_.size()) >= spec_.max_rows()) {
    DropRow(tail_);
    ++counts_.evicted;
  }
  uint32_t s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    s = static_cast<uint32_t>(num_slots_++);
    if (static_cast<size_t>(s / kChunkRows) >= chunks_.size()) {
      chunks_.emplace_back(new float[static_cast<size_t>(kChunkRows * stride_)]);
    }
    ids_.push_back(0);
    last_use_.push_back(0);
    prev_.push_back(kNone);
    next_.push_back(kNone);
  }
  ids_[s] = id;
  float* w = Weights(s);
  InitialRow(id, w);
  std::memset(w + width_, 0, static_cast<size_t>(stride_ - width_) * sizeof(float));
  index_.Insert(id, s);
  PushFront(s);
  last_use_[s] = updates_;
  ++counts_.created;
  return s;
}

Status Table::UseRule(const Optimizer* optimizer) {
  const int states = optimizer == nullptr ? 0 : NumUpdateStates(optimizer->rule());
  if (states == num_states_) return Status::OK();
  if (num_slots_ > 0) {
    return Bad(key_, "the table's rows hold the state of " +
                         std::to_string(num_states_) +
                         " optimizer arrays; this optimizer keeps " +
                         std::to_string(states) +
                         " (set the optimizer before the first push)");
  }
  num_states_ = states;
  stride_ = width_ * (1 + states);
  return Status::OK();
}

void Table::Read(const int64_t* ids, size_t n, float* out, bool use) {
  for (size_t i = 0; i < n; ++i) {
    float* dst = out + static_cast<int64_t>(i) * width_;
    const uint32_t* slot = index_.Find(ids[i]);
    if (slot == nullptr) {
      InitialRow(ids[i], dst);
      continue;
    }
    if (use) Touch(*slot);
    std::memcpy(dst, Weights(*slot), static_cast<size_t>(width_) * sizeof(float));
  }
}

Status Table::Update(const int64_t* ids, size_t n, const float* grads,
                     const Optimizer* optimizer) {
  if (own_ != nullptr) optimizer = own_.get();
  KV_RETURN_IF_ERROR(UseRule(optimizer));
  ++updates_;
  UpdateParams params;
  UpdateRule rule = UpdateRule::kSgd;
  if (optimizer != nullptr) {
    rule = optimizer->rule();
    params = optimizer->StepParams(updates_, updates_);
  }
  const int64_t admit = spec_.admit_after();
  for (size_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    const float* g = grads + static_cast<int64_t>(i) * width_;
    const uint32_t* found = index_.Find(id);
    uint32_t s;
    if (found != nullptr) {
      s = *found;
      Touch(s);
    } else {
      if (admit > 1) {
        uint32_t* seen = counters_.Find(id);
        const int64_t times = seen == nullptr ? 1 : *seen + 1;
        if (times < admit) {
          if (seen == nullptr) {
            if (static_cast<int64_t>(counters_.size()) >= max_pending_) {
              // A long tail of ids seen once would grow the counters
              // without bound: they start again from zero (counted).
              counters_.Clear();
              ++counts_.admission_resets;
            }
            counters_.Insert(id, 1);
          } else {
            *seen = static_cast<uint32_t>(times);
          }
          ++counts_.dropped_grads;
          continue;
        }
        if (seen != nullptr) counters_.Erase(id);
      }
      s = NewRow(id);
    }
    float* w = Weights(s);
    if (optimizer == nullptr) {
      std::memcpy(w, g, static_cast<size_t>(width_) * sizeof(float));
      continue;
    }
    float* s0 = num_states_ > 0 ? w + width_ : nullptr;
    float* s1 = num_states_ > 1 ? w + 2 * width_ : nullptr;
    UpdateCpu(rule, params, width_, w, g, s0, s1);
  }
  if (spec_.expire_after() > 0) {
    while (tail_ != kNone && updates_ - last_use_[tail_] >= spec_.expire_after()) {
      DropRow(tail_);
      ++counts_.expired;
    }
  }
  return Status::OK();
}

TableStats Table::stats() const {
  TableStats s = counts_;
  s.rows = static_cast<int64_t>(index_.size());
  s.pending = static_cast<int64_t>(counters_.size());
  s.updates = updates_;
  s.bytes = static_cast<int64_t>(chunks_.size()) * kChunkRows * stride_ *
                static_cast<int64_t>(sizeof(float)) +
            static_cast<int64_t>(index_.bytes() + counters_.bytes()) +
            num_slots_ * static_cast<int64_t>(2 * sizeof(int64_t) + 2 * sizeof(uint32_t));
  return s;
}

std::string Table::Save() const {
  Writer w;
  w.Raw(kMagic, sizeof(kMagic));
  w.Str(key_);
  w.Str(spec_.SerializeAsString());
  w.I64(num_states_);
  w.I64(updates_);
  w.I64(counts_.created);
  w.I64(counts_.evicted);
  w.I64(counts_.expired);
  w.I64(counts_.dropped_grads);
  w.I64(static_cast<int64_t>(index_.size()));
  // Least recently used first: Load pushes each to the front, rebuilding
  // the same order.
  for (uint32_t s = tail_; s != kNone; s = prev_[s]) {
    w.I64(ids_[s]);
    w.I64(last_use_[s]);
    w.Raw(Weights(s), static_cast<size_t>(stride_) * sizeof(float));
  }
  // Admission counters by id: the same contents always save alike.
  std::vector<std::pair<int64_t, int64_t>> pending;
  counters_.ForEach([&](int64_t id, uint32_t times) { pending.emplace_back(id, times); });
  std::sort(pending.begin(), pending.end());
  w.I64(static_cast<int64_t>(pending.size()));
  for (const auto& [id, times] : pending) {
    w.I64(id);
    w.I64(times);
  }
  return std::move(w.out);
}

Status Table::PeekShard(const std::string& bytes, std::string* key,
                        proto::SparseTableSpec* spec) {
  Reader r(bytes);
  char magic[sizeof(kMagic)];
  std::string spec_bytes;
  if (!r.Raw(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0 ||
      !r.Str(key) || !r.Str(&spec_bytes) || !spec->ParseFromString(spec_bytes)) {
    return Status::InvalidArgument("not a saved table shard");
  }
  return Status::OK();
}

Status Table::Load(const std::string& bytes) {
  Reader r(bytes);
  char magic[sizeof(kMagic)];
  std::string key, spec_bytes;
  const Status corrupt = Bad(key_, "saved table shard is corrupt or truncated");
  if (!r.Raw(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return Bad(key_, "not a saved table shard");
  }
  if (!r.Str(&key) || !r.Str(&spec_bytes)) return corrupt;
  proto::SparseTableSpec spec;
  if (!spec.ParseFromString(spec_bytes)) return corrupt;
  if (key != key_) return Bad(key_, "the saved shard is of key " + key);
  if (spec.SerializeAsString() != spec_.SerializeAsString()) {
    return Bad(key_, "the saved shard's table spec {" + spec.ShortDebugString() +
                         "} differs from this one's {" + spec_.ShortDebugString() + "}");
  }
  int64_t states, updates, created, evicted, expired, dropped, rows;
  if (!r.I64(&states) || !r.I64(&updates) || !r.I64(&created) || !r.I64(&evicted) ||
      !r.I64(&expired) || !r.I64(&dropped) || !r.I64(&rows) || states < -1 || states > 2 ||
      rows < 0) {
    return corrupt;
  }
  // Start empty, then rebuild.
  index_.Clear();
  counters_.Clear();
  chunks_.clear();
  ids_.clear();
  last_use_.clear();
  prev_.clear();
  next_.clear();
  free_.clear();
  head_ = tail_ = kNone;
  num_slots_ = 0;
  num_states_ = static_cast<int>(states);
  stride_ = width_ * (1 + std::max(0, num_states_));
  updates_ = updates;
  counts_ = TableStats{};
  for (int64_t i = 0; i < rows; ++i) {
    int64_t id, last;
    if (!r.I64(&id) || !r.I64(&last)) return corrupt;
    const uint32_t s = NewRow(id);
    last_use_[s] = last;
    if (!r.Raw(Weights(s), static_cast<size_t>(stride_) * sizeof(float))) return corrupt;
  }
  int64_t pending;
  if (!r.I64(&pending) || pending < 0) return corrupt;
  for (int64_t i = 0; i < pending; ++i) {
    int64_t id, times;
    if (!r.I64(&id) || !r.I64(&times)) return corrupt;
    counters_.Insert(id, static_cast<uint32_t>(times));
  }
  if (!r.done()) return corrupt;
  counts_.created = created;
  counts_.evicted = evicted;
  counts_.expired = expired;
  counts_.dropped_grads = dropped;
  return Status::OK();
}

StatusOr<std::vector<std::string>> Table::Reshard(const std::string& key,
                                                 const proto::SparseTableSpec& spec,
                                                 const std::vector<std::string>& shards,
                                                 int servers) {
  if (servers < 1) return Bad(key, "resharding for " + std::to_string(servers) + " servers");
  std::vector<std::unique_ptr<Table>> in, out;
  for (const std::string& shard : shards) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Table> t, Create(key, spec));
    KV_RETURN_IF_ERROR(t->Load(shard));
    in.push_back(std::move(t));
  }
  int states = -1;
  int64_t updates = 0;
  TableStats counts;
  for (const auto& t : in) {
    if (t->num_states_ >= 0) {
      if (states >= 0 && states != t->num_states_) {
        return Bad(key, "the saved shards hold different optimizer states");
      }
      states = t->num_states_;
    }
    updates = std::max(updates, t->updates_);
    counts.created += t->counts_.created;
    counts.evicted += t->counts_.evicted;
    counts.expired += t->counts_.expired;
    counts.dropped_grads += t->counts_.dropped_grads;
  }
  for (int s = 0; s < servers; ++s) {
    KV_ASSIGN_OR_RETURN(std::unique_ptr<Table> t, Create(key, spec));
    t->num_states_ = states;
    t->stride_ = t->width_ * (1 + std::max(0, states));
    t->updates_ = updates;
    out.push_back(std::move(t));
  }
  // Every row, least recently used first (stable across shards).
  struct Row {
    int64_t last_use;
    size_t shard;
    uint32_t slot;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < in.size(); ++i) {
    for (uint32_t s = in[i]->tail_; s != kNone; s = in[i]->prev_[s]) {
      rows.push_back(Row{in[i]->last_use_[s], i, s});
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.last_use < b.last_use; });
  for (const Row& r : rows) {
    const Table& src = *in[r.shard];
    const int64_t id = src.ids_[r.slot];
    Table& dst = *out[static_cast<size_t>(ServerOfRow(id, servers))];
    const uint32_t s = dst.NewRow(id);
    std::memcpy(dst.Weights(s), src.Weights(r.slot), static_cast<size_t>(dst.stride_) * sizeof(float));
    dst.last_use_[s] = r.last_use;
  }
  for (const auto& t : in) {
    t->counters_.ForEach([&](int64_t id, uint32_t times) {
      out[static_cast<size_t>(ServerOfRow(id, servers))]->counters_.Insert(id, times);
    });
  }
  std::vector<std::string> result;
  for (auto& t : out) {
    t->counts_ = TableStats{};
    result.push_back(t->Save());
  }
  // The totals stay with the first shard.
  if (!out.empty()) {
    out[0]->counts_.created = counts.created;
    out[0]->counts_.evicted = counts.evicted;
    out[0]->counts_.expired = counts.expired;
    out[0]->counts_.dropped_grads = counts.dropped_grads;
    result[0] = out[0]->Save();
  }
  return result;
}

}  // namespace sparse
}  // namespace kvtrain
