#include "kvstore/request.h"

#include <cstring>

#include "compression/compression.h"

namespace kvtrain {
namespace kv {

size_t KeyRecord::AnswerBytes(int64_t n) const {
  return kv::AnswerBytes(n, half != 0, level_bits);
}

ps::Blob EncodeKeyRecords(const std::vector<KeyRecord>& records) {
  std::string bytes(records.size() * sizeof(KeyRecord), '\0');
  if (!records.empty()) std::memcpy(bytes.data(), records.data(), bytes.size());
  return ps::Blob::FromString(std::move(bytes));
}

StatusOr<std::vector<KeyRecord>> DecodeKeyRecords(const ps::KVPairs& data, size_t n,
                                                  const std::string& sender) {
  if (data.attrs.size() != n * sizeof(KeyRecord)) {
    return Status::InvalidArgument(
        "KVStore request from " + sender + " carries " + std::to_string(data.attrs.size()) +
        " bytes of key records for " + std::to_string(n) + " keys (16 bytes each)");
  }
  // Copied out: the frame need not be aligned.
  std::vector<KeyRecord> records(n);
  if (n > 0) std::memcpy(records.data(), data.attrs.data(), data.attrs.size());
  for (size_t i = 0; i < n; ++i) {
    const KeyRecord& r = records[i];
    // Built only for an error: this loop runs for every key of every request.
    auto where = [&] {
      return "KVStore request from " + sender + ", server key " + std::to_string(data.key(i)) +
             ": ";
    };
    if (!proto::GradientCompression::Type_IsValid(r.compression)) {
      return Status::InvalidArgument(where() + "unknown compression " +
                                     std::to_string(static_cast<int>(r.compression)));
    }
    if (r.level_bits != 0 && !ValidLevelBits(r.level_bits)) {
      return Status::InvalidArgument(where() + "asks for levels of " +
                                     std::to_string(static_cast<int>(r.level_bits)) +
                                     " bits (valid: 1, 2, 4, 8)");
    }
    if (r.half > 1) {
      return Status::InvalidArgument(where() + "half-answer flag " +
                                     std::to_string(static_cast<int>(r.half)) + " (0 or 1)");
    }
  }
  return records;
}

}  // namespace kv
}  // namespace kvtrain
