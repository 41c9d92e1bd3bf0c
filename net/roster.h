// Roster: the rendezvous of a job, without its wire. Nodes register (their
// group, the rank they ask for, the address they listen on, the connection
// they came on); the roster admits or refuses each with a reason, knows
// when every group is full, and numbers the members of each group. Both
// transports keep one: the parameter server's scheduler (groups "server"
// and "worker", ranks by address unless asked for exactly) and the
// all-reduce rendezvous (one group of ranks MPI or the launcher gave).
// Each decodes its own messages into RosterEntry and answers on its own
// socket; the rules, the reasons and the rank order live here, once.
// Not thread-safe.
#ifndef KVTRAIN_NET_ROSTER_H_
#define KVTRAIN_NET_ROSTER_H_

#include <cstddef>
#include <string>
#include <vector>

namespace kvtrain {
namespace net {

struct RosterGroup {
  // What one member is called in messages: "server", "worker", "rank".
  std::string noun;
  int size = 0;
  // true: every member names its own rank (an MPI job, the collective);
  // false: ranks follow the address order unless the members asked for
  // exactly 0..size-1 (DMLC_RANK), see Roster::Ranked.
  bool ranks_given = false;
};

struct RosterEntry {
  int group = 0;
  int rank = -1;  // the rank asked for; -1: none
  std::string host;
  int port = 0;
  // The connection the registration came on (a routing id or token): one
  // registration per connection.
  std::string conn;

  std::string Address() const { return host + ":" + std::to_string(port); }
};

// Ascending address order: IPv4 addresses numerically before host names
// (as text), then port.
bool AddressBefore(const std::string& host_a, int port_a, const std::string& host_b,
                   int port_b);

class Roster {
 public:
  // Add's answer to a connection repeating its own registration exactly.
  static constexpr const char* kRepeat = "(repeat)";

  explicit Roster(std::vector<RosterGroup> groups);

  // Records `e`: "" when recorded, kRepeat for a repeat, else why it was
  // refused (naming the entry and the registration it collides with).
  std::string Add(const RosterEntry& e);

  bool complete() const;
  int count(int group) const { return counts_[group]; }
  const std::vector<RosterGroup>& groups() const { return groups_; }
  // In arrival order.
  const std::vector<RosterEntry>& entries() const { return entries_; }

  // "1 of 2 servers, 0 of 2 workers".
  std::string Progress() const;
  // The ranks of a ranks_given group nobody registered: "1, 3".
  std::string MissingRanks(int group) const;
  // The first `named` registrations, "server at h:p, ...", and how many
  // more; "none" if there are none.
  std::string Registered(size_t named) const;

  // Each group's members in rank order, as indices into entries(); once
  // complete. A group that is not ranks_given keeps the asked ranks when
  // they are exactly 0..n-1 and otherwise orders by address; `note` (if
  // not null) then says which asked rank was ignored, or stays empty.
  std::vector<std::vector<size_t>> Ranked(std::string* note) const;

 private:
  std::string Plural(int group, int n) const;
  std::vector<RosterGroup> groups_;
  std::vector<RosterEntry> entries_;
  std::vector<int> counts_;
};

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_ROSTER_H_
