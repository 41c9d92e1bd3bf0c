// Joining a group: rank, size and rendezvous from the environment (Open MPI,
// PMI, or tracker/launch.py's DMLC variables), the rendezvous itself, and
// the in-process group for tests.
#include <glog/logging.h>

#include <thread>

#include "base/file.h"
#include "base/malloc_tuning.h"
#include "net/node_config.h"
#include "transport/collective/communicator.h"
#include "transport/collective/mesh.h"
#include "transport/collective/rendezvous.h"
#include "net/address.h"

namespace kvtrain {
namespace collective {

namespace {

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// Rank and size from one launcher's pair of variables; nullopt-like
// `found` false when neither is set.
Status RankSizeFrom(const EnvLookup& env, const char* rank_var,
                    const char* size_var, GroupEnv* out, bool* found) {
  const auto r = env(rank_var), s = env(size_var);
  *found = r.has_value() || s.has_value();
  if (!*found) return Status::OK();
  if (!r || !s) {
    return Status::InvalidArgument(std::string(r ? size_var : rank_var) +
                                   " is not set but " +
                                   (r ? rank_var : size_var) +
                                   " is: both come from the launcher");
  }
  KV_ASSIGN_OR_RETURN(int64_t size, ParseIntVar(size_var, *s, 1, 65535));
  KV_ASSIGN_OR_RETURN(int64_t rank, ParseIntVar(rank_var, *r, 0, 65534));
  if (rank >= size) {
    return Status::InvalidArgument(std::string(rank_var) + "=" + *r +
                                   " is not below " + size_var + "=" + *s);
  }
  out->rank = static_cast<int>(rank);
  out->size = static_cast<int>(size);
  return Status::OK();
}

Status RendezvousFrom(const EnvLookup& env, GroupEnv* out) {
  if (auto rv = env(env::kRendezvous)) {
    const size_t colon = rv->rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return Status::InvalidArgument(std::string(env::kRendezvous) + "=\"" +
                                     *rv + "\": expected host:port");
    }
    out->rendezvous_host = rv->substr(0, colon);
    KV_ASSIGN_OR_RETURN(int64_t port, ParseIntVar(env::kRendezvous,
                                                  rv->substr(colon + 1), 1,
                                                  65535));
    out->rendezvous_port = static_cast<int>(port);
    return Status::OK();
  }
  const auto uri = env(env::kRootUri), port = env(env::kRootPort);
  if (!uri || !port) {
    return Status::InvalidArgument(
        std::string("no rendezvous address: set ") + env::kRendezvous +
        "=host:port (rank 0 listens there; e.g. mpirun -x " + env::kRendezvous +
        "=127.0.0.1:29500) or " + env::kRootUri + " and " + env::kRootPort);
  }
  out->rendezvous_host = *uri;
  KV_ASSIGN_OR_RETURN(int64_t p, ParseIntVar(env::kRootPort, *port, 1, 65535));
  out->rendezvous_port = static_cast<int>(p);
  return Status::OK();
}

}  // namespace

StatusOr<CommunicatorOptions> CommunicatorOptions::FromEnv(const EnvLookup& env) {
  CommunicatorOptions o;
  KV_ASSIGN_OR_RETURN(double timeout,
                      GetSecondsVar(env, env::kKVStoreTimeout, 600, 0.001, 1e7));
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  KV_ASSIGN_OR_RETURN(o.heartbeat_interval_s,
                      GetSecondsVar(env, env::kHeartbeatInterval, 1, 0, 3600));
  KV_ASSIGN_OR_RETURN(o.heartbeat_timeout_s,
                      GetSecondsVar(env, env::kHeartbeatTimeout, 10, 0.01, 1e6));
  KV_ASSIGN_OR_RETURN(o.startup_timeout_s,
                      GetSecondsVar(env, env::kStartupTimeout, 60, 0.01, 1e6));
  KV_ASSIGN_OR_RETURN(int64_t piece, GetIntVar(env, env::kAllreducePieceBytes,
                                                static_cast<int64_t>(o.piece_bytes),
                                                4, int64_t{1} << 30));
  o.piece_bytes = static_cast<size_t>(piece);
  KV_ASSIGN_OR_RETURN(int64_t doubling, GetIntVar(env, env::kAllreduceDoublingBytes,
                                                   static_cast<int64_t>(o.doubling_bytes),
                                                   0, int64_t{1} << 40));
  o.doubling_bytes = static_cast<size_t>(doubling);
  KV_ASSIGN_OR_RETURN(o.same_host_ipc,
                      GetBoolVar(env, env::kSameHostIpc, o.same_host_ipc));
  KV_ASSIGN_OR_RETURN(o.sealed_lane,
                      GetBoolVar(env, env::kSealedLane, o.sealed_lane));
  KV_ASSIGN_OR_RETURN(o.keep_freed_memory,
                      GetBoolVar(env, env::kKeepFreedMemory, o.keep_freed_memory));
  KV_ASSIGN_OR_RETURN(o.key, net::JobKey::FromEnv(env));
  return o;
}

StatusOr<GroupEnv> GroupEnv::FromEnv(const EnvLookup& env) {
  GroupEnv g;
  bool found = false;
  // launch.py (any launcher, mpi included) sets DMLC_ROLE and its scheduler
  // serves the rendezvous; otherwise an MPI launcher's variables.
  if (!env(env::kRole)) {
    KV_RETURN_IF_ERROR(RankSizeFrom(env, env::kOmpiRank, env::kOmpiSize, &g, &found));
    if (found) {
      g.source = "Open MPI";
    } else {
      KV_RETURN_IF_ERROR(RankSizeFrom(env, env::kPmiRank, env::kPmiSize, &g, &found));
      if (found) g.source = "PMI";
    }
  }
  if (found) {
    g.host_rendezvous = g.rank == 0;
  } else {
    if (!env(env::kRole)) {
      return Status::InvalidArgument(
          std::string("not in a job: set ") + env::kOmpiRank + "/" + env::kOmpiSize +
          " (mpirun), " + env::kPmiRank + "/" + env::kPmiSize + " (mpiexec) or " +
          env::kRole + " (tracker/launch.py)");
    }
    KV_ASSIGN_OR_RETURN(NodeConfig config, NodeConfig::FromEnv(env));
    if (config.role != Role::kWorker) {
      return Status::FailedPrecondition(
          std::string("an all-reduce group has workers only, but ") +
          env::kRole + "=" + RoleName(config.role) +
          " (the scheduler serves the rendezvous: ServeRendezvous)");
    }
    if (config.requested_rank < 0) {
      return Status::InvalidArgument(std::string(env::kRank) +
                                     " is not set: every worker of an "
                                     "all-reduce job needs its rank "
                                     "(tracker/launch.py sets it)");
    }
    if (config.requested_rank >= config.num_workers) {
      return Status::InvalidArgument(
          std::string(env::kRank) + "=" + std::to_string(config.requested_rank) +
          " is not below " + env::kNumWorker + "=" +
          std::to_string(config.num_workers));
    }
    g.rank = config.requested_rank;
    g.size = config.num_workers;
    g.source = "DMLC";
  }
  KV_RETURN_IF_ERROR(RendezvousFrom(env, &g));
  NodeConfig addr;
  addr.node_host = env(env::kNodeHost).value_or("");
  addr.interface = env(env::kInterface).value_or("");
  addr.root_uri = g.rendezvous_host;
  addr.root_port = g.rendezvous_port;
  KV_ASSIGN_OR_RETURN(g.advertise_host,
                      net::AdvertisedHost(addr, net::ListInterfaces()));
  return g;
}

StatusOr<std::shared_ptr<Communicator>> Communicator::Create(
    const GroupEnv& group, const CommunicatorOptions& options) {
  MeshOptions mo;
  mo.liveness.heartbeat_interval_s = options.heartbeat_interval_s;
  mo.liveness.heartbeat_timeout_s = options.heartbeat_timeout_s;
  mo.startup_timeout_s = options.startup_timeout_s;
  mo.key = options.key;
  mo.same_host_ipc = options.same_host_ipc;
  mo.sealed_lane = options.sealed_lane;
  mo.limits.max_messages_per_peer = options.max_queued_messages_per_peer;
  mo.limits.max_bytes_per_peer = options.max_queued_bytes_per_peer;
  KV_ASSIGN_OR_RETURN(std::unique_ptr<Mesh> mesh,
                      Mesh::Bind(group.rank, group.size, mo));
  const auto deadline = After(options.startup_timeout_s);
  std::unique_ptr<RendezvousServer> server;
  Status served;
  std::thread serving;
  if (group.host_rendezvous) {
    KV_ASSIGN_OR_RETURN(server, RendezvousServer::Bind(group.rendezvous_port, options.key));
    serving = std::thread(
        [&] { served = server->Serve(group.size, deadline); });
  }
  const Endpoint rv{group.rendezvous_host, group.rendezvous_port};
  auto table = Register(rv, group.rank, group.size,
                        mesh->Self(group.advertise_host), deadline,
                        options.key);
  if (serving.joinable()) serving.join();
  server.reset();
  if (!served.ok()) return served;
  if (!table.ok()) return table.status();
  KV_RETURN_IF_ERROR(mesh->Connect(*table));
  std::vector<int> members(group.size);
  for (int i = 0; i < group.size; ++i) members[i] = i;
  return std::shared_ptr<Communicator>(new Communicator(
      std::shared_ptr<Mesh>(std::move(mesh)), kWorldGroup, members, group.rank, options));
}

StatusOr<std::shared_ptr<Communicator>> Communicator::CreateFromEnv(
    const EnvLookup& env) {
  KV_ASSIGN_OR_RETURN(GroupEnv group, GroupEnv::FromEnv(env));
  KV_ASSIGN_OR_RETURN(CommunicatorOptions options,
                      CommunicatorOptions::FromEnv(env));
  if (options.keep_freed_memory && !KeepFreedMemory()) {
    LOG(WARNING) << "glibc refused a malloc setting (KVTRAIN_KEEP_FREED_MEMORY)";
  }
  auto comm = Create(group, options);
  if (!comm.ok()) {
    return comm.status().Annotate(
        "rank " + std::to_string(group.rank) + " of " +
        std::to_string(group.size) + " (" + group.source + "), rendezvous " +
        group.rendezvous_host + ":" + std::to_string(group.rendezvous_port));
  }
  return comm;
}

StatusOr<std::vector<std::shared_ptr<Communicator>>>
Communicator::CreateLocalGroup(int n, const CommunicatorOptions& options) {
  if (n < 1) return Status::InvalidArgument("a group needs at least 1 rank");
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousServer> server,
                      RendezvousServer::Bind(0, options.key));
  const auto deadline = After(options.startup_timeout_s);
  Status served;
  std::thread serving([&] { served = server->Serve(n, deadline); });
  std::vector<StatusOr<std::shared_ptr<Communicator>>> made(
      n, Status::Internal("not made"));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GroupEnv g;
      g.rank = r;
      g.size = n;
      g.source = "local";
      g.rendezvous_host = "127.0.0.1";
      g.rendezvous_port = server->port();
      g.advertise_host = "127.0.0.1";
      made[r] = Create(g, options);
    });
  }
  for (auto& t : threads) t.join();
  serving.join();
  KV_RETURN_IF_ERROR(served);
  std::vector<std::shared_ptr<Communicator>> out;
  for (auto& m : made) {
    KV_RETURN_IF_ERROR(m.status());
    out.push_back(*m);
  }
  return out;
}

Status Communicator::ServeRendezvous(const EnvLookup& env) {
  KV_ASSIGN_OR_RETURN(NodeConfig config, NodeConfig::FromEnv(env));
  KV_ASSIGN_OR_RETURN(net::JobKey key, net::JobKey::FromEnv(env));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<RendezvousServer> server,
                      RendezvousServer::Bind(config.root_port, key));
  if (config.root_port == 0 && !config.scheduler_port_file.empty()) {
    KV_RETURN_IF_ERROR(WriteFileAtomic(config.scheduler_port_file,
                                       std::to_string(server->port())));
  }
  if (config.verbose > 0) {
    LOG(INFO) << "rendezvous for " << config.num_workers
              << " all-reduce workers on port " << server->port();
  }
  return server->Serve(config.num_workers, After(config.startup_timeout_s));
}

}  // namespace collective
}  // namespace kvtrain
