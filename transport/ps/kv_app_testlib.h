// Shared by the KVWorker/KVServer tests over the in-process van: a summing
// server handler and a job of in-process servers and workers using it.
#ifndef KVTRAIN_TRANSPORT_PS_KV_APP_TESTLIB_H_
#define KVTRAIN_TRANSPORT_PS_KV_APP_TESTLIB_H_

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/ps/inproc_job.h"
#include "transport/ps/ps.h"

namespace kvtrain {
namespace ps {
namespace kvapp_test {

inline constexpr auto kLong = std::chrono::seconds(20);

template <typename T>
T Take(StatusOr<T> s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

// Server state of the summing handler: key -> float sums.
struct SumStore {
  std::mutex mu;
  std::map<uint64_t, std::vector<float>> sums;

  void Handle(const RequestMeta& meta, const KVPairs& kv, KVServer* server) {
    const size_t n = kv.num_keys();
    KVPairs out;
    out.keys = kv.keys;
    std::vector<float> vals;
    std::vector<int64_t> lens;
    const float* in = kv.vals.as<float>();
    const int64_t* in_lens = kv.lens.as<int64_t>();
    std::lock_guard<std::mutex> l(mu);
    for (size_t i = 0; i < n; ++i) {
      const size_t len = kv.lens.empty() ? kv.vals.size() / 4 / n
                                         : static_cast<size_t>(in_lens[i]) / 4;
      std::vector<float>& s = sums[kv.key(i)];
      if (meta.push) {
        if (s.empty()) s.assign(len, 0.f);
        for (size_t j = 0; j < len; ++j) s[j] += in[j];
        in += len;
      }
      vals.insert(vals.end(), s.begin(), s.end());
      lens.push_back(static_cast<int64_t>(s.size() * 4));
    }
    if (meta.pull) {
      out.vals = Blob::FromVector(std::move(vals));
      out.lens = Blob::FromVector(std::move(lens));
    } else {
      out = KVPairs();
    }
    EXPECT_TRUE(server->Respond(meta, out).ok());
  }
};

struct Cluster {
  explicit Cluster(int servers, int workers, int handler_threads = 1)
      : job([&] {
          InprocJobOptions o;
          o.num_servers = servers;
          o.num_workers = workers;
          return o;
        }()),
        stores(servers) {
    EXPECT_TRUE(job.CreateAll().ok());
    EXPECT_TRUE(job.StartAll().ok());
    for (int r = 0; r < servers; ++r) {
      KVServerOptions so;
      so.handler_threads = handler_threads;
      SumStore* store = &stores[r];
      auto s = KVServer::Create(
          job.server(r), 0,
          [store](const RequestMeta& m, const KVPairs& kv, KVServer* srv) {
            store->Handle(m, kv, srv);
          },
          so);
      EXPECT_TRUE(s.ok()) << s.status();
      servers_.push_back(std::move(*s));
    }
    for (int r = 0; r < workers; ++r) {
      auto w = KVWorker::Create(job.worker(r), 0);
      EXPECT_TRUE(w.ok()) << w.status();
      workers_.push_back(std::move(*w));
    }
  }
  ~Cluster() {
    workers_.clear();
    servers_.clear();
  }
  InprocJob job;
  std::vector<SumStore> stores;
  std::vector<std::unique_ptr<KVServer>> servers_;
  std::vector<std::unique_ptr<KVWorker>> workers_;
};

// Keys spread over every server's range.
inline std::vector<uint64_t> SpreadKeys(Postoffice* po, int per_server) {
  std::vector<uint64_t> keys;
  for (const KeyRange& r : po->ServerKeyRanges()) {
    for (int i = 0; i < per_server; ++i) keys.push_back(r.begin + 3 * i + 1);
  }
  return keys;
}

}  // namespace kvapp_test
}  // namespace ps
}  // namespace kvtrain

#endif  // KVTRAIN_TRANSPORT_PS_KV_APP_TESTLIB_H_
