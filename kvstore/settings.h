// The dist stores' settings from the environment (base/env.h), with the
// one-host and between-hosts defaults in one place.
#ifndef KVTRAIN_KVSTORE_SETTINGS_H_
#define KVTRAIN_KVSTORE_SETTINGS_H_

#include <chrono>
#include <cstdint>

#include "base/env.h"
#include "base/status.h"

namespace kvtrain {
namespace kv {

// Settings from the environment (see base/env.h).
struct StoreSettings {
  // Arrays with at least this many elements are split across all servers
  // (MXNet's default is 1,000,000; lower, the servers' links share a
  // mid-sized model's largest layers).
  int64_t bigarray_bound = 65536;
  // Handler threads per server (0: requests are handled on the receive
  // thread). Unless KVTRAIN_SERVER_THREADS gives it (server_threads_given),
  // DistKVStore::Create picks it from the job's hosts: on one host, every
  // request reaches the receive thread straight from its sender's ring
  // (net/shm_ring.h), and a handler thread would add a wake-up per request
  // on CPUs that every process of the job shares.
  static constexpr int kServerThreadsAcrossHosts = 2;
  static constexpr int kServerThreadsOneHost = 0;
  int server_threads = kServerThreadsAcrossHosts;
  bool server_threads_given = false;
  // Dist stores: push-pulls of keys travel together, one request per
  // server, up to this many bytes (0: one request per key). Unless
  // KVTRAIN_PS_BUCKET_BYTES gives it (bucket_bytes_given),
  // DistKVStore::Create picks it from the job's hosts: on one host a
  // transfer is a copy into shared memory, and each extra message costs
  // thread wake-ups on CPUs that every process of the job shares.
  static constexpr int64_t kBucketBytesAcrossHosts = 64 << 10;
  static constexpr int64_t kBucketBytesOneHost = 256 << 10;
  int64_t bucket_bytes = kBucketBytesAcrossHosts;
  bool bucket_bytes_given = false;
  // Larger keys are cut into pieces of about this many bytes of what their
  // push-pulls move on the wire, the heavier way (Placement;
  // DistKVStore::PieceElements), each a request of its own of at most this
  // many bytes (0: uncut). KVTRAIN_PS_PIECE_BYTES gives it, else
  // KVTRAIN_PS_BUCKET_BYTES where that is given, else Create picks it with
  // the hosts: between hosts, small pieces let the answer of one travel
  // while the next is still going out.
  static constexpr int64_t kPieceBytesAcrossHosts = 64 << 10;
  static constexpr int64_t kPieceBytesOneHost = 256 << 10;
  int64_t piece_bytes = kPieceBytesAcrossHosts;
  bool piece_bytes_given = false;
  // At most this many pieces per server slice of a key (Placement), picked
  // with the hosts: between hosts 8, so that the pieces of a mid-sized
  // layer stay near piece_bytes; on one host 4.
  static constexpr int kPiecesPerSliceAcrossHosts = 8;
  static constexpr int kPiecesPerSliceOneHost = 4;
  int pieces_per_slice = kPiecesPerSliceAcrossHosts;
  // Whether piece_bytes counts a compressed key's bytes on the wire (between
  // hosts, where a piece's bytes are its link time) or its float32 bytes
  // (on one host, where a piece pipelines the copies and the update).
  bool pieces_by_wire_bytes = true;
  // Longest wait for one push/pull/command.
  std::chrono::milliseconds timeout = std::chrono::seconds(600);
  // Tune glibc malloc for large messages (base/malloc_tuning.h).
  bool keep_freed_memory = true;

  static StatusOr<StoreSettings> FromEnv(const EnvLookup& env);
};

}  // namespace kv
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_SETTINGS_H_
