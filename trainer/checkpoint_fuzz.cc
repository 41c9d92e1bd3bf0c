// Fuzz target: the checkpoint file decoders. Byte 0 picks the format: a
// .params file (DecodeParams), or a .states file (proto KVStoreStatesFile,
// as KVStore::SaveOptimizerStates and WriteLocalStates write it) whose
// entries go through Optimizer::LoadStates of an SGD-with-momentum and an
// Adam optimizer. Decoded arrays are read whole.
#include <cstdint>
#include <string>

#include "trainer/checkpoint.h"
#include "ops/optimizer.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace {

void Params(const std::string& bytes) {
  int epoch = 0;
  StatusOr<ModelArrays> a = DecodeParams(bytes, "fuzz.params", &epoch);
  if (!a.ok()) return;
  volatile float sum = 0;
  for (const auto* m : {&a->args, &a->aux}) {
    for (const auto& [name, t] : *m) {
      const float* p = static_cast<const float*>(t.raw_data());
      for (int64_t i = 0; i < t.shape().NumElements(); ++i) sum = sum + p[i];
    }
  }
}

void States(const std::string& bytes) {
  proto::KVStoreStatesFile file;
  if (!file.ParseFromString(bytes)) return;
  for (auto type : {proto::OptimizerSpec::SGD, proto::OptimizerSpec::ADAM}) {
    proto::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_learning_rate(0.1f);
    if (type == proto::OptimizerSpec::SGD) spec.set_momentum(0.9f);
    StatusOr<std::unique_ptr<Optimizer>> opt = Optimizer::Create(spec);
    if (!opt.ok()) continue;
    for (const std::string& s : file.states()) (void)(*opt)->LoadStates(s);
  }
}

}  // namespace
}  // namespace kvtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    kvtrain::States(bytes);
  } else {
    kvtrain::Params(bytes);
  }
  return 0;
}
