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
  // Where they were read from ("" when not from a file), for errors.
  std::string source;
  // Set when read from a params file: the states file saved with it (see
  // StatesDigest; 0 when none was).
  uint64_t states_digest = 0;
};

// A params file holds at most this many bytes (protobuf's 2 GB limit).
inline constexpr int64_t kMaxParamsFileBytes = (int64_t{1} << 31) - 1;

// "P-symbol.txt", "P-0003.params", "P-0003.states".
std::string SymbolPath(const std::string& prefix);
std::string ParamsPath(const std::string& prefix, int epoch);
std::string StatesPath(const std::string& prefix, int epoch);
// A worker's gradient-compression residuals (KVStore::SaveResiduals),
// P-NNNN.rankR.residuals: written by every worker of a job that compresses
// with 2bit or 1bit.
std::string ResidualsPath(const std::string& prefix, int epoch, int rank);

// Serialises / parses a params file (float32 arrays, copied to the host).
// Encoding a model above kMaxParamsFileBytes is an error (nothing is
// copied). Decoding checks that the file is whole: an empty file, one cut
// short anywhere, or one without its array count is DataLoss naming `name`.
StatusOr<std::string> EncodeParams(const ModelArrays& arrays, int epoch,
                                   uint64_t states_digest = 0);
StatusOr<ModelArrays> DecodeParams(const std::string& bytes, const std::string& name,
                                   int* epoch = nullptr);

Status SaveParams(const std::string& path, const ModelArrays& arrays, int epoch,
                  uint64_t states_digest = 0);

// FNV-1a 64 of a file's bytes: the params file's record of its states file.
uint64_t StatesDigest(const std::string& bytes);
// The params of `prefix` after `epoch`; an error names the file when it
// holds another epoch's arrays (or any LoadParams error).
StatusOr<ModelArrays> LoadCheckpointParams(const std::string& prefix, int epoch);
// Checks that `states_path` is the states file saved with `params` (whose
// states_digest is set): an empty, cut or replaced file is DataLoss naming
// both files.
Status CheckStatesBelong(const std::string& states_path, const ModelArrays& params);

// States of an optimizer that runs in the workers (update_on_kvstore off),
// in the same file format as KVStore::SaveOptimizerStates.
Status WriteLocalStates(const std::string& path, const std::string& states);
StatusOr<std::string> ReadLocalStates(const std::string& path);
// Errors name the file: missing, truncated or corrupt, duplicate arrays.
StatusOr<ModelArrays> LoadParams(const std::string& path, int* epoch = nullptr);

}  // namespace kvtrain

#endif  // KVTRAIN_TRAINER_CHECKPOINT_H_
