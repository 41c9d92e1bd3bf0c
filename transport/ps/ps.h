// The parameter-server transport: a Postoffice per process (scheduler, server
// or worker), KVWorker to push/pull key-value bytes, KVServer to answer them.
// It moves bytes between roles over ZeroMQ and knows nothing about tensors.
#ifndef KVTRAIN_TRANSPORT_PS_PS_H_
#define KVTRAIN_TRANSPORT_PS_PS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/node_config.h"
#include "base/status.h"
#include "net/curve.h"

namespace kvtrain {
namespace ps {

using Clock = std::chrono::steady_clock;
using Duration = Clock::duration;

// A read-only byte range that keeps its storage alive (shared ownership).
// Frames go to and come from the network as Blobs without copies: a Blob
// given to Push stays referenced until ZeroMQ has written it out, and a
// received Blob is a view into the received message. Received blobs are
// 8-byte aligned. Copying a Blob copies the reference, not the bytes.
// Thread-compatible; the bytes are never written through a Blob.
class Blob {
 public:
  Blob() = default;
  // [data, data + size) must stay valid and unchanged while `owner` lives.
  Blob(std::shared_ptr<const void> owner, const void* data, size_t size);

  // Owns a copy of the bytes.
  static Blob Copy(const void* data, size_t size);
  static Blob FromString(std::string s);
  // Takes the vector over (no copy of its elements).
  template <typename T>
  static Blob FromVector(std::vector<T> v) {
    auto owner = std::make_shared<std::vector<T>>(std::move(v));
    return Blob(owner, owner->data(), owner->size() * sizeof(T));
  }

  const char* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The sub-range [offset, offset + size), sharing the owner. Out of range
  // is a programmer bug (CHECK).
  Blob Slice(size_t offset, size_t size) const;
  // Element count and typed view; the size must be a multiple of sizeof(T).
  template <typename T>
  size_t count() const {
    return size_ / sizeof(T);
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }
  std::string ToString() const { return std::string(data_, size_); }
  // Number of owners sharing the storage (0 for an empty Blob).
  long use_count() const { return owner_.use_count(); }

 private:
  std::shared_ptr<const void> owner_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

// The sum of n int64 byte lengths in `lens` (which must hold n of them);
// an error names `what` and the first length that is negative or makes the
// sum overflow.
StatusOr<uint64_t> SumLens(const Blob& lens, size_t n, const std::string& what);

// Bytes to fill and then send as an answer's values
// (KVServer::NewAnswerBuffer). To a peer on this host it lies in the
// connection's shared memory (net/shm.h), and the transport hands it over
// without copying it; elsewhere it is plain memory. `blob` views
// [data, data + size) and keeps it alive; write every byte before sending,
// and none after.
struct SendBuffer {
  char* data = nullptr;
  Blob blob;
  // Plain memory, not zeroed.
  static SendBuffer Heap(size_t size);
};

// Keys with their values. Keys are uint64, sorted ascending and unique.
// Values are raw bytes concatenated in key order; `lens` (int64, bytes per
// key) is given when keys hold different sizes, else the values are split
// equally among the keys. Without keys, `vals` is an opaque payload (a
// command's data, or a server's answer to one). `attrs`: the application's
// records about each key (a step, an encoding), all of one size, in key
// order; a request's are cut with its keys, so each server gets only its
// own keys' records. Empty: none.
struct KVPairs {
  Blob keys;
  Blob vals;
  Blob lens;
  Blob attrs;

  size_t num_keys() const { return keys.count<uint64_t>(); }
  uint64_t key(size_t i) const { return keys.as<uint64_t>()[i]; }
  // Checks the invariants above; the error names the first bad key/size.
  Status Validate() const;

  // Convenience for callers holding vectors.
  static KVPairs From(std::vector<uint64_t> keys, Blob vals,
                      std::vector<int64_t> lens = {});
};

// A half-open key range [begin, end).
struct KeyRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool Contains(uint64_t key) const { return key >= begin && key < end; }
};

// Barrier groups; combine with |.
enum Group : int {
  kSchedulerGroup = 1,
  kServerGroup = 2,
  kWorkerGroup = 4,
  kAllGroups = 7,
};
// "servers+workers".
std::string GroupName(int groups);

// Called once when the job fails (a peer died, a start-up
// deadline passed, an ABORT arrived). The default handler logs the reason
// with glog and ends the process with kJobFailedExitCode. A handler that
// returns leaves the Postoffice failed: every later call returns the reason.
using FailureHandler = std::function<void(const Status& reason)>;
inline constexpr int kJobFailedExitCode = 3;

// Tuning knobs of a Postoffice; every field has a working default.
struct PostofficeOptions {
  // Bytes a connection may have handed to ZeroMQ and not yet written out
  // before further messages wait in the priority queue. A message larger
  // than this still goes out alone.
  int64_t send_window_bytes = 4 << 20;
  // Longest time the receive loop sleeps when idle. Stopping and a newly
  // registered customer with held messages wake it at once (Van::Wake), so
  // this only bounds how often an idle node wakes.
  Duration poll_interval = std::chrono::seconds(1);
  // Extra seconds a server/worker waits for the node table beyond the
  // scheduler's start-up deadline, so that the scheduler's own report of
  // who is missing arrives first.
  Duration startup_grace = std::chrono::seconds(5);
  // The job's CURVE key (net/curve.h); unset: JobKey::FromEnv of the
  // process's environment, so a node without a key (and without
  // KVTRAIN_INSECURE=1) fails to start. Only Create (ZeroMQ) uses it.
  std::optional<net::JobKey> job_key;
  // A handshake refused this many times in a row on one outgoing connection
  // (a peer holding another key, or none) fails the job, naming the peer;
  // at once when ZeroMQ gives the connection up (a protocol error).
  int handshake_failures_fatal = 3;
  // Peers on this host connect over an abstract Unix-domain socket open to
  // this user id only, without CURVE (net/same_host.h); false: TCP.
  // Unset: KVTRAIN_SAME_HOST_IPC of the process's environment (default on).
  // Only Create (ZeroMQ) uses it.
  std::optional<bool> same_host;
  // Bytes of shared memory per same-host connection for large frames
  // (net/shm.h; 0: none). Unset: KVTRAIN_SHM_BYTES of the process's
  // environment (default 64 MiB). Only Create (ZeroMQ) uses it.
  std::optional<int64_t> shm_bytes;
  // With shm_bytes > 0, every message to a same-host peer goes through a
  // ring in shared memory (net/shm_ring.h). Unset: KVTRAIN_SHM_RING of the
  // process's environment (default on). Only Create (ZeroMQ) uses it.
  std::optional<bool> shm_ring;
  // With security on, messages to a peer reached over TCP go over a sealed
  // lane (net/seal.h) once CURVE has carried it a key, instead of CURVE.
  // Unset: KVTRAIN_SEALED_LANE of the process's environment (default on).
  // Only Create (ZeroMQ) uses it.
  std::optional<bool> sealed_lane;
  // A worker's Wait for a small request (at most 64 KB each way; any
  // request when the whole job is on one host) polls this many microseconds
  // for the answer before it sleeps (0: sleep at once;
  // transport/ps/answer_poll.h). Unset: KVTRAIN_WAIT_SPIN_US of the process's
  // environment, else 200 (1000 when the whole job is on one host).
  std::optional<int> wait_spin_us;
};

class Van;
class PostofficeImpl;

// One node of a job. Built from a NodeConfig and passed by pointer to the
// KVWorker/KVServer objects that use it, so one process may host several
// nodes (tests do). Thread-safe.
//
// Life cycle: Create -> Start (register, get a rank, connect) -> traffic and
// Barrier -> Finalize (every node exits together). Heartbeats run from Start
// to Finalize; when a node dies (net/liveness.h's rule: silent past
// PS_HEARTBEAT_TIMEOUT, or its connection dropped while the job runs),
// every other node's failure handler runs with "<role> <rank>
// (<host:port>) is dead: <why>".
class Postoffice {
 public:
  // Binds this node's port (the scheduler: DMLC_PS_ROOT_PORT; others:
  // DMLC_NODE_PORT or any free port) and resolves the advertised address.
  // A port already in use or an unknown DMLC_INTERFACE is an error.
  static StatusOr<std::unique_ptr<Postoffice>> Create(
      const NodeConfig& config, const PostofficeOptions& options = {});
  // Same over a caller-supplied transport (tests use an in-process one).
  static StatusOr<std::unique_ptr<Postoffice>> CreateWithVan(
      const NodeConfig& config, std::unique_ptr<Van> van,
      const PostofficeOptions& options = {});
  ~Postoffice();

  Postoffice(const Postoffice&) = delete;
  Postoffice& operator=(const Postoffice&) = delete;

  // Registers with the scheduler and waits for the node table (the
  // scheduler: for every node), within KVTRAIN_STARTUP_TIMEOUT.
  Status Start();
  // Returns once every node of `groups` (this node's group included) called
  // Barrier with the same groups as many times as this node.
  Status Barrier(int groups, Duration timeout);
  // Waits until every node called Finalize, then stops. No traffic after.
  Status Finalize(Duration timeout);
  // Fails the whole job: every node's failure handler runs with `reason`.
  void Abort(const std::string& reason);
  // Replaces the failure handler (see FailureHandler).
  void SetFailureHandler(FailureHandler handler);

  // Valid after Start.
  Role role() const;
  int rank() const;  // within the role; 0 for the scheduler
  int num_workers() const;
  int num_servers() const;
  // "worker 0 (10.0.0.1:41002)".
  std::string name() const;
  // The address and port this node advertises (valid after Create).
  std::string host() const;
  int port() const;
  // Server rank r owns keys in ServerKeyRanges()[r]; the ranges split
  // [0, 2^64 - 1) evenly.
  std::vector<KeyRange> ServerKeyRanges() const;
  // KVTRAIN_SERVER_REPLICAS: each key range is also held by this many of
  // the next servers (docs/reliability.md).
  int server_replicas() const;
  // KVTRAIN_WORKER_RESTARTS: a dead worker is waited for, to be started
  // again (docs/reliability.md).
  int worker_restarts() const;
  // How many times this node's process was started again to take a dead
  // one's place (0: the first).
  int incarnation() const;
  // The ranks of the servers holding key range `range`, its primary
  // first (PostofficeImpl::RangeServers).
  std::vector<int> RangeServerRanks(int range) const;
  // Whether server `rank` was started again and takes in its key ranges
  // (not yet a copy everywhere).
  bool ServerReturning(int rank) const;
  // A server started again: its key ranges are filled.
  Status ReportFilled();
  // Whether server `rank` still takes part (false once it died in a job
  // with replicas); key range r is served by the first live server of
  // r, r+1, ..., r+server_replicas() (mod num_servers).
  bool ServerLive(int rank) const;
  // Whether every server and worker of the job runs on one host, as the
  // same-host socket sees it (net/same_host.h): each advertised a same-host
  // address with the same host identity. The same answer on every node
  // (it reads the job's node table); false before Start, and where nodes
  // advertise no same-host address (KVTRAIN_SAME_HOST_IPC=0, tests' vans).
  bool OneHost() const;
  // PS_VERBOSE: 0 quiet, 1 control plane, 2 also every data message.
  int verbose() const;

  PostofficeImpl* impl() { return impl_.get(); }

 private:
  explicit Postoffice(std::unique_ptr<PostofficeImpl> impl);
  std::unique_ptr<PostofficeImpl> impl_;
};

// Per-request options of a KVWorker call.
struct RequestOptions {
  // Application command and payload, delivered to the server handler as is
  // (e.g. the KVStore's "init", optimizer spec, "save states").
  int head = 0;
  std::string body;
  // Higher goes first when requests queue up on a busy connection.
  int priority = 0;
  // With server replicas: a push goes to every live copy of its key
  // ranges (answered once all have taken it) instead of the primary only,
  // which passes its updates on to the copies itself. For what every copy
  // must apply by itself: initial values, loaded states, row-sparse pushes.
  bool every_copy = false;
  // Called once when the request completes, on the transport's receive
  // thread (keep it short); such a request cannot be waited for.
  std::function<void(const Status&)> callback;
};

// Where pulled values land. Default (data == nullptr): kept as zero-copy
// views, returned by Wait in a PullResult.
struct PullDest {
  // Caller-owned; must stay valid until the request completes.
  char* data = nullptr;
  size_t size = 0;
  // int64 bytes per key; empty = `size` split equally among the keys.
  Blob lens;
};

// Pulled values as zero-copy views, one part per server, in key order.
struct PullResult {
  std::vector<KVPairs> parts;
  size_t total_bytes() const;
  // Concatenates the values (in key order) into dst; sizes must match.
  Status CopyTo(char* dst, size_t size) const;
};

// Sends requests to the servers, slicing each by server key range. A request
// without keys goes to every server (a command). Thread-safe; many requests
// may be in flight.
class KVWorker {
 public:
  // Registers the application id `app_id` on `po` (which must outlive it).
  static StatusOr<std::unique_ptr<KVWorker>> Create(Postoffice* po,
                                                    int app_id = 0);
  ~KVWorker();

  // Each returns a timestamp to Wait on, or an error for bad input.
  StatusOr<int64_t> Push(const KVPairs& kvs, const RequestOptions& opts = {});
  StatusOr<int64_t> Pull(const Blob& keys, const RequestOptions& opts = {},
                         const PullDest& dest = {});
  // A pull with per-key records (`kvs.attrs`); `kvs.vals` must be empty.
  StatusOr<int64_t> Pull(const KVPairs& kvs, const RequestOptions& opts = {},
                         const PullDest& dest = {});
  // Push the values and pull the result in one round trip.
  StatusOr<int64_t> PushPull(const KVPairs& kvs,
                             const RequestOptions& opts = {},
                             const PullDest& dest = {});
  // A push to server `rank` alone, e.g. a server passing an update on to a
  // copy of its key range (keys in a range that server holds). If that
  // server is lost (server replicas), the push completes ok: nothing is
  // owed any more.
  StatusOr<int64_t> PushToServer(int rank, const KVPairs& kvs, const RequestOptions& opts = {});
  // Waits for request `ts`. Errors name the server (role, rank, address):
  // a server's error response, a deadline, or the job failing. Ok or an
  // error other than a deadline completes the request (wait once). Pulls
  // without a PullDest hand their values to *result.
  Status Wait(int64_t ts, Duration timeout, PullResult* result = nullptr);

  // With server replicas: the servers lost since the last call, and the
  // pauses their deaths cost this worker (from the last message heard from
  // the dead server to the first answer of its replacement), summed.
  struct Losses {
    int64_t servers = 0;
    double pause_seconds = 0;
  };
  Losses TakeLosses();

  class Impl;

 private:
  explicit KVWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a server handler learns about a request.
struct RequestMeta {
  int app_id = 0;
  int64_t timestamp = 0;
  // The requester: node id, role, rank, and "worker 1 (10.0.0.3:40100)".
  int sender_id = 0;
  Role sender_role = Role::kWorker;
  int sender_rank = 0;
  std::string sender_name;
  bool push = false;
  bool pull = false;
  int head = 0;
  std::string body;
  int priority = 0;
  // Sent again after a server was lost (server replicas): it may have been
  // applied already.
  bool resent = false;
};

class KVServer;
// Handles one request. It may respond before returning or later, from any
// thread (e.g. once every worker pushed), exactly once per request. `data`
// views stay valid as long as the caller keeps a copy of the KVPairs.
using RequestHandler = std::function<void(
    const RequestMeta& meta, const KVPairs& data, KVServer* server)>;

struct KVServerOptions {
  // Threads running the handler. Requests are dispatched by their first key,
  // so requests of one key stay in order. 0 runs the handler on the
  // transport's receive thread (lowest latency; a slow handler then delays
  // all traffic of this node).
  int handler_threads = 1;
  // Worker `rank` died and was started again (KVTRAIN_WORKER_RESTARTS):
  // forget what the dead process asked and is not yet answered. On the
  // receive thread (handler threads may be running requests meanwhile).
  std::function<void(int rank)> on_worker_back;
};

// Answers requests of one application id on a server. Thread-safe.
class KVServer {
 public:
  static StatusOr<std::unique_ptr<KVServer>> Create(
      Postoffice* po, int app_id, RequestHandler handler,
      const KVServerOptions& options = {});
  ~KVServer();

  // Answers `req`; for a pull, `values` holds the requested keys' values.
  Status Respond(const RequestMeta& req, const KVPairs& values = {});
  // A buffer for the values of an answer to `req` (SendBuffer): the
  // transport may send it to the requester without a copy.
  SendBuffer NewAnswerBuffer(const RequestMeta& req, size_t size);
  // Fails `req`: the worker's Wait returns `error`, prefixed with this
  // server's name (so the message should name the key and the problem).
  Status RespondError(const RequestMeta& req, const Status& error);

  class Impl;

 private:
  explicit KVServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_PS_H_
