// Fuzz target: the control plane of running nodes. A job (scheduler, one
// server, one worker) runs over the in-process Van for the whole fuzzing
// session; each input is sent to one node from one connection, then a
// barrier over every node proves the receivers dealt with it. Whatever a
// message does (dropped, or a legitimate-looking ABORT that fails the job),
// no node may crash; a job that failed or stopped answering is replaced.
//
// Input: byte 0 picks the recipient (scheduler, server, worker); byte 1 the
// sending connection (bits 0-1: one of the nodes' own tokens, 3: a stranger)
// and whether the harness fixes up the sender id, recipient and job id of a
// parsable header (bit 2), so that mutations reach the handlers behind the
// connection check; the rest is frames joined by kFrameSeparator.
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "net/fuzz_frames.h"
#include "transport/ps/inproc_job.h"
#include "transport/ps/message.h"
#include "transport/ps/postoffice_impl.h"

namespace kvtrain {
namespace ps {
namespace {

struct Harness {
  std::unique_ptr<InprocJob> job;
  std::vector<Postoffice*> nodes;  // scheduler, server 0, worker 0

  bool Start() {
    nodes.clear();
    job.reset();
    InprocJobOptions o;
    o.heartbeat_interval_s = 0.2;
    o.heartbeat_timeout_s = 5;
    o.startup_timeout_s = 10;
    job = std::make_unique<InprocJob>(o);
    if (!job->CreateAll().ok() || !job->StartAll().ok()) return false;
    nodes = {job->scheduler(), job->server(0), job->worker(0)};
    return true;
  }

  // A barrier over every node, concurrently; false on any error.
  bool BarrierAll() {
    std::vector<std::future<Status>> f;
    for (Postoffice* po : nodes) {
      f.push_back(std::async(std::launch::async, [po] {
        return po->Barrier(kAllGroups, std::chrono::seconds(2));
      }));
    }
    bool ok = true;
    for (auto& x : f) ok = x.get().ok() && ok;
    return ok;
  }
};

Harness* TheHarness() {
  static Harness* h = [] {
    auto* x = new Harness;
    CHECK(x->Start()) << "control fuzz: the in-process job did not start";
    return x;
  }();
  return h;
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvtrain::ps;  // NOLINT
  if (size < 2) return 0;
  Harness* h = TheHarness();
  Postoffice* to = h->nodes[data[0] % 3];
  const int from_index = data[1] & 3;
  const bool fix_up = (data[1] & 4) != 0;
  std::vector<Blob> frames;  // 8-byte aligned copies, as ZeroMQ hands over large frames
  for (std::string_view f : kvtrain::net::SplitAt(
           {reinterpret_cast<const char*>(data) + 2, size - 2}, kvtrain::net::kFrameSeparator)) {
    frames.push_back(Blob::Copy(f.data(), f.size()));
  }

  std::string token = "stranger";
  int sender = 0;
  if (from_index < 3) {
    token = h->nodes[from_index]->impl()->token();
    sender = h->nodes[from_index]->impl()->my_id();
  }
  kvtrain::wire::Header head;
  if (fix_up && head.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size()))) {
    head.set_sender(sender);
    head.set_recipient(to->impl()->my_id());
    if (to->impl()->table() != nullptr) head.set_job_id(to->impl()->table()->job_id());
    frames[0] = Blob::FromString(head.SerializeAsString());
  }
  bool healthy;
  {
    // The rogue is registered on the job's network: it must go before a
    // restart replaces that network.
    InprocVan rogue(h->job->net(), token);
    CHECK(rogue.Bind(0).ok());
    CHECK(rogue.Connect(1, "127.0.0.1", to->port(), "").ok());
    CHECK(rogue.Send(1, 0, std::move(frames)).ok());
    healthy = h->BarrierAll() && h->job->Failures().empty();
  }
  if (!healthy) {
    CHECK(h->Start()) << "control fuzz: the in-process job did not restart";
  }
  return 0;
}
