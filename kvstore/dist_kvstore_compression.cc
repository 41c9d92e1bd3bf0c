// The dist stores' gradient compression on the worker: the spec, each
// part's encoding, and the residuals files (compression/compression.h).
#include <algorithm>

#include "compression/compression.h"
#include "kvstore/dist_kvstore.h"
#include "kvstore/keys.h"

namespace kvtrain {
namespace kv {

Status DistKVStore::SetGradientCompression(const proto::GradientCompression& spec) {
  KV_RETURN_IF_ERROR(CheckWorker("SetGradientCompression"));
  bool initialised;
  {
    std::lock_guard<std::mutex> lock(mu_);
    initialised = !info_.empty();
  }
  return compressor_.Set(spec, initialised);
}

proto::GradientCompression DistKVStore::gradient_compression() const {
  return compressor_.spec();
}

Status DistKVStore::SaveResiduals(const std::string& path) {
  KV_RETURN_IF_ERROR(CheckWorker("SaveResiduals"));
  return compressor_.Save(path, rank(), num_workers(), keys_);
}

Status DistKVStore::LoadResiduals(const std::string& path) {
  KV_RETURN_IF_ERROR(CheckWorker("LoadResiduals"));
  return compressor_.Load(path, rank(), num_workers(), &keys_,
                          [this](uint64_t id) -> StatusOr<int64_t> {
                            std::lock_guard<std::mutex> lock(mu_);
                            auto it = info_.find(id);
                            if (it == info_.end()) {
                              return KeyError(Status::Code::kNotFound, keys_.Name(id),
                                              "is not a key of this store (Init it first)");
                            }
                            return it->second.shape.NumElements();
                          });
}

ps::Blob DistKVStore::PartValue(uint64_t id, const KeyInfo& ki, size_t j, const Tensor& sum,
                               bool compress) {
  const Part& p = ki.parts[j];
  if (compress) {
    auto encoded = compressor_.Encode(id, sum.size(), static_cast<const float*>(sum.raw_data()),
                                      p.offset, p.count);
    return ps::Blob(encoded, encoded->data(), encoded->size());
  }
  return ps::Blob(sum.storage(), static_cast<char*>(sum.raw_data()) + p.offset * 4,
                  static_cast<size_t>(ki.part_bytes[j]));
}

proto::OptimizerSpec DistKVStore::CorrectMomentum(const proto::OptimizerSpec& spec) {
  return kv::CorrectMomentum(spec, &compressor_);
}

bool DistKVStore::SumsComeBackAsLevels() const {
  return sync_ && compressor_.LevelAnswer(num_workers()) > 0;
}

bool DistKVStore::AnswersRounded(int64_t size) const {
  return is_worker() && compressor_.HalfAnswer(size);
}

void DistKVStore::RoundAsAnswered(float* v, int64_t n) const { RoundToHalves(v, n); }

int DistKVStore::LevelAnswer(int64_t size) const {
  const bool compressed =
      compressor_.TypeFor(size) != proto::GradientCompression::NONE;
  if (!sync_ || server_optimizer_ || !compressed) return 0;
  return compressor_.LevelAnswer(num_workers());
}

int64_t DistKVStore::PieceElements(int64_t size) const {
  const int64_t floats = settings_.piece_bytes / 4;
  const CompressionType type = compressor_.TypeFor(size);
  if (floats <= 0 || size <= 0 || type == proto::GradientCompression::NONE ||
      !settings_.pieces_by_wire_bytes) {
    return floats;
  }
  // What a push-pull moves each way. The answer is known now only as far as
  // this worker knows its store: an optimizer sent to the servers after
  // Init turns level answers into weights, which then travel in these
  // (larger) pieces. With one worker there is no sum to share, and a
  // trainer has the servers update (Module::PrepareFit): no level answers.
  const int levels = num_workers() > 1 ? LevelAnswer(size) : 0;
  const size_t push = EncodedBytes(type, size);
  const size_t answer = AnswerBytes(size, compressor_.HalfAnswer(size), levels);
  const double wire = static_cast<double>(std::max(push, answer));
  if (wire >= 4.0 * static_cast<double>(size)) return floats;
  return std::max<int64_t>(
      floats, static_cast<int64_t>(static_cast<double>(settings_.piece_bytes) *
                                   static_cast<double>(size) / wire));
}

}  // namespace kv
}  // namespace kvtrain
