// ZmqVan's send path: frames handed to ZeroMQ without a copy (released when
// sent), each connection's window of unreleased bytes, and the sender thread
// that drains the priority backlogs.
#include <glog/logging.h>
#include <zmq.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/trace.h"
#include "transport/ps/zmq_van.h"
#include "transport/ps/zmq_van_conn.h"
#include "net/zmq_error.h"
#include "net/zmq_frame.h"

namespace kvtrain {
namespace ps {

using net::ZmqError;

void ReleaseFrame(void* /*data*/, void* hint) {
  auto* hold = static_cast<FrameHold*>(hint);
  SendCredit* credit = hold->credit;
  delete hold;
  if (credit != nullptr && credit->parts.fetch_sub(1) == 1) {
    credit->conn->van->OnReleased(credit->conn, credit->bytes);
    delete credit;
  }
}

namespace zmq_van_internal {

int SendPart(ZmqSendFn send, zmq_msg_t* msg, void* socket, int flags) {
  for (;;) {
    const int rc = send(msg, socket, flags);
    if (rc >= 0 || zmq_errno() != EINTR) return rc;
  }
}

Status TearConn(ZmqVan::Conn* c, size_t part, const std::string& error) {
  c->closed = true;
  LOG(ERROR) << "connection to " << c->endpoint << " closed: a send failed after "
             << part << " parts of a message had gone (" << error
             << "); nothing more is sent on it, so that no later message is "
                "read as the rest of that one";
  return Status::Unavailable("send to " + c->endpoint +
                             " failed in the middle of a message (" + error +
                             "): the connection is closed");
}

Status SendFrames(void* socket, ZmqVan::Conn* c, OutMessage* m,
                  std::vector<zmq_msg_t>* unsent, ZmqSendFn send) {
  Status status;
  auto* credit = new SendCredit(c, m->bytes);
  if (c->lane != nullptr && SendOnLane(c, m, credit, unsent, &status, send))
    return status;
  const size_t n = m->frames.size();
  for (size_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    Blob& b = m->frames[i];
    auto* hold = new FrameHold{std::move(b), last ? credit : nullptr};
    zmq_msg_t msg;
    const Status init = net::InitZeroCopy(
        &msg, hold->blob.data(), hold->blob.size(), ReleaseFrame, hold);
    if (!init.ok()) {
      // Cannot happen short of memory exhaustion; accounted as released.
      zmq_msg_close(&msg);
      if (status.ok()) status = i > 0 ? TearConn(c, i, std::string(init.message())) : init;
      continue;
    }
    if (!status.ok()) {
      unsent->push_back(msg);
      continue;
    }
    if (SendPart(send, &msg, socket, last ? 0 : ZMQ_SNDMORE) < 0) {
      const std::string error = ZmqError();
      status = i > 0 ? TearConn(c, i, error)
                     : Status::Unavailable("send to " + c->endpoint + ": " + error);
      unsent->push_back(msg);
    }
  }
  return status;
}

void CloseUnsent(std::vector<zmq_msg_t>* unsent) {
  for (zmq_msg_t& m : *unsent) zmq_msg_close(&m);
  unsent->clear();
}

}  // namespace zmq_van_internal

using zmq_van_internal::CloseUnsent;
using zmq_van_internal::RingSend;
using zmq_van_internal::SendFrames;
using zmq_van_internal::StartRing;

Status ZmqVan::Send(int conn, int priority, std::vector<Blob> frames) {
  Conn* c = FindConn(conn);
  if (c == nullptr) {
    return Status::Unavailable("no connection " + std::to_string(conn));
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].size() > static_cast<size_t>(net::kMaxFramePayloadBytes)) {
      return Status::InvalidArgument(
          "send to " + c->endpoint + ": frame " + std::to_string(i) +
          " holds " + std::to_string(frames[i].size()) + " bytes, above the " +
          std::to_string(net::kMaxFramePayloadBytes) +
          " a receiver accepts (EncodeMessage carries larger data in pieces)");
    }
  }
  OutMessage m;
  m.priority = priority;
  for (const Blob& b : frames) m.bytes += static_cast<int64_t>(b.size());
  trace::Scope span("van", "send ", c->endpoint, m.bytes);
  m.frames = std::move(frames);
  std::vector<zmq_msg_t> unsent;
  Status status;
  bool stalled = false;
  {
    std::lock_guard<std::mutex> l(c->mu);
    if (c->closed)
      return Status::Unavailable("connection to " + c->endpoint + " is closed");
    if (c->shm_ok) PlaceInShm(c, &m);
    if (c->ring_ok && c->ring == nullptr && !c->ring_failed &&
        !StartRing(c, &unsent)) {
      c->ring_failed = true;
    }
    if (c->ring != nullptr) {
      // In order behind any backlog; a full ring leaves m to the sender thread.
      if (!c->ring_backlog.empty() || !RingSend(c, &m, &unsent)) {
        c->ring_backlog.push_back(std::move(m));
        stalled = true;
      }
    } else if (c->outbox.Offer(&m)) {
      status = SendFrames(c->socket, c, &m, &unsent);
    }
  }
  CloseUnsent(&unsent);
  if (stalled) {
    std::lock_guard<std::mutex> l(ready_mu_);
    ring_stalled_.insert(c);
    ready_cv_.notify_one();
  }
  return status;
}

void ZmqVan::OnReleased(Conn* c, int64_t bytes) {
  bool ready;
  {
    std::lock_guard<std::mutex> l(c->mu);
    c->outbox.Released(bytes);
    ready = !c->closed && c->outbox.HasReady();
  }
  if (ready) {
    std::lock_guard<std::mutex> l(ready_mu_);
    ready_.insert(c);
    ready_cv_.notify_one();
  }
}

void ZmqVan::SenderLoop() {
  for (;;) {
    Conn* c = nullptr;
    std::vector<Conn*> stalled;
    {
      std::unique_lock<std::mutex> l(ready_mu_);
      auto woken = [this] { return stop_sender_ || !ready_.empty(); };
      if (ring_stalled_.empty()) {
        ready_cv_.wait(l, [&] { return woken() || !ring_stalled_.empty(); });
      }
      if (!ring_stalled_.empty()) {
        // A full ring frees as its reader goes on: look again shortly.
        ready_cv_.wait_for(l, std::chrono::microseconds(100), woken);
        stalled.assign(ring_stalled_.begin(), ring_stalled_.end());
        ring_stalled_.clear();
      }
      if (stop_sender_ && ready_.empty()) return;
      if (!ready_.empty()) {
        c = *ready_.begin();
        ready_.erase(ready_.begin());
      }
    }
    for (Conn* r : stalled) {
      std::vector<zmq_msg_t> unsent;
      bool more;
      {
        std::lock_guard<std::mutex> l(r->mu);
        while (!r->closed && !r->ring_backlog.empty() &&
               RingSend(r, &r->ring_backlog.front(), &unsent)) {
          r->ring_backlog.pop_front();
        }
        more = !r->closed && !r->ring_backlog.empty();
      }
      CloseUnsent(&unsent);
      if (more) {
        std::lock_guard<std::mutex> l(ready_mu_);
        ring_stalled_.insert(r);
      }
    }
    if (c == nullptr) continue;
    std::vector<zmq_msg_t> unsent;
    {
      std::lock_guard<std::mutex> l(c->mu);
      OutMessage m;
      while (!c->closed && c->outbox.Next(&m)) {
        Status s = SendFrames(c->socket, c, &m, &unsent);
        LOG_IF(WARNING, !s.ok()) << s;
      }
    }
    CloseUnsent(&unsent);
  }
}

}  // namespace ps
}  // namespace kvtrain
