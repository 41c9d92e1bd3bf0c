// Checkpoints of a model: P-symbol.txt (the graph), P-NNNN.params (its
// parameters and auxiliary states after epoch NNNN) and P-NNNN.states (the
// optimizer's states, from the KVStore). Every file is written atomically:
// a crash while writing leaves the previous checkpoint readable.
#ifndef KVTRAIN_TRAINER_CHECKPOINT_H_
#define KVTRAIN_TRAINER_CHECKPOINT_H_

#include <map>
#include <string>

#include "base/status.h"
#include "tensor/tensor.h"

namespace kvtrain {

// Parameter arrays ("fc1_weight") and auxiliary states ("bn1_moving_mean").
struct ModelArrays {
  std::map<std::string, Tensor> args;
  std::map<std::string, Tensor> aux;
};

// "P-symbol.txt", "P-0003.params", "P-0003.states".
std::string SymbolPath(const std::string& prefix);
std::string ParamsPath(const std::string& prefix, int epoch);
std::string StatesPath(const std::string& prefix, int epoch);

// Serialises / parses a params file (float32 arrays, copied to the host).
StatusOr<std::string> EncodeParams(const ModelArrays& arrays, int epoch);
StatusOr<ModelArrays> DecodeParams(const std::string& bytes, const std::string& name,
                                   int* epoch = nullptr);

Status SaveParams(const std::string& path, const ModelArrays& arrays, int epoch);

// States of an optimizer that runs in the workers (update_on_kvstore off),
// in the same file format as KVStore::SaveOptimizerStates.
Status WriteLocalStates(const std::string& path, const std::string& states);
StatusOr<std::string> ReadLocalStates(const std::string& path);
// Errors name the file: missing, truncated or corrupt, duplicate arrays.
StatusOr<ModelArrays> LoadParams(const std::string& path, int* epoch = nullptr);

}  // namespace kvtrain

#endif  // KVTRAIN_TRAINER_CHECKPOINT_H_
