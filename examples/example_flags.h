// What the example trainers share: the optimizer flags (--optimizer, --lr,
// --momentum, --wd, --lr_factor, --lr_step_epochs), the asynchronous
// stores' flags (--staleness, --async-lr) and number-list parsing.
#ifndef KVTRAIN_EXAMPLES_EXAMPLE_FLAGS_H_
#define KVTRAIN_EXAMPLES_EXAMPLE_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvstore/kvstore.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {

// gflags::ParseCommandLineFlags for the example programs, with `usage`; but
// --help lists only the examples' own flags (--helpfull lists gflags' and
// glog's too).
void ParseExampleFlags(int* argc, char*** argv, const std::string& usage);

// "1,2.5,3" -> {1, 2.5, 3}; the error names --`flag`.
StatusOr<std::vector<double>> ParseNumbers(const std::string& text, const char* flag);

// The optimizer the flags describe; the schedule's steps are counted in
// batches of `batches_per_epoch` each.
StatusOr<proto::OptimizerSpec> OptimizerFromFlags(int64_t batches_per_epoch);

// Checks --staleness and --async-lr against the store type `kv_store`
// (an error names the flag); true when either was given.
StatusOr<bool> AsyncFlagsGiven(const std::string& kv_store);
// Sets the store's AsyncOptions from --staleness and --async-lr, if given.
Status ApplyAsyncFlags(KVStore* kv);

}  // namespace kvtrain

#endif  // KVTRAIN_EXAMPLES_EXAMPLE_FLAGS_H_
