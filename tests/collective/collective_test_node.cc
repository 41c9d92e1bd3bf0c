// One rank of a multi-process communicator test. Joins its group from the
// environment (launch.py's DMLC_*, Open MPI, or PMI_*) and, in the scheduler
// process of a launch.py job, serves the rendezvous. Modes:
//   sums: all-reduces of several sizes, a broadcast and a Split, each
//         checked against the exact expected values;
//   die:  after one all-reduce, rank --victim exits at once (no goodbye);
//         the others' next all-reduce must fail naming it.
// Prints "collective_test_node: rank R of N ok" on success.
#include <gflags/gflags.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "base/env.h"
#include "transport/collective/communicator.h"

DEFINE_string(mode, "sums", "sums or die");
DEFINE_int32(victim, 1, "die: the rank that exits");

namespace kvtrain {
namespace collective {
namespace {

Status CheckSums(Communicator* comm) {
  const int n = comm->size(), r = comm->rank();
  for (size_t count : {0, 1, 7, 1000, 65537, 1 << 20}) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((r + 1) * (i % 11));
    KV_RETURN_IF_ERROR(comm->AllReduceSum(v.data(), count));
    for (size_t i = 0; i < count; ++i) {
      const float want = n * (n + 1) / 2.0f * (i % 11);
      if (v[i] != want) {
        return Status::Internal("count " + std::to_string(count) + " index " +
                                std::to_string(i) + ": got " + std::to_string(v[i]) +
                                ", want " + std::to_string(want));
      }
    }
  }
  std::vector<int> b(100, r == n - 1 ? 5 : 0);
  KV_RETURN_IF_ERROR(comm->Broadcast(n - 1, b.data(), b.size() * sizeof(int)));
  if (b[99] != 5) return Status::Internal("broadcast did not arrive");
  KV_ASSIGN_OR_RETURN(auto half, comm->Split(r % 2, r));
  float x = static_cast<float>(r);
  KV_RETURN_IF_ERROR(half->AllReduceSum(&x, 1));
  float want = 0;
  for (int q = r % 2; q < n; q += 2) want += q;
  if (x != want) return Status::Internal("split sum " + std::to_string(x));
  // Point to point around the ring.
  if (n > 1) {
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    KV_RETURN_IF_ERROR(comm->Send(next, 3, &r, sizeof(r)));
    int got = -1;
    KV_RETURN_IF_ERROR(comm->Recv(prev, 3, &got, sizeof(got), std::chrono::seconds(60)));
    if (got != prev) return Status::Internal("ring message from " + std::to_string(got));
  }
  return comm->Barrier();
}

Status Die(Communicator* comm) {
  float x = 1;
  KV_RETURN_IF_ERROR(comm->AllReduceSum(&x, 1));
  if (comm->rank() == FLAGS_victim) {
    std::fflush(stdout);
    _exit(3);
  }
  std::vector<float> big(1 << 16, 1.0f);
  return comm->AllReduceSum(big.data(), big.size());
}

int Main() {
  const EnvLookup env = ProcessEnv();
  if (env(env::kRole) == std::optional<std::string>("scheduler")) {
    Status s = Communicator::ServeRendezvous(env);
    if (!s.ok()) std::fprintf(stderr, "collective_test_node: error: %s\n", s.ToString().c_str());
    return s.ok() ? 0 : 1;
  }
  auto comm = Communicator::CreateFromEnv(env);
  if (!comm.ok()) {
    std::fprintf(stderr, "collective_test_node: error: %s\n", comm.status().ToString().c_str());
    return 2;
  }
  Status s = FLAGS_mode == "die" ? Die(comm->get()) : CheckSums(comm->get());
  if (!s.ok()) {
    std::fprintf(stderr, "collective_test_node: rank %d error: %s\n", (*comm)->rank(),
                 s.ToString().c_str());
    return 1;
  }
  std::printf("collective_test_node: rank %d of %d ok\n", (*comm)->rank(), (*comm)->size());
  return 0;
}

}  // namespace
}  // namespace collective
}  // namespace kvtrain

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return kvtrain::collective::Main();
}
