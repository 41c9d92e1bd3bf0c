// PeerLiveness: which of a node's peers are alive, by one rule shared by the
// parameter-server postoffice and the collective mesh.
//
// The rule. A peer is dead when either
//  1. heartbeats are on (PS_HEARTBEAT_INTERVAL > 0) and nothing at all has
//     been heard from it for PS_HEARTBEAT_TIMEOUT seconds (any message
//     counts, not only heartbeats: a busy peer needs no extra traffic); a
//     peer not heard from once since the clocks started (a node still
//     taking in the node table and connecting, in a large job's start) has
//     the start-up timeout instead, if longer, or
//  2. its connection dropped (the transport saw the TCP or socket
//     connection close) and it did not say goodbye within the disconnect
//     grace (0.5 s): a process that exits cleanly says goodbye first, one
//     that was killed or crashed does not, and is reported in about half a
//     second instead of after the heartbeat timeout.
// A peer that said goodbye is never declared dead. Every death is reported
// once, as "<peer> is dead: <why>" (DeathMessage).
#ifndef KVTRAIN_NET_LIVENESS_H_
#define KVTRAIN_NET_LIVENESS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvtrain {
namespace net {

struct LivenessOptions {
  // Seconds between heartbeats; 0 turns heartbeats and rule 1 off
  // (PS_HEARTBEAT_INTERVAL).
  double heartbeat_interval_s = 1.0;
  // Seconds of silence after which a peer is dead (PS_HEARTBEAT_TIMEOUT).
  double heartbeat_timeout_s = 10.0;
  // Seconds a dropped connection waits for the peer's goodbye (rule 2).
  double disconnect_grace_s = 0.5;
  // Seconds of silence a peer may keep before its first message (rule 1),
  // when longer than heartbeat_timeout_s (KVTRAIN_STARTUP_TIMEOUT).
  double first_message_timeout_s = 0;
};

// The clocks of peers 0..n-1 (the owner's own index is simply never
// watched). Times are steady-clock nanoseconds (SteadyNowNs()). Heard and
// Dropped are lock-free and may be called from any thread; Check and
// HeartbeatDue are for one thread (the owner's timer).
class PeerLiveness {
 public:
  struct Death {
    int peer;
    std::string why;  // "nothing heard for 10.3 s (PS_HEARTBEAT_TIMEOUT=10 s)"
  };

  PeerLiveness(int peers, const LivenessOptions& options, int64_t now_ns);

  int size() const { return static_cast<int>(peers_.size()); }
  const LivenessOptions& options() const { return options_; }

  // Something arrived from `peer` (out-of-range peers are ignored).
  void Heard(int peer, int64_t now_ns);
  // The transport saw `peer`'s connection close.
  void Dropped(int peer, int64_t now_ns);
  // `peer` leaves cleanly: it is never declared dead afterwards.
  void SaidGoodbye(int peer);
  // Stop (or start again) applying the rules to `peer`, e.g. the owner
  // itself, or peers it does not talk to.
  void SetWatched(int peer, bool watched);

  bool said_goodbye(int peer) const;
  int64_t last_heard_ns(int peer) const;

  // The job has started (its start-up barrier passed): until then every
  // peer's silence is judged by first_message_timeout_s when it is the
  // longer (a scheduler sending a 1,000-node job its node table, or a node
  // in the queue for a core, can be silent past the heartbeat timeout),
  // afterwards by heartbeat_timeout_s. Any thread.
  void EndStartup() { starting_.store(false); }

  // The watched peers that became dead by `now_ns` and were not reported
  // before; each is reported once.
  std::vector<Death> Check(int64_t now_ns);

  // True when a heartbeat round is due at `now_ns` (then the next one is
  // scheduled heartbeat_interval_s later); always false with heartbeats off.
  bool HeartbeatDue(int64_t now_ns);

  // How often an owner should call Check and HeartbeatDue: a quarter of the
  // heartbeat interval, at most half the disconnect grace (0.25 s by
  // default: an idle node's timer wakes 4 times a second).
  static double TickSeconds(const LivenessOptions& options);

 private:
  struct Clock {
    std::atomic<int64_t> heard{0};
    std::atomic<bool> heard_once{false};
    std::atomic<int64_t> dropped{0};  // 0: no drop seen
    std::atomic<bool> goodbye{false};
    std::atomic<bool> watched{true};
    bool reported = false;  // Check's thread only
  };

  const LivenessOptions options_;
  std::vector<std::unique_ptr<Clock>> peers_;
  std::atomic<bool> starting_{true};
  int64_t next_heartbeat_ns_ = 0;  // HeartbeatDue's thread only
};

// "<peer> is dead: <why>": the one message every transport uses.
std::string DeathMessage(const std::string& peer, const std::string& why);

// "0.5 s", "10 s", "12.3 s": seconds for messages.
std::string FormatSeconds(double s);

// Nanoseconds of a steady clock.
int64_t SteadyNowNs();

}  // namespace net
}  // namespace kvtrain

#endif  // KVTRAIN_NET_LIVENESS_H_
