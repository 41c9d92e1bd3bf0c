// Compressor (kvstore/compressor.h): residuals, momentum correction, the
// residual watch, and their files.
#include "kvstore/compressor.h"
#include "kvstore/keys.h"

#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/file.h"

namespace kvtrain {
namespace kv {

namespace {

// The threshold a warning suggests, as a multiple of the gradient's mean
// |value|.
constexpr double kFitThresholdScale = 2.0;
// Momentum the MLP trained with at threshold 0.5 without momentum
// correction (0.9 diverged).
constexpr float kSafeMomentum = 0.5f;

}  // namespace

Status Compressor::Set(const proto::GradientCompression& spec, bool initialised) {
  KV_RETURN_IF_ERROR(CheckCompression(spec));
  if (initialised) {
    return Status::FailedPrecondition(
        "SetGradientCompression must come before Init: keys are initialised already");
  }
  std::lock_guard<std::mutex> l(mu_);
  spec_ = spec;
  if (spec_.type() != proto::GradientCompression::TWO_BIT) spec_.clear_threshold();
  residuals_.clear();
  return Status::OK();
}

proto::GradientCompression Compressor::spec() const {
  std::lock_guard<std::mutex> l(mu_);
  return spec_;
}

CompressionType Compressor::type() const {
  std::lock_guard<std::mutex> l(mu_);
  return spec_.type();
}

CompressionType Compressor::TypeFor(int64_t size) const {
  std::lock_guard<std::mutex> l(mu_);
  return size * 4 < spec_.min_bytes() ? proto::GradientCompression::NONE : spec_.type();
}

bool Compressor::HalfAnswer(int64_t size) const {
  std::lock_guard<std::mutex> l(mu_);
  return AnswersHalves(spec_, size);
}

int Compressor::LevelAnswer(int num_workers) const {
  std::lock_guard<std::mutex> l(mu_);
  if (spec_.pull() != proto::GradientCompression::PULL_DEFAULT) return 0;
  return LevelBits(spec_.type(), num_workers);
}

std::shared_ptr<std::vector<char>> Compressor::Encode(uint64_t id, int64_t size,
                                                      const float* grad, int64_t offset,
                                                      int64_t count) {
  auto out = std::make_shared<std::vector<char>>(EncodedBytes(TypeFor(size), count));
  EncodeTo(id, size, grad, offset, count, out->data());
  return out;
}

void Compressor::EncodeTo(uint64_t id, int64_t size, const float* grad, int64_t offset,
                          int64_t count, char* out) {
  CompressionType type;
  float threshold, momentum;
  bool auto_threshold;
  Residual* r = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    type = size * 4 < spec_.min_bytes() ? proto::GradientCompression::NONE : spec_.type();
    threshold = spec_.threshold();
    auto_threshold = spec_.auto_threshold();
    momentum = momentum_;
    if (HasResidual(type)) {
      std::unique_ptr<Residual>& slot = residuals_[id];
      if (slot == nullptr) {
        slot = std::make_unique<Residual>();
        slot->values.assign(static_cast<size_t>(size), 0.0f);
      }
      r = slot.get();
    }
  }
  if (r == nullptr) {
    kv::Encode(type, threshold, grad + offset, nullptr, count, out);
    return;
  }
  std::lock_guard<std::mutex> l(r->mu);
  float* residual = r->values.data() + offset;
  const float* g = grad + offset;
  const bool corrected = momentum > 0 && type == proto::GradientCompression::TWO_BIT;
  float* u = nullptr;
  if (corrected) {
    // Momentum correction: the velocity is what error feedback keeps.
    if (r->velocity.empty()) r->velocity.assign(static_cast<size_t>(size), 0.0f);
    u = r->velocity.data() + offset;
    for (int64_t i = 0; i < count; ++i) u[i] = momentum * u[i] + g[i];
    g = u;
  }
  if (type == proto::GradientCompression::TWO_BIT && auto_threshold) {
    EncodeTwoBitAuto(g, residual, count, out);
  } else {
    kv::Encode(type, threshold, g, residual, count, out);
  }
  if (corrected) {
    // Momentum factor masking: a value sent (code other than 0) starts its
    // velocity again.
    for (int64_t w = 0; w < (count + 15) / 16; ++w) {
      uint32_t word;
      std::memcpy(&word, out + 4 + 4 * w, 4);
      if (word == 0) continue;
      const int64_t end = std::min<int64_t>(count, 16 * (w + 1));
      for (int64_t i = 16 * w; i < end; ++i) {
        if ((word >> (2 * (i - 16 * w))) & 3u) u[i] = 0.0f;
      }
    }
  }
  if (type == proto::GradientCompression::TWO_BIT && !auto_threshold) {
    WatchResidual(id, r, threshold, grad, offset, count);
  }
}

void Compressor::WatchResidual(uint64_t id, Residual* r, float threshold, const float* grad,
                               int64_t offset, int64_t count) {
  if (r->warned || count == 0) return;
  Watch& w = r->watch[offset];
  ++w.pushes;
  // Checks at kWatchFirst pushes, twice that, ... then every kWatchLast.
  const bool check = w.pushes % kWatchLast == 0 ||
                     (w.pushes < kWatchLast && w.pushes % kWatchFirst == 0 &&
                      ((w.pushes / kWatchFirst) & (w.pushes / kWatchFirst - 1)) == 0);
  if (!check) return;
  double gradient = 0, residual = 0;
  const float* res = r->values.data() + offset;
  for (int64_t i = 0; i < count; ++i) {
    gradient += std::fabs(grad[offset + i]);
    residual += std::fabs(res[i]);
  }
  residual /= static_cast<double>(count);
  w.gradient += gradient / static_cast<double>(count);
  ++w.checks;
  const double mean_gradient = w.gradient / static_cast<double>(w.checks);
  const bool growing = residual > threshold && residual > w.last;
  w.growing = growing ? w.growing + 1 : 0;
  w.last = residual;
  if (w.growing < kWatchChecks) return;
  r->warned = true;
  std::string name;
  {
    std::lock_guard<std::mutex> l(mu_);
    name = names_ != nullptr ? names_->Name(id) : std::to_string(id);
    warned_.push_back(name);
  }
  float update_momentum;
  {
    std::lock_guard<std::mutex> l(mu_);
    update_momentum = update_momentum_;
  }
  char text[768];
  std::snprintf(text, sizeof(text),
                "gradient compression 2bit: key %s: threshold %g is below its gradients (mean "
                "|gradient| %.3g, after %lld pushes): a push sends at most the threshold per "
                "value, the rest waits in the residual and arrives late (mean |residual| %.3g, "
                "growing at each of the last %d checks). A threshold near %.3g keeps up with "
                "this key, or threshold auto gives each array its own",
                name.c_str(), static_cast<double>(threshold), mean_gradient,
                static_cast<long long>(w.pushes), residual, kWatchChecks,
                kFitThresholdScale * mean_gradient);
  std::string message = text;
  if (update_momentum > kSafeMomentum) {
    std::snprintf(text, sizeof(text),
                  ". With the update's momentum %g, values that arrive late make training "
                  "oscillate and diverge: use SGD with 2bit on every array (min_bytes 0), "
                  "whose momentum then runs before error feedback, or a momentum of at most "
                  "%g",
                  static_cast<double>(update_momentum), static_cast<double>(kSafeMomentum));
    message += text;
    std::lock_guard<std::mutex> l(mu_);
    warned_of_momentum_ = true;
  }
  LOG(WARNING) << message;
}

proto::OptimizerSpec CorrectMomentum(const proto::OptimizerSpec& spec,
                                     Compressor* compressor) {
  const float m = spec.momentum();
  // Every array must carry its velocity: one that travels as float32
  // (below min_bytes) needs the update's own momentum.
  if (compressor->type() != proto::GradientCompression::TWO_BIT ||
      compressor->spec().min_bytes() > 0 || spec.type() != proto::OptimizerSpec::SGD ||
      !(m > 0.0f && m < 1.0f)) {
    compressor->SetMomentum(0, m);
    return spec;
  }
  compressor->SetMomentum(m, 0);
  proto::OptimizerSpec out = spec;
  out.set_momentum(0);
  out.set_weight_decay(spec.weight_decay() / (1.0f - m));
  return out;
}

void Compressor::SetMomentum(float momentum, float update_momentum) {
  std::lock_guard<std::mutex> l(mu_);
  momentum_ = momentum;
  update_momentum_ = update_momentum;
}

float Compressor::momentum() const {
  std::lock_guard<std::mutex> l(mu_);
  return momentum_;
}

void Compressor::SetKeyNames(const KeyTable* names) {
  std::lock_guard<std::mutex> l(mu_);
  names_ = names;
}

std::vector<std::string> Compressor::Warned() const {
  std::lock_guard<std::mutex> l(mu_);
  return warned_;
}

bool Compressor::WarnedOfMomentum() const {
  std::lock_guard<std::mutex> l(mu_);
  return warned_of_momentum_;
}

Status Compressor::Save(const std::string& path, int rank, int num_workers,
                        const KeyTable& keys) {
  proto::ResidualsFile file;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!HasResidual(spec_.type())) {
      return Status::FailedPrecondition("SaveResiduals: gradient compression '" +
                                        CompressionName(spec_.type()) +
                                        "' keeps no residuals");
    }
    *file.mutable_spec() = spec_;
    for (const auto& [id, r] : residuals_) {
      std::lock_guard<std::mutex> rl(r->mu);
      proto::ResidualsFile::Residual* out = file.add_residuals();
      out->set_key(keys.Name(id));
      out->set_int_key(id < (uint64_t{1} << 32));
      out->set_data(r->values.data(), r->values.size() * sizeof(float));
      out->set_velocity(r->velocity.data(), r->velocity.size() * sizeof(float));
    }
    file.set_momentum(momentum_);
  }
  file.set_rank(rank);
  file.set_num_workers(num_workers);
  file.set_num_residuals(static_cast<uint32_t>(file.residuals_size()));
  if (file.ByteSizeLong() > static_cast<size_t>(INT32_MAX)) {
    return Status::FailedPrecondition("saving residuals: more than 2 GB");
  }
  return WriteChecksummedFile(path, file.SerializeAsString())
      .Annotate("saving residuals");
}

Status Compressor::Load(const std::string& path, int rank, int num_workers, KeyTable* keys,
                        const std::function<StatusOr<int64_t>(uint64_t id)>& size_of) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  proto::ResidualsFile file;
  if (!file.ParseFromString(bytes) ||
      file.num_residuals() != static_cast<uint32_t>(file.residuals_size()) ||
      (file.residuals_size() == 0 && bytes.empty())) {
    return Status::DataLoss(path + ": not a residuals file (cut short, corrupt or written "
                                   "by something else)");
  }
  auto describe = [](const proto::GradientCompression& s) {
    std::ostringstream out;
    out << CompressionName(s.type());
    if (s.type() == proto::GradientCompression::TWO_BIT) {
      if (s.auto_threshold()) {
        out << " threshold auto";
      } else {
        out << " threshold " << s.threshold();
      }
    }
    if (s.min_bytes() > 0) out << " min_bytes " << s.min_bytes();
    if (!PullName(s.pull()).empty()) out << " pull " << PullName(s.pull());
    return out.str();
  };
  const proto::GradientCompression mine = spec();
  if (file.spec().type() != mine.type() || file.spec().threshold() != mine.threshold() ||
      file.spec().auto_threshold() != mine.auto_threshold() ||
      file.spec().min_bytes() != mine.min_bytes()) {
    return Status::InvalidArgument(path + " was saved with gradient compression " +
                                   describe(file.spec()) + " but this store uses " +
                                   describe(mine));
  }
  if (file.momentum() != momentum()) {
    return Status::InvalidArgument(
        path + " was saved with a momentum correction of " + std::to_string(file.momentum()) +
        " but this store's is " + std::to_string(momentum()) +
        " (the optimizer's momentum, with 2bit): resume with the same optimizer");
  }
  if (file.rank() != rank || file.num_workers() != num_workers) {
    return Status::InvalidArgument(
        path + " holds the residuals of worker " + std::to_string(file.rank()) + " of " +
        std::to_string(file.num_workers()) + " but this is worker " + std::to_string(rank) +
        " of " + std::to_string(num_workers));
  }
  std::map<uint64_t, std::unique_ptr<Residual>> loaded;
  for (const proto::ResidualsFile::Residual& r : file.residuals()) {
    KV_ASSIGN_OR_RETURN(uint64_t id, r.int_key() ? keys->Id(Key(std::atoi(r.key().c_str())))
                                                  : keys->Id(Key(r.key())));
    StatusOr<int64_t> size = size_of(id);
    if (!size.ok()) return size.status().Annotate(path);
    if (r.data().size() != static_cast<size_t>(*size) * sizeof(float)) {
      return KeyError(Status::Code::kInvalidArgument, r.key(),
                      path + " holds a residual of " + std::to_string(r.data().size() / 4) +
                          " values but the key has " + std::to_string(*size));
    }
    if (!r.velocity().empty() && r.velocity().size() != r.data().size()) {
      return KeyError(Status::Code::kInvalidArgument, r.key(),
                      path + " holds a velocity of " + std::to_string(r.velocity().size() / 4) +
                          " values but the key has " + std::to_string(*size));
    }
    auto slot = std::make_unique<Residual>();
    slot->values.resize(static_cast<size_t>(*size));
    std::memcpy(slot->values.data(), r.data().data(), r.data().size());
    if (!r.velocity().empty()) {
      slot->velocity.resize(static_cast<size_t>(*size));
      std::memcpy(slot->velocity.data(), r.velocity().data(), r.velocity().size());
    }
    loaded[id] = std::move(slot);
  }
  std::lock_guard<std::mutex> l(mu_);
  residuals_ = std::move(loaded);
  return Status::OK();
}

}  // namespace kv
}  // namespace kvtrain
