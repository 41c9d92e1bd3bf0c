// Params files: proto/checkpoint.proto, written atomically.
#include "trainer/checkpoint.h"

#include <cstdio>
#include <cstring>

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
  }
  return Status::OK();
}

}  // namespace

StatusOr<std::string> EncodeParams(const ModelArrays& arrays, int epoch) {
  proto::ParamsFile file;
  file.set_epoch(epoch);
  KV_RETURN_IF_ERROR(AddArrays(arrays.args, "arg", &file));
  KV_RETURN_IF_ERROR(AddArrays(arrays.aux, "aux", &file));
  return file.SerializeAsString();
}

StatusOr<ModelArrays> DecodeParams(const std::string& bytes, const std::string& name,
                                   int* epoch) {
  proto::ParamsFile file;
  if (!file.ParseFromString(bytes)) {
    return Status::DataLoss(name + ": not a params file (truncated or corrupt)");
  }
  ModelArrays out;
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

Status SaveParams(const std::string& path, const ModelArrays& arrays, int epoch) {
  KV_ASSIGN_OR_RETURN(std::string bytes, EncodeParams(arrays, epoch));
  return WriteFileAtomic(path, bytes);
}

Status WriteLocalStates(const std::string& path, const std::string& states) {
  proto::KVStoreStatesFile file;
  file.set_store_type("worker");
  file.add_states(states);
  return WriteFileAtomic(path, file.SerializeAsString());
}

StatusOr<std::string> ReadLocalStates(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  proto::KVStoreStatesFile file;
  if (!file.ParseFromString(bytes) || file.states_size() != 1) {
    return Status::DataLoss(path + ": not the optimizer states of one worker");
  }
  return file.states(0);
}

StatusOr<ModelArrays> LoadParams(const std::string& path, int* epoch) {
  KV_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return DecodeParams(bytes, path, epoch);
}

}  // namespace kvtrain
