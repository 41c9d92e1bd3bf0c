// StoreSettings::FromEnv.
#include "kvstore/settings.h"

namespace kvtrain {
namespace kv {

StatusOr<StoreSettings> StoreSettings::FromEnv(const EnvLookup& env) {
  StoreSettings s;
  // KVTRAIN_BIGARRAY_BOUND wins; MXNet's name is accepted too.
  const char* bound_var = env(env::kBigArrayBound) ? env::kBigArrayBound
                                                   : env::kMxnetBigArrayBound;
  KV_ASSIGN_OR_RETURN(s.bigarray_bound,
                      GetIntVar(env, bound_var, s.bigarray_bound, 1,
                                int64_t{1} << 50));
  KV_ASSIGN_OR_RETURN(int64_t threads,
                      GetIntVar(env, env::kServerThreads, s.server_threads, 0, 256));
  s.server_threads = static_cast<int>(threads);
  s.server_threads_given = env(env::kServerThreads).has_value();
  KV_ASSIGN_OR_RETURN(s.bucket_bytes,
                      GetIntVar(env, env::kPsBucketBytes, s.bucket_bytes, 0, int64_t{1} << 40));
  s.bucket_bytes_given = env(env::kPsBucketBytes).has_value();
  s.piece_bytes_given = env(env::kPsPieceBytes).has_value();
  if (!s.piece_bytes_given && s.bucket_bytes_given)
    s.piece_bytes = s.bucket_bytes;
  KV_ASSIGN_OR_RETURN(
      s.piece_bytes,
      GetIntVar(env, env::kPsPieceBytes, s.piece_bytes, 0, int64_t{1} << 40));
  KV_ASSIGN_OR_RETURN(double timeout,
                      GetSecondsVar(env, env::kKVStoreTimeout, 600, 0.01, 86400 * 30));
  s.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  KV_ASSIGN_OR_RETURN(s.keep_freed_memory,
                      GetBoolVar(env, env::kKeepFreedMemory, s.keep_freed_memory));
  return s;
}

}  // namespace kv
}  // namespace kvtrain
