// PeerLiveness: the one rule for a dead peer (see liveness.h).
#include "net/liveness.h"

#include <algorithm>
#include <chrono>
#include <sstream>

namespace kvtrain {
namespace net {

PeerLiveness::PeerLiveness(int peers, const LivenessOptions& options,
                           int64_t now_ns)
    : options_(options) {
  peers_.reserve(std::max(0, peers));
  for (int i = 0; i < peers; ++i) {
    peers_.push_back(std::make_unique<Clock>());
    peers_.back()->heard.store(now_ns);
  }
}

void PeerLiveness::Heard(int peer, int64_t now_ns) {
  if (peer < 0 || peer >= size()) return;
  peers_[peer]->heard.store(now_ns, std::memory_order_relaxed);
  peers_[peer]->heard_once.store(true, std::memory_order_relaxed);
}

void PeerLiveness::Dropped(int peer, int64_t now_ns) {
  if (peer < 0 || peer >= size()) return;
  int64_t none = 0;
  peers_[peer]->dropped.compare_exchange_strong(none, std::max<int64_t>(1, now_ns));
}

void PeerLiveness::SaidGoodbye(int peer) {
  if (peer < 0 || peer >= size()) return;
  peers_[peer]->goodbye.store(true);
}

void PeerLiveness::SetWatched(int peer, bool watched) {
  if (peer < 0 || peer >= size()) return;
  peers_[peer]->watched.store(watched);
}

bool PeerLiveness::said_goodbye(int peer) const {
  return peer >= 0 && peer < size() && peers_[peer]->goodbye.load();
}

int64_t PeerLiveness::last_heard_ns(int peer) const {
  return peer >= 0 && peer < size() ? peers_[peer]->heard.load() : 0;
}

std::vector<PeerLiveness::Death> PeerLiveness::Check(int64_t now_ns) {
  std::vector<Death> deaths;
  const bool heartbeats = options_.heartbeat_interval_s > 0;
  const int64_t timeout_ns =
      static_cast<int64_t>(options_.heartbeat_timeout_s * 1e9);
  const int64_t grace_ns =
      static_cast<int64_t>(options_.disconnect_grace_s * 1e9);
  const int64_t first_ns = std::max(
      timeout_ns, static_cast<int64_t>(options_.first_message_timeout_s * 1e9));
  for (int p = 0; p < size(); ++p) {
    Clock& c = *peers_[p];
    if (c.reported || !c.watched.load() || c.goodbye.load()) continue;
    const int64_t dropped = c.dropped.load();
    const int64_t silent = now_ns - c.heard.load(std::memory_order_relaxed);
    const bool first = !c.heard_once.load(std::memory_order_relaxed);
    const bool starting = starting_.load(std::memory_order_relaxed);
    if (dropped != 0 && now_ns - dropped > grace_ns) {
      deaths.push_back({p, "its connection dropped without a goodbye "
                           "(the process exited or was killed)"});
    } else if (heartbeats && (first || starting) && first_ns > timeout_ns) {
      if (silent <= first_ns) continue;
      deaths.push_back({p, std::string(first ? "nothing heard since the job started, for "
                                             : "nothing heard while the job starts, for ") +
                               FormatSeconds(silent / 1e9) +
                               " (KVTRAIN_STARTUP_TIMEOUT=" +
                               FormatSeconds(options_.first_message_timeout_s) +
                               ")"});
    } else if (heartbeats && silent > timeout_ns) {
      deaths.push_back({p, "nothing heard for " + FormatSeconds(silent / 1e9) +
                               " (PS_HEARTBEAT_TIMEOUT=" +
                               FormatSeconds(options_.heartbeat_timeout_s) +
                               ")"});
    } else {
      continue;
    }
    c.reported = true;
  }
  return deaths;
}

bool PeerLiveness::HeartbeatDue(int64_t now_ns) {
  if (options_.heartbeat_interval_s <= 0 || now_ns < next_heartbeat_ns_) {
    return false;
  }
  next_heartbeat_ns_ =
      now_ns + static_cast<int64_t>(options_.heartbeat_interval_s * 1e9);
  return true;
}

double PeerLiveness::TickSeconds(const LivenessOptions& options) {
  const double hb = options.heartbeat_interval_s;
  const double grace = std::max(options.disconnect_grace_s / 2, 0.01);
  return hb > 0 ? std::min(hb / 4, grace) : grace;
}

std::string DeathMessage(const std::string& peer, const std::string& why) {
  return peer + " is dead: " + why;
}

std::string FormatSeconds(double s) {
  std::ostringstream os;
  os.precision(3);
  os << s << " s";
  return os.str();
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace net
}  // namespace kvtrain
