// KVWorker/KVServer over the in-process van: exact sums across servers,
// pulls into buffers, deferred responses, commands, callbacks, per-key
// order, early requests, aborts, the order of a message's frames, waiters
// receiving their own answers and recalling the receive thread (errors and
// deadlines: kv_app_errors_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "transport/ps/inproc_job.h"
#include "transport/ps/kv_app_testlib.h"
#include "transport/ps/message.h"
#include "transport/ps/postoffice_impl.h"

namespace kvtrain {
namespace ps {
namespace {

using kvapp_test::Cluster;
using kvapp_test::kLong;
using kvapp_test::SpreadKeys;
using kvapp_test::Take;
using ::testing::HasSubstr;

TEST(KVAppTest, PushThenPullSumsExactlyAcrossServers) {
  Cluster c(2, 3);
  const std::vector<uint64_t> keys = SpreadKeys(c.job.worker(0), 50);
  const int per_key = 3;
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&, w] {
      std::vector<float> vals;
      for (size_t i = 0; i < keys.size(); ++i) {
        for (int j = 0; j < per_key; ++j) vals.push_back((w + 1) * (i + j));
      }
      auto ts =
          c.workers_[w]->Push(KVPairs::From(keys, Blob::FromVector(vals)));
      ASSERT_TRUE(ts.ok()) << ts.status();
      ASSERT_TRUE(c.workers_[w]->Wait(*ts, kLong).ok());
      ASSERT_TRUE(c.job.worker(w)->Barrier(kWorkerGroup, kLong).ok());
      auto pull = c.workers_[w]->Pull(Blob::FromVector(keys));
      ASSERT_TRUE(pull.ok());
      PullResult result;
      ASSERT_TRUE(c.workers_[w]->Wait(*pull, kLong, &result).ok());
      ASSERT_EQ(result.parts.size(), 2u);  // one per server
      std::vector<float> got(keys.size() * per_key);
      ASSERT_TRUE(
          result.CopyTo(reinterpret_cast<char*>(got.data()), got.size() * 4)
              .ok());
      for (size_t i = 0; i < keys.size(); ++i) {
        for (int j = 0; j < per_key; ++j) {
          ASSERT_EQ(got[i * per_key + j], 6.0f * (i + j)) << "key " << keys[i];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.stores[0].sums.size(), 50u);
  EXPECT_EQ(c.stores[1].sums.size(), 50u);
}

TEST(KVAppTest, PushPullIntoBufferWithPerKeyLengths) {
  Cluster c(2, 1);
  const std::vector<uint64_t> keys = SpreadKeys(c.job.worker(0), 2);
  const std::vector<int64_t> lens = {4, 40, 0, 8000};  // bytes per key
  std::vector<float> vals(8044 / 4);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<float>(i);
  std::vector<float> out(vals.size(), -1.f);
  PullDest dest;
  dest.data = reinterpret_cast<char*>(out.data());
  dest.size = out.size() * 4;
  dest.lens = Blob::FromVector(lens);
  auto ts = c.workers_[0]->PushPull(
      KVPairs::From(keys, Blob::FromVector(vals), lens), {}, dest);
  ASSERT_TRUE(ts.ok()) << ts.status();
  ASSERT_TRUE(c.workers_[0]->Wait(*ts, kLong).ok());
  EXPECT_EQ(out, vals);
  // A buffer whose layout disagrees with what the servers hold is an error
  // naming the key.
  std::vector<char> small(12);
  PullDest wrong;
  wrong.data = small.data();
  wrong.size = small.size();
  auto bad = c.workers_[0]->Pull(
      Blob::FromVector(std::vector<uint64_t>{keys[0], keys[1]}), {}, wrong);
  ASSERT_TRUE(bad.ok());
  Status s = c.workers_[0]->Wait(*bad, kLong);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("key " + std::to_string(keys[0])));
  EXPECT_THAT(s.message(), HasSubstr("server 0 (127.0.0.1:"));
}

// A message ends with its values: over TCP, a small frame after a large
// one arrives as a trailing segment that the receiver wakes up for again.
TEST(KVAppTest, ValuesAreTheLastFrame) {
  Cluster c(1, 1);
  std::mutex mu;
  std::vector<std::vector<wire::FrameKind>> requests, responses;
  c.job.net()->SetTap([&](const RawMessage& raw) {
    Message m;
    if (!DecodeMessage(raw.frames, &m).ok()) return;
    if (m.meta.command() != wire::DATA) return;
    std::vector<wire::FrameKind> kinds;
    for (const wire::Frame& f : m.meta.data()) kinds.push_back(f.kind());
    std::lock_guard<std::mutex> l(mu);
    (m.meta.request() ? requests : responses).push_back(kinds);
  });
  const std::vector<uint64_t> keys = SpreadKeys(c.job.worker(0), 2);
  const std::vector<int64_t> lens = {4000, 8};
  auto ts = c.workers_[0]->PushPull(KVPairs::From(
      keys, Blob::FromVector(std::vector<char>(4008, 1)), lens));
  ASSERT_TRUE(ts.ok()) << ts.status();
  ASSERT_TRUE(c.workers_[0]->Wait(*ts, kLong).ok());
  c.job.net()->SetTap(nullptr);
  const std::vector<wire::FrameKind> want = {wire::KEYS, wire::LENS,
                                             wire::VALUES};
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(requests[0], want);
  EXPECT_EQ(responses[0], want);
}

// Two threads wait for their own large requests while a third runs
// barriers: every answer reaches its waiter with the right round's values,
// and a callback request right after completes too.
TEST(KVAppTest, ConcurrentWaitersBarriersAndCallbacksAllComplete) {
  Cluster c(2, 1);
  Postoffice* po = c.job.worker(0);
  KVWorker* w = c.workers_[0].get();
  const std::vector<uint64_t> keys = SpreadKeys(po, 2);
  // Above KVWorker's 64 KB polling size: these waits sleep.
  constexpr size_t kFloats = 40000;
  auto loop = [&](std::vector<uint64_t> my_keys, int rounds) {
    const std::vector<float> ones(kFloats * my_keys.size(), 1.f);
    for (int r = 1; r <= rounds; ++r) {
      auto ts = w->PushPull(KVPairs::From(my_keys, Blob::FromVector(ones)));
      ASSERT_TRUE(ts.ok()) << ts.status();
      PullResult got;
      ASSERT_TRUE(w->Wait(*ts, kLong, &got).ok());
      ASSERT_EQ(got.total_bytes(), ones.size() * 4);
      for (const KVPairs& part : got.parts) {
        const float* v = part.vals.as<float>();
        for (size_t i = 0; i < part.vals.size() / 4; ++i) {
          ASSERT_EQ(v[i], static_cast<float>(r)) << "round " << r;
        }
      }
    }
  };
  std::thread a(loop, std::vector<uint64_t>{keys[0], keys[2]}, 60);
  std::thread b(loop, std::vector<uint64_t>{keys[1], keys[3]}, 60);
  std::thread barriers([&] {
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(po->Barrier(kWorkerGroup, kLong).ok());
    }
  });
  a.join();
  b.join();
  barriers.join();
  // A callback request right after a Wait: answered although no thread
  // waits to receive it.
  auto ts = w->Pull(Blob::FromVector(std::vector<uint64_t>{keys[0]}));
  ASSERT_TRUE(ts.ok());
  ASSERT_TRUE(w->Wait(*ts, kLong).ok());
  std::mutex mu;
  std::condition_variable cv;
  bool called = false;
  RequestOptions opts;
  opts.callback = [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    std::lock_guard<std::mutex> l(mu);
    called = true;
    cv.notify_all();
  };
  ASSERT_TRUE(
      w->Pull(Blob::FromVector(std::vector<uint64_t>{keys[1]}), opts).ok());
  std::unique_lock<std::mutex> l(mu);
  EXPECT_TRUE(cv.wait_for(l, kLong, [&] { return called; }));
}

TEST(KVAppTest, DeferredResponsesOncePerStepFromEveryWorker) {
  InprocJobOptions o;
  o.num_workers = 3;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  // dist_sync style: answer nobody until every worker pushed.
  std::mutex mu;
  std::condition_variable arrived;
  std::vector<RequestMeta> waiting;
  std::set<int> ranks;
  std::vector<std::thread> responders;
  auto server = KVServer::Create(
      job.server(0), 0,
      [&](const RequestMeta& meta, const KVPairs&, KVServer* s) {
        std::lock_guard<std::mutex> l(mu);
        EXPECT_EQ(meta.sender_role, Role::kWorker);
        ranks.insert(meta.sender_rank);
        waiting.push_back(meta);
        arrived.notify_all();
        if (waiting.size() < 3) return;
        responders.emplace_back([s, w = waiting] {
          for (const RequestMeta& m : w) EXPECT_TRUE(s->Respond(m).ok());
        });
        waiting.clear();
      });
  ASSERT_TRUE(server.ok());
  std::vector<std::unique_ptr<KVWorker>> workers;
  std::vector<int64_t> ts;
  for (int r = 0; r < 3; ++r) {
    workers.push_back(Take(KVWorker::Create(job.worker(r), 0)));
    auto t = workers[r]->Push(KVPairs::From({7}, Blob::FromString("xxxx")));
    ASSERT_TRUE(t.ok());
    ts.push_back(*t);
    if (r < 2) {  // the push is in, and not answered before every worker pushed
      std::unique_lock<std::mutex> l(mu);
      ASSERT_TRUE(arrived.wait_for(l, kLong, [&] { return waiting.size() == size_t(r) + 1; }));
      EXPECT_TRUE(responders.empty());
    }
  }
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(workers[r]->Wait(ts[r], kLong).ok());
  std::lock_guard<std::mutex> l(mu);
  for (auto& t : responders) t.join();
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
}

TEST(KVAppTest, CommandsWithoutKeysReachEveryServer) {
  InprocJobOptions o;
  o.num_servers = 3;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  std::vector<std::unique_ptr<KVServer>> servers;
  for (int r = 0; r < 3; ++r) {
    servers.push_back(Take(KVServer::Create(
        job.server(r), 5,
        [r](const RequestMeta& meta, const KVPairs& data, KVServer* s) {
          KVPairs out;
          out.vals = Blob::FromString(meta.body + "@" + std::to_string(r) +
                                      "#" + std::to_string(meta.head) + ":" +
                                      data.vals.ToString());
          s->Respond(meta, out);
        })));
  }
  auto worker = KVWorker::Create(job.worker(0), 5);
  ASSERT_TRUE(worker.ok());
  RequestOptions opts;
  opts.head = 42;
  opts.body = "save";
  auto ts = (*worker)->Pull(Blob(), opts);
  ASSERT_TRUE(ts.ok());
  PullResult result;
  ASSERT_TRUE((*worker)->Wait(*ts, kLong, &result).ok());
  ASSERT_EQ(result.parts.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(result.parts[r].vals.ToString(),
              "save@" + std::to_string(r) + "#42:");
  }
  // A keyless push carries its values to every server as a payload.
  KVPairs payload;
  payload.vals = Blob::FromString("cfg");
  ts = (*worker)->PushPull(payload, opts);
  ASSERT_TRUE(ts.ok()) << ts.status();
  ASSERT_TRUE((*worker)->Wait(*ts, kLong, &result).ok());
  ASSERT_EQ(result.parts.size(), 3u);
  EXPECT_EQ(result.parts[2].vals.ToString(), "save@2#42:cfg");
}

TEST(KVAppTest, PerKeyRecordsAreCutWithTheKeys) {
  InprocJobOptions o;
  o.num_servers = 3;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  // Each server answers with the keys and records it received.
  std::vector<std::unique_ptr<KVServer>> servers;
  for (int r = 0; r < 3; ++r) {
    servers.push_back(Take(KVServer::Create(
        job.server(r), 6, [r](const RequestMeta& meta, const KVPairs& data, KVServer* s) {
          // Server r gets its own two keys' records ("c0c1" on server 2).
          const std::string mine = std::string(1, static_cast<char>('a' + r)) + "0" +
                                   std::string(1, static_cast<char>('a' + r)) + "1";
          EXPECT_EQ(data.attrs.ToString(), mine);
          KVPairs out;
          out.keys = data.keys;
          out.vals = Blob::FromString(std::string(data.num_keys() * 4, 'x'));
          out.lens = Blob::FromVector(std::vector<int64_t>(data.num_keys(), 4));
          s->Respond(meta, out);
        })));
  }
  auto worker = KVWorker::Create(job.worker(0), 6);
  ASSERT_TRUE(worker.ok());
  // Two keys on each server, a 2-byte record each.
  const std::vector<KeyRange> ranges = job.worker(0)->ServerKeyRanges();
  std::vector<uint64_t> keys;
  std::string attrs;
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 2; ++k) {
      keys.push_back(ranges[r].begin + k);
      attrs += std::string(1, static_cast<char>('a' + r)) + std::to_string(k);
    }
  }
  KVPairs kvs;
  kvs.keys = Blob::FromVector(keys);
  kvs.attrs = Blob::FromString(attrs);
  auto ts = (*worker)->Pull(kvs);
  ASSERT_TRUE(ts.ok()) << ts.status();
  PullResult result;
  ASSERT_TRUE((*worker)->Wait(*ts, kLong, &result).ok());
  EXPECT_EQ(result.parts.size(), 3u);
  // Records that do not split among the keys are refused before sending.
  kvs.attrs = Blob::FromString("abc");
  ts = (*worker)->Pull(kvs);
  EXPECT_THAT(ts.status().message(), HasSubstr("3 bytes of per-key records do not split equally among 6 keys"));
  kvs.attrs = Blob();
  kvs.vals = Blob::FromString("x");
  ts = (*worker)->Pull(kvs);
  EXPECT_THAT(ts.status().message(), HasSubstr("a pull carries no values"));
}

TEST(KVAppTest, CallbacksRunOnceAndCannotBeWaited) {
  Cluster c(2, 1);
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  RequestOptions opts;
  opts.callback = [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s;
    std::lock_guard<std::mutex> l(mu);
    ++calls;
    cv.notify_all();
  };
  const std::vector<uint64_t> keys = SpreadKeys(c.job.worker(0), 1);
  for (int i = 0; i < 10; ++i) {
    auto ts = c.workers_[0]->Push(
        KVPairs::From(keys, Blob::FromVector(std::vector<float>{1, 2})), opts);
    ASSERT_TRUE(ts.ok());
    EXPECT_NE(c.workers_[0]->Wait(*ts, kLong).code(), Status::Code::kOk);
  }
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, kLong, [&] { return calls == 10; }));
}

TEST(KVAppTest, HandlerThreadsKeepEachKeysOrder) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  std::mutex mu;
  std::map<uint64_t, std::vector<int>> seen;
  KVServerOptions so;
  so.handler_threads = 4;
  auto server = KVServer::Create(
      job.server(0), 0,
      [&](const RequestMeta& meta, const KVPairs& kv, KVServer* s) {
        {
          std::lock_guard<std::mutex> l(mu);
          seen[kv.key(0)].push_back(kv.vals.as<int>()[0]);
        }
        s->Respond(meta);
      },
      so);
  ASSERT_TRUE(server.ok());
  auto worker = KVWorker::Create(job.worker(0), 0);
  std::vector<int64_t> ts;
  for (int i = 0; i < 100; ++i) {
    for (uint64_t key : {1, 2, 3, 4, 5}) {
      auto t = (*worker)->Push(
          KVPairs::From({key}, Blob::FromVector(std::vector<int>{i})));
      ASSERT_TRUE(t.ok());
      ts.push_back(*t);
    }
  }
  for (int64_t t : ts) ASSERT_TRUE((*worker)->Wait(t, kLong).ok());
  for (uint64_t key : {1, 2, 3, 4, 5}) {
    ASSERT_EQ(seen[key].size(), 100u);
    for (int i = 0; i < 100; ++i) ASSERT_EQ(seen[key][i], i) << "key " << key;
  }
}

TEST(KVAppTest, RequestsBeforeTheServerRegistersWaitForIt) {
  InprocJobOptions o;
  InprocJob job(o);
  ASSERT_TRUE(job.CreateAll().ok());
  ASSERT_TRUE(job.StartAll().ok());
  auto worker = KVWorker::Create(job.worker(0), 3);
  auto ts = (*worker)->Push(KVPairs::From({1}, Blob::FromString("abcd")));
  ASSERT_TRUE(ts.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto server = KVServer::Create(
      job.server(0), 3,
      [](const RequestMeta& m, const KVPairs&, KVServer* s) { s->Respond(m); });
  ASSERT_TRUE(server.ok());
  EXPECT_TRUE((*worker)->Wait(*ts, kLong).ok());
}

}  // namespace
}  // namespace ps
}  // namespace kvtrain
