// Params files: proto/checkpoint.proto, written atomically.
#include "trainer/checkpoint.h"

#include <cstdio>
#include <cstring>

#include "base/crc32c.h"
#include "base/file.h"
#include "proto/checkpoint.pb.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {

std::string SymbolPath(const std::string& prefix) { return prefix + "-symbol.txt"; }

std::string ParamsPath(const std::string& prefix, int epoch) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "-%04d.params", epoch);
  return prefix + buf;
}

std::string StatesPath(const std::string& prefix, int epoch) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "-%04d.states", epoch);
  return prefix + buf;
}

std::string ResidualsPath(const std::string& prefix, int epoch, int rank) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "-%04d.rank%d.residuals", epoch, rank);
  return prefix + buf;
}

namespace {

Status AddArrays(const std::map<std::string, Tensor>& arrays, const std::string& kind,
                 proto::ParamsFile* file) {
  for (const auto& [name, t] : arrays) {
    if (t.dtype() != DType::kFloat32) {
      return Status::InvalidArgument("checkpoint: " + name + " is " +
                                     DTypeName(t.dtype()) + ", only float32 is saved");
    }
    KV_ASSIGN_OR_RETURN(Tensor host, t.CopyTo(Device::CPU()));
    proto::NamedArray* a = file->add_arrays();
    a->set_name(kind + ":" + name);
    for (int64_t d : t.shape().dims()) a->add_shape(d);
    a->set_data(std::string(static_cast<const char*>(host.raw_data()), host.nbytes()));
    a->set_crc32c(Crc32c(a->data().data(), a->data().size()));
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::string> EncodeParams(const ModelArrays& arrays, int epoch,
                                   uint64_t states_digest) {
  // Checked before anything is copied: protobuf cannot write a message
  // above 2 GB (SerializeAsString would return an empty string).
  int64_t bytes = 0;
  for (const auto* m : {&arrays.args, &arrays.aux}) {
    for (const auto& [name, t] : *m) bytes += static_cast<int64_t>(t.nbytes()) + 64 + 2 * name.size();
  }
  if (bytes > kMaxParamsFileBytes - 64) {
    return Status::FailedPrecondition(
        "checkpoint: the model's arrays take " + std::to_string(bytes) +
        " bytes; a params file holds at most " + std::to_string(kMaxParamsFileBytes) +
        " (protobuf's 2 GB limit)");
  }
  proto::ParamsFile file;
  file.set_epoch(epoch);
  file.set_states_digest(states_digest);
  KV_RETURN_IF_ERROR(AddArrays(arrays.args, "arg", &file));
  KV_RETURN_IF_ERROR(AddArrays(arrays.aux, "aux", &file));
  file.set_num_arrays(static_cast<uint32_t>(file.arrays_size()));
  std::string out;
  if (!file.SerializeToString(&out) || out.empty()) {
    return Status::Internal("checkpoint: the params could not be serialized");
  }
  return out;
}

StatusOr<ModelArrays> DecodeParams(const std::string& bytes, const std::string& name,
                                   int* epoch) {
  if (bytes.empty()) return Status::DataLoss(name + ": the file is empty");
  proto::ParamsFile file;
  if (!file.ParseFromString(bytes)) {
    return Status::DataLoss(name + ": not a params file (truncated or corrupt)");
  }
  if (file.num_arrays() == 0) {
    return Status::DataLoss(name + ": has no array count (" + std::to_string(file.arrays_size()) +
                            " arrays before the end of the file): truncated, or not a "
                            "complete params file");
  }
  if (file.num_arrays() != static_cast<uint32_t>(file.arrays_size())) {
    return Status::DataLoss(name + ": holds " + std::to_string(file.arrays_size()) + " of its " +
                            std::to_string(file.num_arrays()) + " arrays (truncated or corrupt)");
  }
  ModelArrays out;
  out.source = name;
  out.states_digest = file.states_digest();
  for (const proto::NamedArray& a : file.arrays()) {
    const size_t colon = a.name().find(':');
    const std::string kind = colon == std::string::npos ? "" : a.name().substr(0, colon);
    if (kind != "arg" && kind != "aux") {
      return Status::DataLoss(name + ": array \"" + a.name() +
                              "\" is neither arg:<name> nor aux:<name>");
    }
    Shape shape(std::vector<int64_t>(a.shape().begin(), a.shape().end()));
    if (!shape.IsValid() || shape.NumElements() * 4 != static_cast<int64_t>(a.data().size())) {
      return Status::DataLoss(name + ": array " + a.name() + " of shape " +
                              shape.ToString() + " holds " +
                              std::to_string(a.data().size()) + " bytes");
    }
    if (Crc32c(a.data().data(), a.data().size()) != a.crc32c()) {
      return Status::DataLoss(name + ": array " + a.name() +
                              ": checksum mismatch (the file is corrupt)");
    }
    Tensor t = Tensor::Empty(shape);
    if (!a.data().empty()) std::memcpy(t.raw_data(), a.data().data(), a.data().size());
    auto& dst = kind == "arg" ? out.args : out.aux;
    if (!dst.emplace(a.name().substr(colon + 1), std::move(t)).second) {
      return Status::DataLoss(name + ": array " + a.name() + " appears twice");
    }
  }
  if (epoch != nullptr) *epoch = file.epoch();
  return out;
}

Status SaveParams(const std::string& path, const ModelArrays& arrays, int epoch,
                  uint64_t states_digest) {
  KV_ASSIGN_OR_RETURN(std::string bytes, EncodeParams(arrays, epoch, states_digest));
  return WriteChecksummedFile(path, bytes);
}

uint64_t StatesDigest(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h == 0 ? 1 : h;  // 0 means "no states saved"
}

StatusOr<ModelArrays> LoadCheckpointParams(const std::string& prefix, int epoch) {
  const std::string path = ParamsPath(prefix, epoch);
  int found = 0;
  KV_ASSIGN_OR_RETURN(ModelArrays arrays, LoadParams(path, &found));
  if (found != epoch) {
    return Status::DataLoss(path + ": holds the arrays after epoch " + std::to_string(found) +
                            ", not " + std::to_string(epoch));
  }
  return arrays;
}

Status CheckStatesBelong(const std::string& states_path, const ModelArrays& params) {
  if (params.states_digest == 0) {
    return Status::DataLoss(params.source + " was saved without optimizer states; " +
                            states_path + " does not belong to it");
  }
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(states_path));
  if (bytes.empty()) return Status::DataLoss(states_path + ": the file is empty");
  if (StatesDigest(bytes) != params.states_digest) {
    return Status::DataLoss(states_path + ": not the optimizer states saved with " +
                            params.source + " (another epoch's, or cut or changed since)");
  }
  return Status::OK();
}

Status WriteLocalStates(const std::string& path, const std::string& states) {
  proto::KVStoreStatesFile file;
  file.set_store_type("worker");
  file.add_states(states);
  if (file.ByteSizeLong() > static_cast<size_t>(kMaxParamsFileBytes)) {
    return Status::FailedPrecondition(path + ": the optimizer states take " +
                                      std::to_string(file.ByteSizeLong()) +
                                      " bytes; a states file holds at most 2147483647");
  }
  return WriteChecksummedFile(path, file.SerializeAsString());
}

StatusOr<std::string> ReadLocalStates(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadChecksummedFile(path));
  proto::KVStoreStatesFile file;
  if (!file.ParseFromString(bytes) || file.states_size() != 1) {
    return Status::DataLoss(path + ": not the optimizer states of one worker");
  }
  return file.states(0);
}

StatusOr<ModelArrays> LoadParams(const std::string& path, int* epoch) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  if (bytes.empty()) return Status::DataLoss(path + ": the file is empty");
  StatusOr<std::string> intact = StripChecksum(path, bytes);
  if (!intact.ok()) {
    // A corrupt file: name the array the damage is in where the rest still
    // decodes (each array has its own checksum).
    if (bytes.size() > 8) {
      StatusOr<ModelArrays> decoded =
          DecodeParams(bytes.substr(0, bytes.size() - 8), path, epoch);
      if (!decoded.ok() &&
          decoded.status().message().find(": checksum mismatch") != std::string::npos) {
        return decoded.status();
      }
    }
    return intact.status();
  }
  return DecodeParams(*intact, path, epoch);
}

}  // namespace kvtrain
