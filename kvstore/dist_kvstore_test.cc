// The dist stores end to end inside one process: a scheduler, servers and
// workers (threads) over the in-process transport. The multi-process tests
// in tests/kvstore run the same over ZeroMQ.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kvstore/dist_fixture_testlib.h"
#include "kvstore/in_process.h"
#include "kvstore/keys.h"
#include "kvstore/kvstore.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {
namespace {

using kv_test::DistFixture;
using kv_test::Filled;

// MXNet's nightly dist_sync_kvstore.py check: workers push rank-dependent
// integers for several steps; with SGD lr=1 every value is closed-form.
void SyncClosedForm(int servers, int workers, const std::string& type,
                    std::map<std::string, std::string> env = {}) {
  const std::vector<int64_t> sizes = {1, 37, 5000};  // bound below is 1000
  const int steps = 3;
  env["KVTRAIN_BIGARRAY_BOUND"] = "1000";
  DistFixture f(servers, workers, env);
  Status s = f.Run(type, [&](KVStore* kv, int rank) -> Status {
    std::vector<Key> keys;
    std::vector<Tensor> init;
    for (size_t i = 0; i < sizes.size(); ++i) {
      keys.push_back("k" + std::to_string(i));
      // Rank 0's values win.
      init.push_back(Filled(sizes[i], rank == 0 ? 1.0f : 99.0f));
    }
    KV_RETURN_IF_ERROR(kv->Init(keys, init));
    proto::OptimizerSpec sgd;
    sgd.set_type(proto::OptimizerSpec::SGD);
    sgd.set_learning_rate(1.0f);
    KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
    for (int t = 1; t <= steps; ++t) {
      std::vector<Tensor> grads, outs;
      for (int64_t n : sizes) {
        grads.push_back(Filled(n, static_cast<float>(rank + 1)));
        outs.push_back(Tensor::Zeros({n}));
      }
      KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, outs, -t));
      // w = 1 - t * sum_r (r + 1).
      const float want = 1.0f - t * workers * (workers + 1) / 2.0f;
      for (size_t i = 0; i < sizes.size(); ++i) {
        for (float v : outs[i].ToVector()) {
          if (v != want) {
            return Status::Internal("rank " + std::to_string(rank) + " step " +
                                    std::to_string(t) + " key " + keys[i].ToString() +
                                    ": got " + std::to_string(v) + ", want " +
                                    std::to_string(want));
          }
        }
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, SyncOneWorkerOneServer) { SyncClosedForm(1, 1, "dist_sync"); }
TEST(DistKVStoreTest, SyncTwoByTwo) { SyncClosedForm(2, 2, "dist_sync"); }
TEST(DistKVStoreTest, SyncFourWorkersThreeServers) { SyncClosedForm(3, 4, "dist_sync"); }
TEST(DistKVStoreTest, DeviceSyncFallsBackToCpu) { SyncClosedForm(2, 2, "dist_device_sync"); }
// Buckets of 400 bytes: the 5000-element key is cut into 8 pieces per
// server (StoreSettings::kPiecesPerSliceAcrossHosts: the in-process job's
// nodes name no host), each its own server key, step and update.
TEST(DistKVStoreTest, SyncWithPieces) {
  SyncClosedForm(2, 3, "dist_sync", {{"KVTRAIN_PS_BUCKET_BYTES", "400"}});
}

// Every element of a key cut into pieces lands where it belongs, through
// push-pulls (buckets) and through separate pushes and pulls (one request
// per piece), for sync and async servers.
TEST(DistKVStoreTest, PiecesKeepEveryElementInPlace) {
  for (const std::string type : {"dist_sync", "dist_async"}) {
    const int64_t n = 1003;  // 8 pieces of 62 or 63 elements on each server
    DistFixture f(2, 2, {{"KVTRAIN_PS_BUCKET_BYTES", "100"}, {"KVTRAIN_BIGARRAY_BOUND", "500"}});
    Status s = f.Run(type, [&](KVStore* kv, int rank) -> Status {
      std::vector<float> init(n);
      for (int64_t i = 0; i < n; ++i) init[i] = static_cast<float>(i);
      KV_RETURN_IF_ERROR(kv->Init({"w"}, {Tensor::FromVector(init, {n})}));
      Tensor got = Tensor::Zeros({n});
      KV_RETURN_IF_ERROR(kv->Pull({"w"}, {got}));
      if (got.ToVector() != init) return Status::Internal(type + ": init differs");
      proto::OptimizerSpec sgd;
      sgd.set_type(proto::OptimizerSpec::SGD);
      sgd.set_learning_rate(1.0f);
      KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
      // Gradient i * (rank + 1) / 8 (exact in float): after both workers'
      // pushes of a step, w[i] drops by i * 3 / 8.
      std::vector<float> grad(n);
      for (int64_t i = 0; i < n; ++i) grad[i] = static_cast<float>(i) * (rank + 1) / 8.0f;
      const Tensor g = Tensor::FromVector(grad, {n});
      KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {g}, {got}));
      KV_RETURN_IF_ERROR(kv->Push({"w"}, {g}));
      KV_RETURN_IF_ERROR(kv->Barrier());
      KV_RETURN_IF_ERROR(kv->Pull({"w"}, {got}));
      const std::vector<float> v = got.ToVector();
      for (int64_t i = 0; i < n; ++i) {
        const float want = static_cast<float>(i) - 2 * static_cast<float>(i) * 3 / 8.0f;
        if (v[i] != want) {
          return Status::Internal(type + ": element " + std::to_string(i) + " is " +
                                  std::to_string(v[i]) + ", want " + std::to_string(want));
        }
      }
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(DistKVStoreTest, SyncWithoutOptimizerKeepsTheStepsSum) {
  DistFixture f(2, 3);
  Status s = f.Run("dist_sync", [](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({0}, {Filled(10, 0)}));
    for (int t = 1; t <= 2; ++t) {
      // Separate push and pull: the pull waits for this step's update.
      KV_RETURN_IF_ERROR(kv->Push({0}, {Filled(10, static_cast<float>(t * (rank + 1)))}));
      Tensor out = Tensor::Zeros({10});
      KV_RETURN_IF_ERROR(kv->Pull({0}, {out}));
      if (out.ToVector()[9] != t * 6.0f) {
        return Status::Internal("got " + std::to_string(out.ToVector()[9]));
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, AsyncTotalIsTheSumOfAllPushes) {
  DistFixture f(2, 3, {{"KVTRAIN_BIGARRAY_BOUND", "100"}});
  const int pushes = 20;
  Status s = f.Run("dist_async", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"a", "b"}, {Filled(3, 0), Filled(500, 0)}));
    for (int i = 0; i < pushes; ++i) {
      KV_RETURN_IF_ERROR(kv->Push({"a", "b"}, {Filled(3, rank + 1.0f), Filled(500, 1)}));
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    Tensor a = Tensor::Zeros({3}), b = Tensor::Zeros({500});
    KV_RETURN_IF_ERROR(kv->Pull({"a", "b"}, {a, b}));
    if (a.ToVector()[0] != pushes * 6.0f || b.ToVector()[499] != pushes * 3.0f) {
      return Status::Internal("async totals " + std::to_string(a.ToVector()[0]) +
                              ", " + std::to_string(b.ToVector()[499]));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, OptimizerStatesSaveAndLoadThroughTheServers) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/dist_states";
  proto::OptimizerSpec mom;
  mom.set_type(proto::OptimizerSpec::SGD);
  mom.set_learning_rate(1.0f);
  mom.set_momentum(0.5f);
  float saved_then_two = 0, resumed = 0;
  DistFixture first(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "4"}});
  ASSERT_TRUE(first.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(8, 0)}));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(mom));
    Tensor out = Tensor::Zeros({8});
    for (int t = 0; t < 2; ++t) KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(8, 0.5f)}, {out}));
    if (rank == 0) KV_RETURN_IF_ERROR(kv->SaveOptimizerStates(path));
    KV_RETURN_IF_ERROR(kv->Barrier());
    for (int t = 0; t < 2; ++t) KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(8, 0.5f)}, {out}));
    if (rank == 0) saved_then_two = out.ToVector()[7];
    return Status::OK();
  }).ok());
  DistFixture second(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "4"}});
  ASSERT_TRUE(second.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(8, -2.5f)}));  // the weight at the save
    KV_RETURN_IF_ERROR(kv->SetOptimizer(mom));
    if (rank == 0) KV_RETURN_IF_ERROR(kv->LoadOptimizerStates(path));
    KV_RETURN_IF_ERROR(kv->Barrier());
    Tensor out = Tensor::Zeros({8});
    for (int t = 0; t < 2; ++t) KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(8, 0.5f)}, {out}));
    if (rank == 0) resumed = out.ToVector()[7];
    return Status::OK();
  }).ok());
  EXPECT_EQ(saved_then_two, -6.125f);
  EXPECT_EQ(resumed, saved_then_two);
  // Each server keeps its piece's state under the key's StateKey (keys.h),
  // not its own server key: "w", the first name, is id 2^32 on both.
  auto states = kv::ReadStatesFile(path);
  ASSERT_TRUE(states.ok()) << states.status();
  ASSERT_EQ(states->size(), 2u);
  for (const std::string& bytes : *states) {
    proto::OptimizerStates s;
    ASSERT_TRUE(s.ParseFromString(bytes));
    ASSERT_EQ(s.keys_size(), 1);
    EXPECT_EQ(s.keys(0).key(), kv::StateKey(uint64_t{1} << 32, 0));
  }
}

// dist_sync: the servers queue at most kSyncWindow steps ahead; pushes and
// pulls beyond are refused naming the worker, the key and the steps, and the
// queued steps complete in turn once the other worker catches up.
TEST(DistKVStoreTest, SyncPushesFarAheadAreRefused) {
  DistFixture f(1, 2);
  Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(3, 0)}));
    proto::OptimizerSpec sgd;
    sgd.set_type(proto::OptimizerSpec::SGD);
    sgd.set_learning_rate(1.0f);
    KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
    if (rank == 0) {
      std::vector<KVHandle> handles;
      for (int t = 1; t <= 20; ++t) {
        KV_ASSIGN_OR_RETURN(KVHandle h, kv->PushAsync({"w"}, {Filled(3, 1)}));
        handles.push_back(h);
      }
      for (int t = 17; t <= 20; ++t) {
        Status e = kv->Wait(handles[t - 1]);
        const std::string want = " pushed step " + std::to_string(t) +
                                 ", more than 16 steps ahead of step 1, which this "
                                 "server is summing";
        if (e.message().find(want) == std::string::npos ||
            e.message().find("key w: worker 0 (") == std::string::npos) {
          return Status::Internal("step " + std::to_string(t) + ": " + e.ToString());
        }
      }
      Status pull = kv->Pull({"w"}, {Tensor::Zeros({3})});
      if (pull.message().find(" pulled step 20, more than 16 steps ahead of step 0") ==
              std::string::npos ||
          pull.message().find("key w: worker 0 (") == std::string::npos) {
        return Status::Internal("pull: " + pull.ToString());
      }
      KV_RETURN_IF_ERROR(kv->Barrier());
      for (int t = 1; t <= 16; ++t) KV_RETURN_IF_ERROR(kv->Wait(handles[t - 1]));
    } else {
      KV_RETURN_IF_ERROR(kv->Barrier());
      for (int t = 1; t <= 16; ++t) KV_RETURN_IF_ERROR(kv->Push({"w"}, {Filled(3, 1)}));
      Tensor w = Tensor::Zeros({3});
      KV_RETURN_IF_ERROR(kv->Pull({"w"}, {w}));
      if (w.ToVector()[2] != -32.0f) return Status::Internal("w = " + w.DebugString());
    }
    return kv->Barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// One deadline per operation: a push-pull of 5 keys that the servers cannot
// answer (the other worker has not pushed) fails after about one
// KVTRAIN_KVSTORE_TIMEOUT, not five.
TEST(DistKVStoreTest, AnOperationHasOneDeadline) {
  DistFixture f(2, 2, {{"KVTRAIN_KVSTORE_TIMEOUT", "1"}, {"KVTRAIN_PS_BUCKET_BYTES", "0"}});
  double waited = 0;
  std::string error;
  std::mutex mu;
  std::condition_variable failed;
  Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    std::vector<Key> keys = {"a", "b", "c", "d", "e"};
    std::vector<Tensor> vals, outs;
    for (size_t i = 0; i < keys.size(); ++i) {
      vals.push_back(Filled(3, 1));
      outs.push_back(Tensor::Zeros({3}));
    }
    KV_RETURN_IF_ERROR(kv->Init(keys, vals));
    if (rank == 1) {
      // Never pushes, and stays until worker 0's request failed (its
      // Finalize would answer the request at once, naming it).
      std::unique_lock<std::mutex> l(mu);
      failed.wait(l, [&] { return !error.empty(); });
      return Status::OK();
    }
    const auto start = std::chrono::steady_clock::now();
    Status e = kv->PushPull(keys, vals, outs);
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> l(mu);
    error = e.ToString();
    failed.notify_all();
    return Status::OK();
  });
  (void)s;  // the job itself ends with worker 1's early Finalize: not checked here
  EXPECT_NE(error.find("not answered within"), std::string::npos) << error;
  EXPECT_LT(waited, 3.0) << "5 requests waited " << waited << " s with a 1 s deadline";
  EXPECT_GE(waited, 0.9);
}

// dist_sync: a worker that finishes having pushed fewer times than another
// (fewer batches) is named at once to the one waiting for its next push,
// instead of that one waiting for KVTRAIN_KVSTORE_TIMEOUT.
TEST(DistKVStoreTest, AWorkerThatFinishedEarlyIsNamedAtOnce) {
  DistFixture f(2, 2, {{"KVTRAIN_KVSTORE_TIMEOUT", "600"}, {"KVTRAIN_PS_BUCKET_BYTES", "0"}});
  std::string error;
  Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w", "v"}, {Filled(3, 1), Filled(40, 1)}));
    Tensor w = Tensor::Zeros({3}), v = Tensor::Zeros({40});
    for (int t = 0; t < (rank == 0 ? 3 : 2); ++t) {
      const Status e = kv->PushPull({"w", "v"}, {Filled(3, 1), Filled(40, 1)}, {w, v});
      if (!e.ok()) {
        error = e.ToString();
        return Status::OK();
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_NE(error.find("worker 1 finished (KVStore::Finalize) after pushing it 2 times: step 3"),
            std::string::npos)
      << error;
}

// dist_ssp: a worker that finished holds nobody back (its clock stopped,
// but it pushes no more).
TEST(DistKVStoreTest, AFinishedWorkerBoundsNoStaleness) {
  DistFixture f(1, 2, {{"KVTRAIN_KVSTORE_TIMEOUT", "600"}});
  Status s = f.Run("dist_ssp", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(3, 0)}));
    Tensor w = Tensor::Zeros({3});
    // Worker 1 runs 6 steps, past the bound of 2 ahead of worker 0's one.
    for (int t = 0; t < (rank == 0 ? 1 : 6); ++t) {
      KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(3, 1)}, {w}));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// dist_async: a worker that finishes long before another waits for it at
// Finalize (longer than KVTRAIN_KVSTORE_TIMEOUT) without failing the job.
TEST(DistKVStoreTest, AsyncFinalizeWaitsForTheSlowestWorker) {
  DistFixture f(1, 2, {{"KVTRAIN_KVSTORE_TIMEOUT", "0.5"}});
  Status s = f.Run("dist_async", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(3, 0)}));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    return kv->Push({"w"}, {Filled(3, 1)});
  });
  EXPECT_TRUE(s.ok()) << s;
}

// The servers find each key's lr_mult and wd_mult by its name, split
// across servers or not (MXNet: biases take no weight decay).
TEST(DistKVStoreTest, ServersApplyEachKeysMultipliersByName) {
  DistFixture f(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "8"}});
  Status s = f.Run("dist_sync", [](KVStore* kv, int) -> Status {
    const std::vector<Key> keys = {"fc_weight", "fc_bias", 7};
    KV_RETURN_IF_ERROR(kv->Init(keys, {Filled(20, 1), Filled(3, 1), Filled(3, 1)}));
    proto::OptimizerSpec sgd;
    sgd.set_type(proto::OptimizerSpec::SGD);
    sgd.set_learning_rate(0.5f);
    sgd.set_weight_decay(0.1f);
    (*sgd.mutable_wd_mult())["fc_bias"] = 0.0f;
    (*sgd.mutable_lr_mult())["fc_weight"] = 2.0f;
    (*sgd.mutable_wd_mult())["7"] = 3.0f;
    KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
    std::vector<Tensor> outs = {Tensor::Zeros({20}), Tensor::Zeros({3}), Tensor::Zeros({3})};
    KV_RETURN_IF_ERROR(kv->PushPull(keys, {Filled(20, 0.5f), Filled(3, 0.5f), Filled(3, 0.5f)},
                                    outs));
    // w -= lr * lr_mult * (sum of the 2 pushes + wd * wd_mult * w).
    const std::vector<float> want = {1 - 1.0f * (1 + 0.1f), 1 - 0.5f * 1, 1 - 0.5f * (1 + 0.3f)};
    for (size_t i = 0; i < keys.size(); ++i) {
      for (float v : outs[i].ToVector()) {
        if (std::fabs(v - want[i]) > 1e-6) {
          return Status::Internal("key " + keys[i].ToString() + ": got " + std::to_string(v) +
                                  ", want " + std::to_string(want[i]));
        }
      }
    }
    return kv->Barrier();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, BadInputIsAnErrorAndTheServersKeepServing) {
  DistFixture f(2, 1);
  Status s = f.Run("dist_sync", [](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(4, 1)}));
    auto expect = [](Status got, const std::string& want) -> Status {
      if (got.message().find(want) == std::string::npos) {
        return Status::Internal("expected an error containing \"" + want +
                                "\", got: " + got.ToString());
      }
      return Status::OK();
    };
    KV_RETURN_IF_ERROR(expect(kv->Push({"v"}, {Filled(4, 1)}),
                              "key v: was never initialised (call Init first)"));
    KV_RETURN_IF_ERROR(expect(kv->Push({"w"}, {Filled(5, 1)}),
                              "key w: push with shape (5) but it was initialised with (4)"));
    KV_RETURN_IF_ERROR(expect(kv->Pull({"w"}, {Tensor::Zeros({3})}),
                              "key w: pull with shape (3) but it was initialised with (4)"));
    KV_RETURN_IF_ERROR(expect(kv->SetUpdater(nullptr), "use SetOptimizer"));
    proto::OptimizerSpec bad;
    bad.set_type(proto::OptimizerSpec::SGD);
    bad.set_learning_rate(-1);
    KV_RETURN_IF_ERROR(expect(kv->SetOptimizer(bad), "learning"));
    KV_RETURN_IF_ERROR(expect(kv->SaveOptimizerStates("/tmp/x"), "no optimizer"));
    KV_RETURN_IF_ERROR(expect(kv->RunServer(), "RunServer called in a worker process"));
    // A push whose local reduce fails takes no step: the next push is
    // still step 1 (with the step taken, the server would wait for step 1
    // and this worker's PushPull below would hang).
    if (kv->Push({"w", "w"}, {Filled(4, 1), Filled(5, 1)}).ok()) {
      return Status::Internal("a push of two shapes for one key succeeded");
    }
    // Still serving: a correct push and pull work.
    Tensor out = Tensor::Zeros({4});
    KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(4, 2)}, {out}));
    if (out.ToVector()[0] != 2) return Status::Internal("value " + out.DebugString());
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace kvtrain
