// RowIndex: an open-addressing hash map from row id (int64, >= 0) to a
// uint32 value (a slot in a table's arena, or a counter). Linear probing in
// one flat array, grown by doubling at 3/4 load, erase by backward shift (no
// tombstones): no allocation per entry, so a table of 100M rows costs 16
// bytes per entry here and nothing else.
#ifndef KVTRAIN_KVSTORE_SPARSE_ROW_INDEX_H_
#define KVTRAIN_KVSTORE_SPARSE_ROW_INDEX_H_

#include <cstdint>
#include <vector>

namespace kvtrain {
namespace sparse {

// splitmix64's finaliser: a bijective mix of all 64 bits. Shared by the
// index, the placement of rows on servers and the row initialiser.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Not thread-safe: its table's lock guards it.
class RowIndex {
 public:
  static constexpr int64_t kEmpty = -1;

  RowIndex() { Rehash(16); }

  size_t size() const { return size_; }
  // Bytes held by the slot array.
  size_t bytes() const { return slots_.size() * sizeof(Entry); }

  // The value of `id`, or null.
  uint32_t* Find(int64_t id) {
    for (size_t i = Home(id);; i = (i + 1) & mask_) {
      if (slots_[i].id == id) return &slots_[i].value;
      if (slots_[i].id == kEmpty) return nullptr;
    }
  }
  // Inserts `id` -> `value`; `id` must be absent.
  void Insert(int64_t id, uint32_t value) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Rehash(slots_.size() * 2);
    size_t i = Home(id);
    while (slots_[i].id != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Entry{id, value};
    ++size_;
  }
  // Removes `id` if present; true if it was.
  bool Erase(int64_t id) {
    size_t i = Home(id);
    while (slots_[i].id != id) {
      if (slots_[i].id == kEmpty) return false;
      i = (i + 1) & mask_;
    }
    // Backward shift: move later entries of the probe run into the hole
    // when their home is not between the hole and them.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].id != kEmpty; j = (j + 1) & mask_) {
      const size_t home = Home(slots_[j].id);
      const bool movable = hole <= j ? (home <= hole || home > j)
                                     : (home <= hole && home > j);
      if (movable) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].id = kEmpty;
    --size_;
    return true;
  }
  void Clear() {
    slots_.assign(16, Entry{});
    mask_ = 15;
    size_ = 0;
  }
  // Calls f(id, value) for every entry, in no particular order.
  template <typename F>
  void ForEach(F f) const {
    for (const Entry& e : slots_) {
      if (e.id != kEmpty) f(e.id, e.value);
    }
  }

 private:
  struct Entry {
    int64_t id = kEmpty;
    uint32_t value = 0;
  };
  size_t Home(int64_t id) const {
    return static_cast<size_t>(Mix64(static_cast<uint64_t>(id))) & mask_;
  }
  void Rehash(size_t capacity) {
    std::vector<Entry> old;
    old.swap(slots_);
    slots_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    size_ = 0;
    for (const Entry& e : old) {
      if (e.id != kEmpty) Insert(e.id, e.value);
    }
  }

  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace sparse
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SPARSE_ROW_INDEX_H_
