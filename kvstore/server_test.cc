// ServerHandler (the dist stores' server side) driven by a raw KVWorker over
// the in-process transport: requests for level answers that the server
// cannot honour, or that ask for a width it does not know, are refused with
// an error naming the problem, and the server goes on serving.
#include "kvstore/server.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "transport/ps/inproc_job.h"
#include "transport/ps/ps.h"

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
  // A push (with pull) of 8 ones with record `rec`, or an init of zeros,
  // as `info` says.
  Status Send(int head, const proto::RequestInfo& info, bool pull, KeyRecord rec = {}) {
    ps::RequestOptions opts;
    opts.head = head;
    opts.body = info.SerializeAsString();
    const std::vector<float> vals(8, head == proto::KV_INIT ? 0.0f : 1.0f);
    ps::KVPairs kvs = ps::KVPairs::From({key}, ps::Blob::FromVector(vals));
    if (head != proto::KV_INIT) kvs.attrs = EncodeKeyRecords({rec});
    StatusOr<int64_t> ts = pull ? worker->PushPull(kvs, opts) : worker->Push(kvs, opts);
    if (!ts.ok()) return ts.status();
    ps::PullResult result;
    return worker->Wait(*ts, kLong, &result);
  }

  ps::InprocJob job;
  ServerHandler handler{1, 0};
  std::unique_ptr<ps::KVServer> server;
  std::unique_ptr<ps::KVWorker> worker;
  uint64_t key = 0;
};

proto::RequestInfo Sync() {
  proto::RequestInfo info;
  info.set_mode(proto::KV_SYNC);
  return info;
}

KeyRecord Record(int64_t step, uint32_t bits) {
  KeyRecord r;
  r.step = step;
  r.level_bits = static_cast<uint8_t>(bits);
  return r;
}

TEST(ServerTest, UnknownLevelWidthsAreRefusedNamingThem) {
  OneServer s;
  Status st = s.Send(proto::KV_PUSH, Sync(), true, Record(1, 3));
  EXPECT_THAT(st.message(), HasSubstr("asks for levels of 3 bits (valid: 1, 2, 4, 8)")) << st;
  // A width that would size a huge answer.
  st = s.Send(proto::KV_PUSH, Sync(), true, Record(1, 30));
  EXPECT_THAT(st.message(), HasSubstr("asks for levels of 30 bits")) << st;
  // The server goes on: step 1 as levels of 2 bits (8 ones: one value).
  EXPECT_TRUE(s.Send(proto::KV_PUSH, Sync(), true, Record(1, 2)).ok());
}

TEST(ServerTest, RequestsWithoutTheirKeyRecordsAreRefused) {
  OneServer s;
  ps::RequestOptions opts;
  opts.head = proto::KV_PUSH;
  opts.body = Sync().SerializeAsString();
  const std::vector<float> vals(8, 1.0f);
  StatusOr<int64_t> ts =
      s.worker->PushPull(ps::KVPairs::From({s.key}, ps::Blob::FromVector(vals)), opts);
  ASSERT_TRUE(ts.ok()) << ts.status();
  ps::PullResult result;
  Status st = s.worker->Wait(*ts, kLong, &result);
  EXPECT_THAT(st.message(), HasSubstr("carries 0 bytes of key records for 1 keys")) << st;
  KeyRecord bad = Record(1, 0);
  bad.compression = 77;
  st = s.Send(proto::KV_PUSH, Sync(), true, bad);
  EXPECT_THAT(st.message(), HasSubstr("unknown compression 77")) << st;
  // Nothing was applied: step 1 still takes a push.
  EXPECT_TRUE(s.Send(proto::KV_PUSH, Sync(), true, Record(1, 0)).ok());
}

TEST(ServerTest, LevelsOfWeightsOrOfAsyncSumsAreRefused) {
  OneServer s;
  proto::RequestInfo async = Sync();
  async.set_mode(proto::KV_ASYNC);
  Status st = s.Send(proto::KV_PUSH, async, true, Record(1, 4));
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
  st = s.Send(proto::KV_PUSH, Sync(), true, Record(1, 4));
  EXPECT_THAT(st.message(), HasSubstr("holds weights (it runs the optimizer)")) << st;
  // A float32 answer of the next step works.
  EXPECT_TRUE(s.Send(proto::KV_PUSH, Sync(), true, Record(2, 0)).ok());
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
