// ServerHandler (the dist stores' server side) driven by a raw KVWorker over
// the in-process transport: requests for level answers that the server
// cannot honour, or that ask for a width it does not know, are refused with
// an error naming the problem, and the server goes on serving.
#include "kvstore/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "kvstore/ps/inproc_job.h"
#include "kvstore/ps/ps.h"

namespace kvtrain {
namespace kv {
namespace {

using ::testing::HasSubstr;

constexpr auto kLong = std::chrono::seconds(20);

// One server running a ServerHandler for one worker, and that worker's raw
// KVWorker; key `key` holds 8 zeros.
struct OneServer {
  OneServer() : job(Options()) {
    EXPECT_TRUE(job.CreateAll().ok());
    EXPECT_TRUE(job.StartAll().ok());
    auto s = ps::KVServer::Create(
        job.server(0), 0, [this](const ps::RequestMeta& m, const ps::KVPairs& kv,
                                 ps::KVServer* srv) { handler.Handle(m, kv, srv); });
    EXPECT_TRUE(s.ok()) << s.status();
    server = std::move(*s);
    auto w = ps::KVWorker::Create(job.worker(0), 0);
    EXPECT_TRUE(w.ok()) << w.status();
    worker = std::move(*w);
    key = job.worker(0)->ServerKeyRanges()[0].begin + 1;
    proto::RequestInfo info;
    info.set_mode(proto::KV_SYNC);
    info.set_key_name("w");
    EXPECT_TRUE(Send(proto::KV_INIT, info, false).ok());
  }
  ~OneServer() {
    worker.reset();
    server.reset();
  }
  static ps::InprocJobOptions Options() {
    ps::InprocJobOptions o;
    o.num_servers = 1;
    o.num_workers = 1;
    return o;
  }
  // A push (with pull) of 8 ones, or an init of zeros, as `info` says.
  Status Send(int head, const proto::RequestInfo& info, bool pull) {
    ps::RequestOptions opts;
    opts.head = head;
    opts.body = info.SerializeAsString();
    const std::vector<float> vals(8, head == proto::KV_INIT ? 0.0f : 1.0f);
    const ps::KVPairs kvs = ps::KVPairs::From({key}, ps::Blob::FromVector(vals));
    StatusOr<int64_t> ts = pull ? worker->PushPull(kvs, opts) : worker->Push(kvs, opts);
    if (!ts.ok()) return ts.status();
    ps::PullResult result;
    return worker->Wait(*ts, kLong, &result);
  }

  ps::InprocJob job;
  ServerHandler handler{1};
  std::unique_ptr<ps::KVServer> server;
  std::unique_ptr<ps::KVWorker> worker;
  uint64_t key = 0;
};

proto::RequestInfo SyncPush(int64_t step, uint32_t bits) {
  proto::RequestInfo info;
  info.set_mode(proto::KV_SYNC);
  info.set_step(step);
  info.set_level_bits(bits);
  return info;
}

TEST(ServerTest, UnknownLevelWidthsAreRefusedNamingThem) {
  OneServer s;
  Status st = s.Send(proto::KV_PUSH, SyncPush(1, 3), true);
  EXPECT_THAT(st.message(), HasSubstr("asks for levels of 3 bits (valid: 1, 2, 4, 8)")) << st;
  // In a bucket's entry too (a width that would size a 4 GiB answer).
  proto::RequestInfo bucket = SyncPush(0, 0);
  proto::KeyEntry* e = bucket.add_keys();
  e->set_key(s.key);
  e->set_step(1);
  e->set_level_bits(30);
  st = s.Send(proto::KV_PUSH, bucket, true);
  EXPECT_THAT(st.message(), HasSubstr("asks for levels of 30 bits")) << st;
  // The server goes on: step 1 as levels of 2 bits (8 ones: one value).
  EXPECT_TRUE(s.Send(proto::KV_PUSH, SyncPush(1, 2), true).ok());
}

TEST(ServerTest, LevelsOfWeightsOrOfAsyncSumsAreRefused) {
  OneServer s;
  proto::RequestInfo async = SyncPush(1, 4);
  async.set_mode(proto::KV_ASYNC);
  Status st = s.Send(proto::KV_PUSH, async, true);
  EXPECT_THAT(st.message(), HasSubstr("key w: an answer as levels was asked for, but this "
                                      "server holds every push accumulated (dist_async)"))
      << st;
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(0.5f);
  proto::RequestInfo opt;
  opt.set_payload(sgd.SerializeAsString());
  ps::RequestOptions opts;
  opts.head = proto::KV_SET_OPTIMIZER;
  opts.body = opt.SerializeAsString();
  StatusOr<int64_t> ts = s.worker->Push(ps::KVPairs{}, opts);
  ASSERT_TRUE(ts.ok()) << ts.status();
  ASSERT_TRUE(s.worker->Wait(*ts, kLong).ok());
  st = s.Send(proto::KV_PUSH, SyncPush(1, 4), true);
  EXPECT_THAT(st.message(), HasSubstr("holds weights (it runs the optimizer)")) << st;
  // A float32 answer of the next step works.
  EXPECT_TRUE(s.Send(proto::KV_PUSH, SyncPush(2, 0), true).ok());
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
