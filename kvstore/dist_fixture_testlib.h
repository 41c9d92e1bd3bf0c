// DistFixture: a dist store's scheduler, servers and workers (threads)
// inside one process, over the in-process transport, for the dist stores'
// tests.
#ifndef KVTRAIN_KVSTORE_DIST_FIXTURE_TESTLIB_H_
#define KVTRAIN_KVSTORE_DIST_FIXTURE_TESTLIB_H_

#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/env.h"
#include "kvstore/kvstore.h"
#include "transport/ps/inproc_job.h"

namespace kvtrain {
namespace kv_test {

// Runs `worker(kv, rank)` on every worker of a dist store of `type`, with
// servers serving until the workers finalize. Returns the first error.
class DistFixture {
 public:
  DistFixture(int servers, int workers, std::map<std::string, std::string> env = {},
              int server_replicas = 0)
      : job_(Options(servers, workers, server_replicas)), env_(std::move(env)) {}

  static ps::InprocJobOptions Options(int servers, int workers, int server_replicas = 0) {
    ps::InprocJobOptions o;
    o.num_servers = servers;
    o.num_workers = workers;
    o.server_replicas = server_replicas;
    return o;
  }

  // Cuts server `rank` off the network, as if it died; Run then expects
  // it to fail. Any thread, during Run.
  void Lose(int rank) {
    ps::Postoffice* po = job_.server(rank);
    {
      std::lock_guard<std::mutex> l(lost_mu_);
      lost_.push_back(po);
    }
    job_.net()->Isolate(po->port());
  }

  ps::InprocJob& job() { return job_; }

  Status Run(const std::string& type,
             const std::function<Status(KVStore*, int)>& worker) {
    KV_RETURN_IF_ERROR(job_.CreateAll());
    KV_RETURN_IF_ERROR(job_.StartAll());
    std::vector<std::future<Status>> done;
    for (const auto& node : job_.nodes()) {
      ps::Postoffice* po = node.get();
      done.push_back(std::async(std::launch::async, [this, po, type, worker] {
        KVStoreOptions opts;
        opts.env = MapEnv(env_);
        opts.postoffice = po;
        KV_ASSIGN_OR_RETURN(std::unique_ptr<KVStore> kv, KVStore::Create(type, opts));
        if (!kv->is_worker()) return kv->RunServer();
        Status s = worker(kv.get(), kv->rank());
        if (!s.ok()) {
          po->Abort(s.ToString());
          return s;
        }
        return kv->Finalize();
      }));
    }
    Status first;
    for (size_t i = 0; i < done.size(); ++i) {
      Status s = done[i].get();
      bool lost;
      {
        std::lock_guard<std::mutex> l(lost_mu_);
        lost = std::count(lost_.begin(), lost_.end(), job_.nodes()[i].get()) > 0;
      }
      if (!s.ok() && first.ok() && !lost) first = s;
    }
    return first;
  }

 private:
  std::mutex lost_mu_;
  std::vector<ps::Postoffice*> lost_;
  ps::InprocJob job_;
  std::map<std::string, std::string> env_;
};

// Counts the data requests that cross a fixture's network while counting
// is on, and hands each one's keys and bytes to `each` (if given).
class RequestTap {
 public:
  explicit RequestTap(
      DistFixture* f,
      std::function<void(size_t keys, size_t bytes)> each = nullptr)
      : f_(f), each_(std::move(each)) {
    f_->job().net()->SetTap([this](const ps::RawMessage& raw) {
      size_t keys = 0, bytes = 0;
      if (!ps::IsDataRequest(raw, &keys, &bytes)) return;
      std::lock_guard<std::mutex> l(mu_);
      if (!counting_) return;
      ++requests_;
      if (each_) each_(keys, bytes);
    });
  }
  ~RequestTap() { f_->job().net()->SetTap(nullptr); }

  void Counting(bool on) {
    std::lock_guard<std::mutex> l(mu_);
    counting_ = on;
  }
  int64_t requests() {
    std::lock_guard<std::mutex> l(mu_);
    return requests_;
  }

 private:
  DistFixture* f_;
  std::function<void(size_t, size_t)> each_;
  std::mutex mu_;
  bool counting_ = false;
  int64_t requests_ = 0;
};

// Row ids as an int64 tensor.
inline Tensor Ids(const std::vector<int64_t>& ids) {
  Tensor t = Tensor::Empty(Shape({static_cast<int64_t>(ids.size())}), DType::kInt64);
  for (size_t i = 0; i < ids.size(); ++i) t.data<int64_t>()[i] = ids[i];
  return t;
}

// Whether two jobs' values (by key) are equal bit for bit.
inline bool SameBits(const std::vector<std::vector<float>>& a,
                     const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

inline Tensor Filled(int64_t n, float v) {
  Tensor t = Tensor::Empty({n});
  CHECK(t.Fill(v).ok());
  return t;
}

}  // namespace kv_test
}  // namespace kvtrain

#endif  // KVTRAIN_KVSTORE_DIST_FIXTURE_TESTLIB_H_
