// dist_async and dist_ssp: bounded staleness holds a worker's answers until
// the slowest worker is close enough, staleness-aware updates divide each
// push's learning rate by 1 + its staleness, and each worker's counters come
// back from the servers.
#include <gtest/gtest.h>

#include <future>

#include "kvstore/dist_fixture_testlib.h"
#include "kvstore/kvstore.h"

namespace kvtrain {
namespace {

using kv_test::DistFixture;
using kv_test::Filled;

Status Expect(bool ok, const std::string& what) {
  return ok ? Status::OK() : Status::Internal(what);
}

TEST(DistKVStoreAsyncTest, ZeroStalenessAnswersEachStepOnceEveryWorkerPushedIt) {
  // "a" on one server, "b" split over both: three server keys. No
  // optimizer: the servers accumulate every push.
  DistFixture f(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "100"}});
  const int steps = 5;
  std::vector<StalenessReport> reports(2);
  Status s = f.Run("dist_ssp", [&](KVStore* kv, int rank) -> Status {
    AsyncOptions o;
    o.staleness = 0;
    KV_RETURN_IF_ERROR(kv->SetAsyncOptions(o));
    KV_RETURN_IF_ERROR(kv->Init({"a", "b"}, {Filled(3, 0), Filled(500, 0)}));
    Tensor a = Tensor::Zeros({3}), b = Tensor::Zeros({500});
    for (int t = 1; t <= steps; ++t) {
      KV_RETURN_IF_ERROR(kv->PushPull({"a", "b"}, {Filled(3, rank + 1.0f), Filled(500, rank + 1.0f)},
                                      {a, b}));
      // Both workers' pushes of steps 1..t, and none of step t + 1: the
      // answer waited for the slower worker, and the faster one cannot
      // push again before it has it.
      KV_RETURN_IF_ERROR(Expect(a.ToVector()[2] == 3.0f * t && b.ToVector()[499] == 3.0f * t,
                                "worker " + std::to_string(rank) + " step " + std::to_string(t) +
                                    ": a=" + std::to_string(a.ToVector()[2]) +
                                    " b=" + std::to_string(b.ToVector()[499])));
    }
    KV_ASSIGN_OR_RETURN(reports[rank], kv->TakeStalenessReport());
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s;
  // Each step, of each server key, the first push to arrive was held until
  // the other came.
  EXPECT_EQ(reports[0].held + reports[1].held, 3 * steps);
  EXPECT_EQ(reports[0].pushes, 3 * steps);
  EXPECT_EQ(reports[1].pushes, 3 * steps);
}

TEST(DistKVStoreAsyncTest, AFastWorkerWaitsWhenItWouldRunMoreThanTheBoundAhead) {
  // Two small keys travel as one bucket (a multi-key push-pull).
  DistFixture f(1, 2);
  std::promise<void> second_step_sent;
  std::shared_future<void> sent = second_step_sent.get_future().share();
  std::vector<StalenessReport> reports(2);
  Status s = f.Run("dist_ssp", [&](KVStore* kv, int rank) -> Status {
    AsyncOptions o;
    o.staleness = 1;
    KV_RETURN_IF_ERROR(kv->SetAsyncOptions(o));
    KV_RETURN_IF_ERROR(kv->Init({"x", "y"}, {Filled(4, 0), Filled(4, 0)}));
    Tensor x = Tensor::Zeros({4}), y = Tensor::Zeros({4});
    if (rank == 0) {
      // Step 1 is within the bound of a worker that has pushed nothing.
      KV_RETURN_IF_ERROR(kv->PushPull({"x", "y"}, {Filled(4, 1), Filled(4, 1)}, {x, y}));
      KV_RETURN_IF_ERROR(Expect(x.ToVector()[0] == 1, "step 1 answered " +
                                                          std::to_string(x.ToVector()[0])));
      // Step 2 needs worker 1's step 1: its answer holds that push too.
      KV_ASSIGN_OR_RETURN(KVHandle h, kv->PushPullAsync({"x", "y"}, {Filled(4, 1), Filled(4, 1)},
                                                        {x, y}, 0));
      kv->Flush();
      second_step_sent.set_value();
      KV_RETURN_IF_ERROR(kv->Wait(h));
      KV_RETURN_IF_ERROR(Expect(x.ToVector()[0] == 102 && y.ToVector()[3] == 102,
                                "step 2 answered " + std::to_string(x.ToVector()[0]) +
                                    " before worker 1's push"));
    } else {
      sent.wait();
      KV_RETURN_IF_ERROR(kv->PushPull({"x", "y"}, {Filled(4, 100), Filled(4, 100)}, {x, y}));
      KV_RETURN_IF_ERROR(Expect(x.ToVector()[0] == 102, "worker 1 got " +
                                                            std::to_string(x.ToVector()[0])));
    }
    KV_ASSIGN_OR_RETURN(reports[rank], kv->TakeStalenessReport());
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(reports[0].held, 2);  // step 2, both keys
  EXPECT_EQ(reports[1].held, 0);
  EXPECT_GT(reports[0].held_seconds, 0);
  // Worker 1 read the keys at Init and pushed after worker 0's two updates.
  EXPECT_EQ(reports[1].max, 2);
}

TEST(DistKVStoreAsyncTest, StalenessAwareUpdatesDivideTheLearningRate) {
  DistFixture f(1, 2);
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(1.0f);
  std::promise<void> first_done;
  std::shared_future<void> done = first_done.get_future().share();
  std::vector<StalenessReport> reports(2), again(2);
  float last = 0;
  Status s = f.Run("dist_async", [&](KVStore* kv, int rank) -> Status {
    AsyncOptions o;
    o.staleness_lr = true;
    KV_RETURN_IF_ERROR(kv->SetAsyncOptions(o));
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(4, 0)}));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
    Tensor w = Tensor::Zeros({4});
    if (rank == 0) {
      // Each push sees the weights of the one before: staleness 0, lr 1.
      for (int t = 1; t <= 2; ++t) {
        KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(4, 1)}, {w}));
        KV_RETURN_IF_ERROR(Expect(w.ToVector()[0] == -t, "worker 0 step " + std::to_string(t) +
                                                             ": " + std::to_string(w.ToVector()[0])));
      }
      first_done.set_value();
    } else {
      done.wait();
      // Read at Init, two updates ago: staleness 2, lr 1/3.
      KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(4, 1)}, {w}));
      last = w.ToVector()[0];
    }
    KV_ASSIGN_OR_RETURN(reports[rank], kv->TakeStalenessReport());
    KV_ASSIGN_OR_RETURN(again[rank], kv->TakeStalenessReport());
    return Status::OK();
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_FLOAT_EQ(last, -2.0f - 1.0f / 3.0f);
  EXPECT_EQ(reports[0].pushes, 2);
  EXPECT_EQ(reports[0].max, 0);
  EXPECT_EQ(reports[1].pushes, 1);
  EXPECT_DOUBLE_EQ(reports[1].mean, 2.0);
  EXPECT_EQ(reports[1].max, 2);
  EXPECT_EQ(reports[1].held, 0);  // unbounded
  // Each report covers the pushes since the last.
  EXPECT_EQ(again[0].pushes, 0);
  EXPECT_EQ(again[1].pushes, 0);
}

TEST(DistKVStoreAsyncTest, AsyncOptionsBelongToAsynchronousStores) {
  DistFixture f(1, 1);
  Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    const Status set = kv->SetAsyncOptions(AsyncOptions{});
    KV_RETURN_IF_ERROR(Expect(!set.ok() && set.message().find("asynchronous stores") !=
                                               std::string::npos,
                              "dist_sync took async options: " + set.ToString()));
    KV_RETURN_IF_ERROR(Expect(!kv->TakeStalenessReport().ok(), "dist_sync has a report"));
    return Expect(kv->lockstep() && !kv->is_async(), "dist_sync is not lockstep");
  });
  ASSERT_TRUE(s.ok()) << s;
  DistFixture g(1, 1);
  s = g.Run("dist_ssp", [&](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(Expect(kv->async_options().staleness == kDefaultSspStaleness &&
                                  kv->lockstep() && kv->is_async(),
                              "dist_ssp's defaults"));
    AsyncOptions unbounded;
    unbounded.staleness = -1;
    const Status set = kv->SetAsyncOptions(unbounded);
    return Expect(set.code() == Status::Code::kInvalidArgument &&
                      set.message().find("dist_ssp") != std::string::npos,
                  "dist_ssp took no bound: " + set.ToString());
  });
  ASSERT_TRUE(s.ok()) << s;
  DistFixture h(1, 1);
  s = h.Run("dist_async", [&](KVStore* kv, int) -> Status {
    return Expect(!kv->lockstep() && kv->async_options().staleness < 0, "dist_async's defaults");
  });
  ASSERT_TRUE(s.ok()) << s;
  StatusOr<std::unique_ptr<KVStore>> local = KVStore::Create("local");
  ASSERT_TRUE(local.ok());
  EXPECT_FALSE((*local)->SetAsyncOptions(AsyncOptions{}).ok());
}

}  // namespace
}  // namespace kvtrain
