// Gradient compression specs (compression/compression.h): names, checks,
// parsing from the flag form, and what a spec implies for pulls.
#include "compression/compression.h"

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <string>

namespace kvtrain {
namespace kv {

std::string CompressionName(CompressionType type) {
  switch (type) {
    case proto::GradientCompression::NONE:
      return "none";
    case proto::GradientCompression::TWO_BIT:
      return "2bit";
    case proto::GradientCompression::ONE_BIT:
      return "1bit";
    case proto::GradientCompression::FP16:
      return "fp16";
    default:
      return "type " + std::to_string(static_cast<int>(type));
  }
}

Status CheckCompression(const proto::GradientCompression& spec) {
  if (spec.min_bytes() < 0) {
    return Status::InvalidArgument("gradient compression: min_bytes " +
                                   std::to_string(spec.min_bytes()) + " must be >= 0");
  }
  if (!proto::GradientCompression::Pull_IsValid(spec.pull())) {
    return Status::InvalidArgument("gradient compression: unknown pull " +
                                   std::to_string(static_cast<int>(spec.pull())) +
                                   " (valid: float32, fp16)");
  }
  if (spec.pull() == proto::GradientCompression::PULL_FP16 &&
      spec.type() == proto::GradientCompression::NONE) {
    return Status::InvalidArgument(
        "gradient compression: pull fp16 needs a type (2bit, 1bit or fp16); type none sends "
        "float32 both ways");
  }
  if (spec.auto_threshold() && spec.type() != proto::GradientCompression::TWO_BIT) {
    return Status::InvalidArgument("gradient compression " + CompressionName(spec.type()) +
                                   ": an automatic threshold is 2bit's (1bit scales each "
                                   "array by its mean already)");
  }
  switch (spec.type()) {
    case proto::GradientCompression::NONE:
    case proto::GradientCompression::ONE_BIT:
    case proto::GradientCompression::FP16:
      return Status::OK();
    case proto::GradientCompression::TWO_BIT:
      if (spec.auto_threshold()) {
        if (spec.threshold() != 0.0f) {
          return Status::InvalidArgument(
              "gradient compression 2bit: give a threshold or auto, not both");
        }
        return Status::OK();
      }
      if (!(spec.threshold() > 0.0f) || !std::isfinite(spec.threshold())) {
        char threshold[32];
        std::snprintf(threshold, sizeof(threshold), "%g", static_cast<double>(spec.threshold()));
        return Status::InvalidArgument(std::string("gradient compression 2bit: threshold ") +
                                       threshold +
                                       " must be a finite value > 0 (MXNet's default is 0.5), "
                                       "or auto");
      }
      return Status::OK();
    default:
      return Status::InvalidArgument("gradient compression: unknown type " +
                                     std::to_string(static_cast<int>(spec.type())) +
                                     " (valid: none, 2bit, 1bit, fp16)");
  }
}

StatusOr<proto::GradientCompression> ParseCompression(const std::string& type,
                                                      float threshold, int64_t min_bytes,
                                                      const std::string& pull) {
  proto::GradientCompression spec;
  spec.set_min_bytes(min_bytes);
  if (pull == "fp16") {
    spec.set_pull(proto::GradientCompression::PULL_FP16);
  } else if (pull == "float32") {
    spec.set_pull(proto::GradientCompression::PULL_FLOAT32);
  } else if (!pull.empty()) {
    return Status::InvalidArgument("gradient compression: unknown pull '" + pull +
                                   "' (valid: float32, fp16)");
  }
  if (type == "none" || type.empty()) {
    spec.set_type(proto::GradientCompression::NONE);
  } else if (type == "2bit") {
    spec.set_type(proto::GradientCompression::TWO_BIT);
    spec.set_threshold(threshold);
  } else if (type == "1bit") {
    spec.set_type(proto::GradientCompression::ONE_BIT);
  } else if (type == "fp16") {
    spec.set_type(proto::GradientCompression::FP16);
  } else {
    return Status::InvalidArgument("gradient compression: unknown type '" + type +
                                   "' (valid: none, 2bit, 1bit, fp16)");
  }
  KV_RETURN_IF_ERROR(CheckCompression(spec));
  return spec;
}

StatusOr<proto::GradientCompression> ParseCompression(const std::string& type,
                                                      const std::string& threshold,
                                                      int64_t min_bytes,
                                                      const std::string& pull) {
  if (threshold == "auto") {
    KV_ASSIGN_OR_RETURN(proto::GradientCompression spec,
                        ParseCompression(type, 1.0f, min_bytes, pull));
    if (spec.type() != proto::GradientCompression::TWO_BIT) {
      return Status::InvalidArgument("gradient compression " + type +
                                     ": threshold auto is 2bit's (1bit scales each array by "
                                     "its mean already)");
    }
    spec.clear_threshold();
    spec.set_auto_threshold(true);
    return spec;
  }
  char* end = nullptr;
  const float t = std::strtof(threshold.c_str(), &end);
  if (threshold.empty() || end == nullptr || *end != '\0') {
    return Status::InvalidArgument("gradient compression: threshold '" + threshold +
                                   "' is neither a number nor auto");
  }
  return ParseCompression(type, t, min_bytes, pull);
}

bool HalfPulls(const proto::GradientCompression& spec) {
  return spec.type() != proto::GradientCompression::NONE &&
         (spec.pull() == proto::GradientCompression::PULL_FP16 ||
          (spec.pull() == proto::GradientCompression::PULL_DEFAULT &&
           spec.type() == proto::GradientCompression::FP16));
}

bool AnswersHalves(const proto::GradientCompression& spec, int64_t size) {
  return size * 4 >= spec.min_bytes() && HalfPulls(spec);
}

std::string PullName(proto::GradientCompression::Pull pull) {
  switch (pull) {
    case proto::GradientCompression::PULL_FLOAT32:
      return "float32";
    case proto::GradientCompression::PULL_FP16:
      return "fp16";
    default:
      return "";
  }
}

bool HasResidual(CompressionType type) {
  return type == proto::GradientCompression::TWO_BIT ||
         type == proto::GradientCompression::ONE_BIT;
}

}  // namespace kv
}  // namespace kvtrain
