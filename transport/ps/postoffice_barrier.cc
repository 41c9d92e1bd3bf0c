// Postoffice barriers and finalize: both go through the scheduler, which
// answers once every member (or every node) has come.
#include <glog/logging.h>

#include <mutex>
#include <string>

#include "transport/ps/postoffice_impl.h"
#include "transport/ps/scheduler.h"

namespace kvtrain {
namespace ps {

Status PostofficeImpl::Barrier(int groups, Duration timeout) {
  if (groups <= 0 || groups > kAllGroups) {
    return Status::InvalidArgument(
        "barrier groups must combine scheduler (1), servers (2) and workers "
        "(4); got " +
        std::to_string(groups));
  }
  if (!(groups & GroupOf(role()))) {
    return Status::InvalidArgument(name() + " cannot enter a barrier over " +
                                   GroupName(groups) + ": it is not a member");
  }
  int64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_) return failure_;
    if (state_ != State::kRunning) {
      return Status::FailedPrecondition(name() +
                                        ": Barrier needs a started node");
    }
    seq = ++barrier_entered_[groups];
    // A worker started again: the job passed this one already.
    if (seq <= barrier_done_[groups]) return Status::OK();
  }
  LOG_IF(INFO, verbose() >= 1) << name() << ": entering barrier over "
                               << GroupName(groups) << " #" << seq;
  if (scheduler_) {
    scheduler_->OnBarrier(my_id(), groups, seq);
  } else {
    Message m;
    m.meta.set_command(wire::BARRIER);
    m.meta.mutable_control()->set_barrier_group(groups);
    m.meta.mutable_control()->set_barrier_seq(seq);
    KV_RETURN_IF_ERROR(SendTo(kSchedulerId, &m, kControlPriority));
  }
  std::unique_lock<std::mutex> l(mu_);
  Status s = WaitFor(
      &l, timeout, [&] { return barrier_done_[groups] >= seq; },
      "barrier over " + GroupName(groups) + " #" + std::to_string(seq));
  LOG_IF(INFO, verbose() >= 1 && s.ok())
      << name() << ": passed barrier over " << GroupName(groups) << " #" << seq;
  return s;
}

void PostofficeImpl::MarkBarrierDone(int groups, int64_t seq) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t& done = barrier_done_[groups];
  if (seq > done) done = seq;
  cv_.notify_all();
}

Status PostofficeImpl::Finalize(Duration timeout) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_) return failure_;
    if (state_ == State::kStopped) return Status::OK();
    if (state_ != State::kRunning) {
      return Status::FailedPrecondition(name() +
                                        ": Finalize needs a started node");
    }
    state_ = State::kFinalizing;
  }
  LOG_IF(INFO, verbose() >= 1) << name() << ": finalizing";
  if (scheduler_) {
    scheduler_->OnTerminate(my_id());
  } else {
    Message m;
    m.meta.set_command(wire::TERMINATE);
    KV_RETURN_IF_ERROR(SendTo(kSchedulerId, &m, kControlPriority));
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    KV_RETURN_IF_ERROR(WaitFor(
        &l, timeout, [this] { return terminated_; },
        "finalize (every node finishing)"));
    state_ = State::kStopped;
  }
  StopThreads(std::chrono::seconds(2));
  LOG_IF(INFO, verbose() >= 1) << name() << ": finalized";
  return Status::OK();
}

void PostofficeImpl::MarkTerminated() {
  std::lock_guard<std::mutex> l(mu_);
  terminated_ = true;
  // TERMINATE is every node's goodbye: they leave now.
  if (const NodeTable* t = table()) {
    for (int i = 0; i < t->liveness().size(); ++i) t->liveness().SaidGoodbye(i);
  }
  cv_.notify_all();
}

}  // namespace ps
}  // namespace kvtrain
