// Compressor: a worker's gradient compression state (the spec, each key's
// error-feedback residual and momentum-correction velocity, the residual
// watch and its warning) and KVStore::CorrectMomentum's rule. The encodings
// themselves are compression/compression.h's.
#ifndef KVTRAIN_KVSTORE_COMPRESSOR_H_
#define KVTRAIN_KVSTORE_COMPRESSOR_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "kvstore/keys.h"
#include "compression/compression.h"
#include "proto/kvstore.pb.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {
namespace kv {

// A worker's gradient compression: the spec and each key's error-feedback
// residual (2bit, 1bit), by key id. Thread-safe; pushes of one key are
// encoded one at a time.
class Compressor {
 public:
  // Checks the spec (CheckCompression); `initialised`: the store already
  // has keys, which is an error (residuals and servers expect the encoding
  // from a key's first push on).
  Status Set(const proto::GradientCompression& spec, bool initialised) EXCLUDES(mu_);
  proto::GradientCompression spec() const EXCLUDES(mu_);
  CompressionType type() const EXCLUDES(mu_);
  // The encoding of a key of `size` elements: NONE below the spec's
  // min_bytes.
  CompressionType TypeFor(int64_t size) const EXCLUDES(mu_);
  // Whether a push-pull of a key of `size` elements is answered as halves
  // (a compressed key under a spec with HalfPulls).
  bool HalfAnswer(int64_t size) const EXCLUDES(mu_);
  // The level bits (LevelBits) push-pulls of the compressed keys (TypeFor
  // not NONE) may be answered with where the servers hold the step's sum of
  // `num_workers` pushes: 0 unless the spec's pull is PULL_DEFAULT.
  int LevelAnswer(int num_workers) const EXCLUDES(mu_);
  // Encodes elements [offset, offset + count) of key `id`'s gradient `grad`
  // (host float32; `size` elements in all) into a new blob as TypeFor(size),
  // updating the key's residual.
  std::shared_ptr<std::vector<char>> Encode(uint64_t id, int64_t size, const float* grad,
                                            int64_t offset, int64_t count) EXCLUDES(mu_);
  // The same into `out`, EncodedBytes(TypeFor(size), count) bytes.
  void EncodeTo(uint64_t id, int64_t size, const float* grad, int64_t offset, int64_t count,
                char* out) EXCLUDES(mu_);
  // The residuals file (proto ResidualsFile). `size_of` gives a key's
  // element count by name, or an error when the store has no such key.
  Status Save(const std::string& path, int rank, int num_workers,
              const KeyTable& keys) EXCLUDES(mu_);
  Status Load(const std::string& path, int rank, int num_workers, KeyTable* keys,
              const std::function<StatusOr<int64_t>(uint64_t id)>& size_of) EXCLUDES(mu_);
  // The store's key names, for warnings (it outlives the compressor).
  void SetKeyNames(const KeyTable* names) EXCLUDES(mu_);
  // 2bit with a fixed threshold: a key's (or piece's) residual is measured
  // after kWatchFirst pushes, twice that, and so on, then every kWatchLast;
  // one whose mean |value| is above the threshold and grew at kWatchChecks
  // checks in a row means the threshold is below those gradients (what is
  // not sent piles up and arrives late): warned once per key, naming it,
  // the gradient's mean |value| and a threshold that would keep up.
  static constexpr int kWatchFirst = 32;
  static constexpr int kWatchLast = 1024;
  static constexpr int kWatchChecks = 3;
  // Momentum correction (Lin et al., "Deep Gradient Compression", ICLR'18)
  // for 2bit: with momentum m > 0, each key's velocity is kept here, before
  // error feedback (u <- m u + g; the residual takes u), and a value sent
  // starts its velocity again (momentum factor masking); the update then
  // runs without momentum (MomentumCorrected). 0: off.
  // `update_momentum`: the momentum the update keeps (where it is not
  // corrected), for the warning below.
  void SetMomentum(float momentum, float update_momentum = 0) EXCLUDES(mu_);
  float momentum() const EXCLUDES(mu_);
  // Keys warned about so far (their names), and whether a warning also
  // named the update's momentum.
  std::vector<std::string> Warned() const EXCLUDES(mu_);
  bool WarnedOfMomentum() const EXCLUDES(mu_);

 private:
  // One part's watch (per key, by the part's first element).
  struct Watch {
    int64_t pushes = 0;
    int checks = 0;
    double gradient = 0;  // sum of the mean |gradient| at each check
    double last = 0;      // mean |residual| at the last check
    int growing = 0;      // checks in a row it grew, above the threshold
  };
  struct Residual {
    std::mutex mu;
    std::vector<float> values;
    std::vector<float> velocity;  // momentum correction
    std::map<int64_t, Watch> watch;
    bool warned = false;
  };
  // After encoding elements [offset, offset + count) of `grad`.
  void WatchResidual(uint64_t id, Residual* r, float threshold, const float* grad,
                     int64_t offset, int64_t count) REQUIRES(r->mu) EXCLUDES(mu_);
  mutable std::mutex mu_;
  proto::GradientCompression spec_ GUARDED_BY(mu_);
  std::map<uint64_t, std::unique_ptr<Residual>> residuals_ GUARDED_BY(mu_);
  const KeyTable* names_ GUARDED_BY(mu_) = nullptr;
  float momentum_ GUARDED_BY(mu_) = 0;
  float update_momentum_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> warned_ GUARDED_BY(mu_);
  bool warned_of_momentum_ GUARDED_BY(mu_) = false;
};

// KVStore::CorrectMomentum for a store compressing with `compressor`.
proto::OptimizerSpec CorrectMomentum(const proto::OptimizerSpec& spec, Compressor* compressor);

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_COMPRESSOR_H_
