// SchedulerCore: the scheduler's side of the control plane: registrations,
// deterministic rank assignment, the node table, barriers, the terminate
// round and the start-up deadline report.
#ifndef KVTRAIN_TRANSPORT_PS_SCHEDULER_H_
#define KVTRAIN_TRANSPORT_PS_SCHEDULER_H_

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/logging.h"
#include "base/thread_annotations.h"
#include "net/roster.h"
#include "transport/ps/message.h"
#include "transport/ps/postoffice_impl.h"

namespace kvtrain {
namespace ps {

// Registrations go through a net::Roster (groups "server" and "worker"):
// its admission rules, then its rank order (asked ranks when exactly
// 0..n-1, else address order), so the same set of host:port registrations
// always gives the same ranks. Thread-safe.
class SchedulerCore {
 public:
  // The roster's groups.
  static constexpr int kServers = 0;
  static constexpr int kWorkers = 1;

  explicit SchedulerCore(PostofficeImpl* po);

  // A REGISTER from connection `token` (receive thread).
  void OnRegister(const std::string& token, const Message& msg) EXCLUDES(mu_);
  // Node `from` entered barrier #seq over `groups`.
  void OnBarrier(int from, int groups, int64_t seq) EXCLUDES(mu_);
  // Node `from` called Finalize.
  void OnTerminate(int from) EXCLUDES(mu_);
  // A server was lost (NodeTable::MarkLost) and the job goes on: tells
  // every other live node, then ends the barriers and the terminate round
  // that now have every live member.
  void OnLost(int id, const std::string& why) EXCLUDES(mu_);
  // Worker `id` died in a job whose launcher starts dead workers again
  // (KVTRAIN_WORKER_RESTARTS): the job waits for it, up to
  // KVTRAIN_REJOIN_TIMEOUT (CheckAway), its barriers and the final
  // handshake with it.
  void OnWorkerGone(int id, const std::string& death) EXCLUDES(mu_);
  // Timer thread: fails the job when a dead worker is not back in time.
  void CheckAway() EXCLUDES(mu_);
  // Node `from` took in restarted worker `id` (NODE_BACK's answer): once
  // every node has, the new process gets the node table.
  void OnBackTaken(int from, int id) EXCLUDES(mu_);
  // Server `from`, started again and taken in, holds its key ranges: it
  // counts as a copy again, after the others (NODE_LIVE to every node).
  void OnFilled(int from) EXCLUDES(mu_);
  // The start-up deadline passed: what is missing and who registered.
  std::string StartupFailure(double timeout_s) EXCLUDES(mu_);
  // Sends ABORT(reason) to every node registered so far (before the table).
  void AbortPending(const std::string& reason) EXCLUDES(mu_);

 private:
  struct Pending {
    wire::NodeInfo info;
    int conn = 0;
  };

  void Reject(const wire::NodeInfo& info, const std::string& why) REQUIRES(mu_);
  // A registration once the job runs: a dead worker started again takes
  // its place (true), or it is refused with the reason (true); false when
  // no worker is away (the usual "job is full" answer follows).
  bool TryRejoin(const std::string& token, const wire::NodeInfo& info) REQUIRES(mu_);
  // The dead worker whose place a registration takes: the rank it asks
  // for, or without one the only one away; -1 if none.
  int AwayFor(const wire::NodeInfo& info) const REQUIRES(mu_);
  // Every node took restarted worker `id` in: its node table, with the
  // barriers passed and the servers lost.
  void SendRejoinTable(int id) REQUIRES(mu_);
  void Complete() REQUIRES(mu_);
  // Sorts the registrations into ranks; the scheduler's entry first.
  std::vector<NodeEntry> RankNodes() REQUIRES(mu_);
  Message TableMessage(const std::vector<NodeEntry>& entries);
  Status SendViaConn(int conn, Message* msg);
  // Barrier #seq over `groups` is complete if every live member came:
  // answers them and returns true (its entry in arrived_ erased).
  bool MaybeEndBarrier(int groups, int64_t seq) EXCLUDES(mu_);
  // Every live node finished: sends TERMINATE.
  void MaybeTerminate() EXCLUDES(mu_);

  PostofficeImpl* const po_;
  std::mutex mu_;
  net::Roster roster_ GUARDED_BY(mu_);
  std::vector<Pending> pending_ GUARDED_BY(mu_);  // [i] is roster_.entries()[i]
  int next_conn_ GUARDED_BY(mu_) = 1000;
  int rejected_ GUARDED_BY(mu_) = 0;
  std::map<std::pair<int, int64_t>, std::set<int>> arrived_ GUARDED_BY(mu_);
  std::set<int> finished_ GUARDED_BY(mu_);
  bool terminating_ GUARDED_BY(mu_) = false;
  // The last barrier passed, by group (for workers started again).
  std::map<int, int64_t> passed_ GUARDED_BY(mu_);
  // This scheduler's connection to each node (RankNodes, TryRejoin).
  std::map<int, int> conn_of_ GUARDED_BY(mu_);
  // Dead workers waited for: why they died, since when.
  struct Away {
    std::string death;
    std::chrono::steady_clock::time_point since;
  };
  std::map<int, Away> away_ GUARDED_BY(mu_);
  // Workers that registered while the job runs before the death of the
  // one whose place they take was noticed (a launcher starts the new
  // process the moment the old one exits): waiting, since when.
  struct Parked {
    std::string token;
    wire::NodeInfo info;
    std::chrono::steady_clock::time_point since;
  };
  std::vector<Parked> parked_ GUARDED_BY(mu_);
  // Workers started again, until every node took them in: the nodes yet to
  // answer, and how many times each worker came back.
  std::map<int, std::set<int>> taking_in_ GUARDED_BY(mu_);
  std::map<int, int> incarnation_ GUARDED_BY(mu_);
  // Servers started again, taken in, not yet filled; the last generation
  // given to one that was (NodeTable::Generation).
  std::set<int> filling_ GUARDED_BY(mu_);
  int64_t generations_ GUARDED_BY(mu_) = 0;
  LogRateLimiter log_limiter_;
};

}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_SCHEDULER_H_
