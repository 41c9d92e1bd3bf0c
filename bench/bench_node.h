// A node of a benchmark's own job: the benchmark binary starts itself as
// every process of a LocalJob (tests/util/local_job.h), and each process
// joins with a store, servers also answering an echo application whose
// round trips are the transport-only baseline.
#ifndef KVTRAIN_BENCH_BENCH_NODE_H_
#define KVTRAIN_BENCH_BENCH_NODE_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "kvstore/kvstore.h"
#include "transport/ps/ps.h"
#include "net/node_config.h"

namespace kvtrain {
namespace bench {

// Answers every request with the bytes it carried.
inline void Echo(const ps::RequestMeta& meta, const ps::KVPairs& kv, ps::KVServer* s) {
  const Status st = s->Respond(meta, kv);
  if (!st.ok()) std::fprintf(stderr, "echo: %s\n", st.ToString().c_str());
}

// Joins the job from the environment with a store of `type`; servers also
// answer application `echo_app` with Echo. The worker runs `work` and then
// Finalize; servers and the scheduler serve, then run `after_serving` (if
// given) with their role. Returns the process's exit code (the error
// printed).
inline int RunBenchNode(const std::string& type, int echo_app,
                        const std::function<Status(ps::Postoffice*, KVStore*)>& work,
                        const std::function<void(Role)>& after_serving = nullptr) {
  StatusOr<NodeConfig> config = NodeConfig::FromEnv(ProcessEnv());
  if (!config.ok()) return std::fprintf(stderr, "%s\n", config.status().ToString().c_str()), 2;
  StatusOr<std::unique_ptr<ps::Postoffice>> po = ps::Postoffice::Create(*config);
  Status s = po.status();
  if (s.ok()) s = (*po)->Start();
  std::unique_ptr<KVStore> kv;
  std::unique_ptr<ps::KVServer> echo;
  if (s.ok()) {
    KVStoreOptions o;
    o.postoffice = po->get();
    StatusOr<std::unique_ptr<KVStore>> created = KVStore::Create(type, o);
    s = created.status();
    if (s.ok()) kv = std::move(created).value();
  }
  if (s.ok() && config->role == Role::kServer) {
    StatusOr<std::unique_ptr<ps::KVServer>> e = ps::KVServer::Create(po->get(), echo_app, Echo);
    s = e.status();
    if (s.ok()) echo = std::move(e).value();
  }
  if (s.ok() && kv->is_worker()) {
    s = work(po->get(), kv.get());
    if (s.ok()) s = kv->Finalize();
  } else if (s.ok()) {
    s = kv->RunServer();
    if (after_serving) after_serving(config->role);
  }
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), 1;
  return 0;
}

}  // namespace bench
}  // namespace kvtrain

#endif  // KVTRAIN_BENCH_BENCH_NODE_H_
