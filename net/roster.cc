// Roster: admission rules and rank order of a job's registrations.
#include "net/roster.h"

#include <arpa/inet.h>

#include <algorithm>

namespace kvtrain {
namespace net {

bool AddressBefore(const std::string& host_a, int port_a, const std::string& host_b,
                   int port_b) {
  in_addr a, b;
  const bool ip_a = inet_pton(AF_INET, host_a.c_str(), &a) == 1;
  const bool ip_b = inet_pton(AF_INET, host_b.c_str(), &b) == 1;
  if (ip_a != ip_b) return ip_a;  // addresses before names
  if (ip_a && a.s_addr != b.s_addr) return ntohl(a.s_addr) < ntohl(b.s_addr);
  if (!ip_a && host_a != host_b) return host_a < host_b;
  return port_a < port_b;
}

Roster::Roster(std::vector<RosterGroup> groups)
    : groups_(std::move(groups)), counts_(groups_.size(), 0) {}

std::string Roster::Plural(int group, int n) const {
  return std::to_string(n) + " " + groups_[group].noun + (n == 1 ? "" : "s");
}

std::string Roster::Add(const RosterEntry& e) {
  if (e.group < 0 || e.group >= static_cast<int>(groups_.size())) {
    return "group " + std::to_string(e.group) + " is not one of the job's " +
           std::to_string(groups_.size());
  }
  if (e.host.empty() || e.port <= 0 || e.port > 65535) {
    return "no address to answer (\"" + e.Address() + "\")";
  }
  const RosterGroup& g = groups_[e.group];
  auto who = [this](const RosterEntry& r) {
    const RosterGroup& rg = groups_[r.group];
    return (rg.ranks_given ? rg.noun + " " + std::to_string(r.rank) : rg.noun) + " at " +
           r.Address();
  };
  for (const RosterEntry& had : entries_) {
    if (had.conn != e.conn) continue;
    if (had.group == e.group && had.rank == e.rank && had.host == e.host &&
        had.port == e.port) {
      return kRepeat;
    }
    return "this connection already registered " + who(had) + "; it cannot register " +
           who(e);
  }
  if (complete()) {
    std::string all;
    for (size_t i = 0; i < groups_.size(); ++i) {
      all += (i ? ", " : "") + Plural(static_cast<int>(i), groups_[i].size);
    }
    return "the job already has all its nodes (" + all + ")";
  }
  if (g.ranks_given) {
    if (e.rank < 0 || e.rank >= g.size) {
      return g.noun + " " + std::to_string(e.rank) + " is not in [0, " +
             std::to_string(g.size) + ")";
    }
    for (const RosterEntry& had : entries_) {
      if (had.group == e.group && had.rank == e.rank) {
        return g.noun + " " + std::to_string(e.rank) + " registered twice: by " +
               had.Address() + " and by " + e.Address();
      }
    }
  }
  for (const RosterEntry& had : entries_) {
    if (had.host == e.host && had.port == e.port) {
      return "another node already registered as " + e.Address() + " (" + who(had) + ")";
    }
  }
  if (counts_[e.group] >= g.size) {
    return "the job already has " + Plural(e.group, g.size);
  }
  entries_.push_back(e);
  ++counts_[e.group];
  return "";
}

bool Roster::complete() const {
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (counts_[i] < groups_[i].size) return false;
  }
  return true;
}

std::string Roster::Progress() const {
  std::string out;
  for (size_t i = 0; i < groups_.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(counts_[i]) + " of " +
           Plural(static_cast<int>(i), groups_[i].size);
  }
  return out;
}

std::string Roster::MissingRanks(int group) const {
  std::vector<bool> seen(groups_[group].size, false);
  for (const RosterEntry& e : entries_) {
    if (e.group == group && e.rank >= 0 && e.rank < groups_[group].size) seen[e.rank] = true;
  }
  std::string out;
  for (size_t r = 0; r < seen.size(); ++r) {
    if (!seen[r]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

std::string Roster::Registered(size_t named) const {
  if (entries_.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < entries_.size() && i < named; ++i) {
    out += (i ? ", " : "") + groups_[entries_[i].group].noun + " at " + entries_[i].Address();
  }
  if (entries_.size() > named) {
    out += " and " + std::to_string(entries_.size() - named) + " more";
  }
  return out;
}

std::vector<std::vector<size_t>> Roster::Ranked(std::string* note) const {
  if (note != nullptr) note->clear();
  std::vector<std::vector<size_t>> ranked(groups_.size());
  for (size_t i = 0; i < entries_.size(); ++i) ranked[entries_[i].group].push_back(i);
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<size_t>& members = ranked[g];
    // Asked ranks hold when they are exactly 0..n-1 (always so for a
    // ranks_given group, whose Add refused anything else).
    std::vector<bool> seen(members.size(), false);
    bool by_rank = true;
    for (size_t i : members) {
      const int r = entries_[i].rank;
      if (r < 0 || r >= static_cast<int>(seen.size()) || seen[r]) {
        if (r >= 0 && note != nullptr && note->empty()) {
          *note = "requested " + groups_[g].noun + " ranks are not exactly 0.." +
                  std::to_string(static_cast<int>(members.size()) - 1) + " (rank " +
                  std::to_string(r) + " from " + entries_[i].Address() +
                  "); ranks follow the address order";
        }
        by_rank = false;
        break;
      }
      seen[r] = true;
    }
    std::stable_sort(members.begin(), members.end(), [&](size_t a, size_t b) {
      const RosterEntry& x = entries_[a];
      const RosterEntry& y = entries_[b];
      if (by_rank) return x.rank < y.rank;
      return AddressBefore(x.host, x.port, y.host, y.port);
    });
  }
  return ranked;
}

}  // namespace net
}  // namespace kvtrain
