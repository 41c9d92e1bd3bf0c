// Communicator: a process group over ZeroMQ for all-reduce data parallelism
// and point-to-point model parallelism. Tagged Send/Recv (PeerLink), ring
// all-reduce (reduce-scatter + all-gather, streamed in pieces), barrier,
// broadcast, and Split into sub-groups. Every wait has a timeout, and a peer
// that dies or goes silent turns waits on it into errors naming its rank and
// address within seconds (connection drop, or heartbeats).
//
// Creating one: CreateFromEnv under tracker/launch.py -s 0 (the scheduler
// process serves the rendezvous: ServeRendezvous) or under mpirun/mpiexec
// (rank and size from OMPI_COMM_WORLD_* or PMI_*; rank 0 serves the
// rendezvous at KVTRAIN_RENDEZVOUS); CreateLocalGroup for tests.
#ifndef KVTRAIN_TRANSPORT_COLLECTIVE_COMMUNICATOR_H_
#define KVTRAIN_TRANSPORT_COLLECTIVE_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/peer_link.h"
#include "base/status.h"
#include "base/thread_annotations.h"
#include "net/curve.h"

namespace kvtrain {
namespace collective {

class Mesh;

struct CommunicatorOptions {
  // Longest wait of one collective (KVTRAIN_KVSTORE_TIMEOUT).
  std::chrono::milliseconds timeout = std::chrono::seconds(600);
  // Seconds between heartbeats, 0 = off (PS_HEARTBEAT_INTERVAL).
  double heartbeat_interval_s = 1.0;
  // Seconds of silence before a peer is dead (PS_HEARTBEAT_TIMEOUT).
  double heartbeat_timeout_s = 10.0;
  // Seconds to wait for every rank at start (KVTRAIN_STARTUP_TIMEOUT).
  double startup_timeout_s = 60.0;
  // All-reduce streams each rank's segment in pieces of at most this many
  // bytes, so adding one piece overlaps receiving the next
  // (KVTRAIN_ALLREDUCE_PIECE_BYTES). 4 MB, the size of NCCL's buffers: on
  // 127.0.0.1, 256 KB and 1 MB pieces cost more per message than their
  // overlap saves (bench/allreduce_bench).
  size_t piece_bytes = 4 << 20;
  // All-reduces of at most this many bytes in a group whose size is a power
  // of two use recursive doubling (log2(n) rounds, each swapping the whole
  // tensor with one partner) instead of the ring's 2(n-1) rounds; 0: always
  // the ring (KVTRAIN_ALLREDUCE_DOUBLING_BYTES). Fewer rounds pay off where
  // a round's latency outweighs the extra bytes (bench/allreduce_bench).
  size_t doubling_bytes = 1 << 20;
  // Ranks on one host connect over Unix-domain (ipc://) sockets instead of
  // TCP over 127.0.0.1 (KVTRAIN_SAME_HOST_IPC): same bytes, fewer kernel
  // costs (bench/allreduce_bench).
  bool same_host_ipc = true;
  // With security on, messages to ranks reached over TCP go over a sealed
  // lane (AES-256-GCM under a key given over CURVE; KVTRAIN_SEALED_LANE;
  // docs/security.md).
  bool sealed_lane = true;
  // CreateFromEnv tunes glibc malloc to keep freed memory
  // (KVTRAIN_KEEP_FREED_MEMORY, base/malloc_tuning.h): each received piece is
  // then not a fresh mmap whose munmap stalls every thread of the process.
  bool keep_freed_memory = true;
  // What one peer may have sent that this rank has not received yet (all
  // tags, collectives and groups together): at most this many messages and
  // bytes (each message counted as its bytes + 256). A peer that goes past
  // either is cut off: every wait on it fails naming it and the limits. A
  // correct peer stays far below them, unless a Broadcast or Send larger
  // than the byte limit reaches a rank before it asks for it, or a ring
  // all-reduce has more than the message limit of pieces (tensor bytes /
  // piece_bytes): raise them then. No environment variable.
  size_t max_queued_messages_per_peer = 65536;
  size_t max_queued_bytes_per_peer = size_t{8} << 30;
  // The job's CURVE key (KVTRAIN_JOB_KEY / _FILE, or KVTRAIN_INSECURE=1):
  // every socket of the group, the rendezvous included, is secured with it,
  // as the parameter-server transport's are (net/curve.h).
  net::JobKey key;

  // Fills the fields above from the environment (named variables).
  static StatusOr<CommunicatorOptions> FromEnv(const EnvLookup& env);
};

// Where the rank, size and rendezvous of this process come from.
struct GroupEnv {
  int rank = 0;
  int size = 1;
  std::string source;           // "Open MPI", "PMI", "DMLC"
  std::string rendezvous_host;  // the rendezvous address
  int rendezvous_port = 0;
  bool host_rendezvous = false;  // this process serves it (MPI rank 0)
  std::string advertise_host;    // the address peers reach this rank at

  // With DMLC_ROLE set (tracker/launch.py, any launcher): DMLC_RANK and
  // DMLC_NUM_WORKER, the scheduler serves the rendezvous. Otherwise
  // OMPI_COMM_WORLD_RANK/SIZE, else PMI_RANK/PMI_SIZE, and rank 0 serves it.
  // The rendezvous is KVTRAIN_RENDEZVOUS=host:port, else
  // DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT.
  // Bad or missing values are errors naming the variable.
  static StatusOr<GroupEnv> FromEnv(const EnvLookup& env);
};

// Thread-safe: Send/Recv from any threads. Collectives (AllReduceSum,
// Barrier, Broadcast, Split) are serialised per communicator and must be
// called in the same order on every rank of the group; different
// communicators (e.g. a Split's) are independent.
class Communicator : public PeerLink {
 public:
  // Joins the job this process belongs to (see GroupEnv::FromEnv).
  static StatusOr<std::shared_ptr<Communicator>> CreateFromEnv(
      const EnvLookup& env = ProcessEnv());
  // Joins as `group` says, with `options`.
  static StatusOr<std::shared_ptr<Communicator>> Create(
      const GroupEnv& group, const CommunicatorOptions& options);
  // `n` connected communicators in this process (loopback), for tests.
  static StatusOr<std::vector<std::shared_ptr<Communicator>>> CreateLocalGroup(
      int n, const CommunicatorOptions& options = {});
  // The scheduler process of a launch.py job with 0 servers: serves the
  // rendezvous for DMLC_NUM_WORKER ranks at DMLC_PS_ROOT_PORT (0: any free
  // port, written to KVTRAIN_SCHEDULER_PORT_FILE) and returns once every
  // rank has the table.
  static Status ServeRendezvous(const EnvLookup& env = ProcessEnv());

  ~Communicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }

  // PeerLink. `peer` is a rank of this communicator.
  Status Send(int peer, uint64_t tag, const void* data, size_t size) override;
  Status Recv(int peer, uint64_t tag, void* data, size_t size,
              Duration timeout) override;

  // Sums `count` floats across the group, in place on every rank.
  Status AllReduceSum(float* data, size_t count);
  // Every rank's `bytes` bytes at `mine`, in rank order, into every rank's
  // `all` (size() * bytes). `mine` must stay unchanged until it returns.
  Status AllGather(const void* mine, size_t bytes, void* all);
  // Returns once every rank of the group has entered.
  Status Barrier();
  // Copies root's `size` bytes into every rank's `data`.
  Status Broadcast(int root, void* data, size_t size);
  // MPI_Comm_split: ranks with the same `color` (>= 0) form a group,
  // ordered by (key, rank). A negative color joins none: nullptr.
  StatusOr<std::shared_ptr<Communicator>> Split(int color, int key);

  // "rank 1 (10.0.0.2:40123)" for a rank of this communicator.
  std::string PeerName(int peer) const;
  // How this rank reaches `peer` (not this rank): "ipc" or "tcp".
  std::string Transport(int peer) const;
  const CommunicatorOptions& options() const { return options_; }

  // Leaves: peers' waits on this process fail as "has left". Closes the
  // connections shared with communicators Split from this one. Idempotent.
  void Close();

 private:
  Communicator(std::shared_ptr<Mesh> mesh, uint64_t group,
               std::vector<int> members, int rank,
               const CommunicatorOptions& options);
  // The next collective's tag; the ones before it are over (see
  // Mesh::Retire).
  uint64_t NextSeq() REQUIRES(coll_mu_);
  Status DoublingAllReduce(float* data, size_t count, uint64_t tag)
      REQUIRES(coll_mu_);
  Status RingAllReduce(float* data, size_t count, uint64_t tag)
      REQUIRES(coll_mu_);
  Status RecvPiece(int peer, uint64_t tag, size_t bytes,
                   std::chrono::steady_clock::time_point deadline,
                   const char* what, void* copy_to, float* add_to,
                   bool wait_released = false);

  std::shared_ptr<Mesh> mesh_;
  const uint64_t group_;
  const std::vector<int> members_;  // global rank of each rank
  const int rank_;
  const CommunicatorOptions options_;
  std::mutex coll_mu_;
  uint64_t seq_ GUARDED_BY(coll_mu_) = 0;
};

}  // namespace collective
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_COLLECTIVE_COMMUNICATOR_H_
