// Server replicas (KVTRAIN_SERVER_REPLICAS) inside one process: a server cut
// off the network mid-job, the job going on with the copies of its key
// ranges and ending with the weights and optimizer states of a job that
// lost nothing. The same with real processes and SIGKILL:
// tests/faults/failover_test.py.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include <gmock/gmock.h>

#include "base/file.h"
#include "kvstore/dist_fixture_testlib.h"
#include "kvstore/in_process.h"
#include "kvstore/kvstore.h"
#include "proto/optimizer.pb.h"

namespace kvtrain {
namespace {

using kv_test::DistFixture;
using kv_test::Ids;
using testing::HasSubstr;

struct Outcome {
  std::vector<std::vector<float>> values;  // worker 0's last pull, by key
  std::string states;                      // the states file's bytes
};

// 2 workers, 3 servers, momentum SGD, keys small and split over every
// server; `lose` >= 0: server `lose` is cut off before step `at`.
Outcome Train(int replicas, int lose, int at) {
  const std::vector<int64_t> sizes = {1, 37, 5000};  // the bound below is 1000
  const int steps = 8;
  const std::string states = std::string(std::getenv("TEST_TMPDIR")) + "/replica_states_" +
                             std::to_string(replicas) + "_" + std::to_string(lose);
  DistFixture f(3, 2, {{"KVTRAIN_BIGARRAY_BOUND", "1000"}}, replicas);
  Outcome out;
  std::atomic<bool> lost{false};
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    std::vector<Key> keys;
    std::vector<Tensor> init;
    for (size_t i = 0; i < sizes.size(); ++i) {
      keys.push_back("k" + std::to_string(i));
      init.push_back(kv_test::Filled(sizes[i], 0.25f));
    }
    KV_RETURN_IF_ERROR(kv->Init(keys, init));
    proto::OptimizerSpec sgd;
    sgd.set_type(proto::OptimizerSpec::SGD);
    sgd.set_learning_rate(0.1f);
    sgd.set_momentum(0.9f);
    KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
    std::vector<Tensor> outs;
    for (int64_t n : sizes) outs.push_back(Tensor::Zeros({n}));
    for (int t = 1; t <= steps; ++t) {
      if (t == at && rank == 0 && lose >= 0 && !lost.exchange(true)) f.Lose(lose);
      std::vector<Tensor> grads;
      for (int64_t n : sizes) {
        Tensor g = Tensor::Empty({n});
        float* p = g.data<float>();
        // Values whose sums round: any difference in how a step is summed
        // or updated shows in the bits.
        for (int64_t j = 0; j < n; ++j) p[j] = 0.1f * (rank + 1) / (t + j % 7) + 1e-3f * j;
        grads.push_back(g);
      }
      KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, outs, -t));
    }
    if (rank == 0) {
      KV_RETURN_IF_ERROR(kv->SaveOptimizerStates(states));
      for (const Tensor& o : outs) out.values.push_back(o.ToVector());
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  for (const std::string& line : f.job().Failures()) {
    // Only the lost server fails (it finds itself cut off).
    EXPECT_EQ(line.rfind("server " + std::to_string(lose), 0), 0u) << line;
  }
  StatusOr<std::string> bytes = ReadWholeFile(states);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  if (bytes.ok()) out.states = *bytes;
  return out;
}

bool SameBits(const Outcome& a, const Outcome& b) {
  return kv_test::SameBits(a.values, b.values);
}

TEST(DistKVStoreReplicaTest, LosingAServerChangesNoBit) {
  const Outcome plain = Train(0, -1, 0);
  const Outcome replicated = Train(1, -1, 0);
  ASSERT_EQ(plain.values.size(), 3u);
  EXPECT_TRUE(SameBits(plain, replicated));
  EXPECT_EQ(plain.states, replicated.states);
  // Each server in turn: its own range moves to the next server, and the
  // ranges it held copies of lose one.
  for (int lose = 0; lose < 3; ++lose) {
    const Outcome failed = Train(1, lose, 4);
    EXPECT_TRUE(SameBits(plain, failed)) << "server " << lose << " lost";
    EXPECT_EQ(plain.states, failed.states) << "server " << lose << " lost";
  }
}

// With more than two workers the order of a sum changes its bits: every
// copy of a range sums a step's pushes in rank order, however they came.
TEST(DistKVStoreReplicaTest, CopiesSumInRankOrder) {
  DistFixture f(2, 3, {}, /*server_replicas=*/1);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {kv_test::Filled(4, 0)}));
    // In rank order (1e8 + 1) - 1e8 = 0 in float32; in arrival order, worker
    // 2 first, (-1e8 + 1e8) + 1 = 1.
    const float g = rank == 0 ? 1e8f : rank == 1 ? 1.0f : -1e8f;
    // (With replicas a dist_sync push is acknowledged once its step is
    // complete: worker 2 cannot wait for its push before the others push.)
    const Tensor mine = kv_test::Filled(4, g);
    KVHandle pushed;
    if (rank == 2) {
      KV_ASSIGN_OR_RETURN(pushed, kv->PushAsync({"w"}, {mine}, 0));
      kv->Flush();
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    if (rank != 2) KV_RETURN_IF_ERROR(kv->Push({"w"}, {mine}, 0));
    if (rank == 2) KV_RETURN_IF_ERROR(kv->Wait(pushed));
    Tensor out = Tensor::Zeros({4});
    KV_RETURN_IF_ERROR(kv->Pull({"w"}, {out}, 0));
    for (float v : out.ToVector()) {
      if (v != 0.0f) return Status::Internal("summed out of rank order: " + std::to_string(v));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A row-sparse table (Adam, rows created as pushed) through the same:
// the rows read and the table saved at the end, by the lost server's rank.
std::pair<std::vector<float>, std::string> TrainTable(int replicas, int lose) {
  proto::SparseTableSpec spec;
  spec.set_width(4);
  spec.set_init(proto::SparseTableSpec::NORMAL);
  spec.set_scale(0.1f);
  spec.set_seed(3);
  proto::OptimizerSpec adam;
  adam.set_type(proto::OptimizerSpec::ADAM);
  adam.set_learning_rate(0.01f);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 40; ++i) all.push_back(i * 7919);  // over every server
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/replica_table_" +
                           std::to_string(replicas) + "_" + std::to_string(lose);
  Tensor got = Tensor::Zeros({static_cast<int64_t>(all.size()), 4});
  DistFixture f(3, 2, {}, replicas);
  std::atomic<bool> lost{false};
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    KV_RETURN_IF_ERROR(kv->SetOptimizer(adam));
    for (int t = 0; t < 12; ++t) {
      if (t == 5 && rank == 1 && lose >= 0 && !lost.exchange(true)) f.Lose(lose);
      std::vector<int64_t> ids;
      std::vector<float> rows;
      for (int i = 0; i < 9; ++i) {
        ids.push_back(all[static_cast<size_t>((t * 5 + rank * 3 + i * 7) % 40)]);
        for (int j = 0; j < 4; ++j) rows.push_back(0.01f * ((t + rank + i + j) % 9) - 0.04f);
      }
      Tensor r = Tensor::FromVector(rows, Shape({static_cast<int64_t>(ids.size()), 4}));
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", Ids(ids), r));
      Tensor out = Tensor::Zeros({static_cast<int64_t>(ids.size()), 4});
      KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(ids), out));
    }
    if (rank == 0) {
      KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", Ids(all), got));
      KV_RETURN_IF_ERROR(kv->SaveRowSparse("emb", path));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  StatusOr<std::string> bytes = ReadWholeFile(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return {got.ToVector(), bytes.ok() ? *bytes : ""};
}

TEST(DistKVStoreReplicaTest, RowSparseTablesLoseNothing) {
  const auto plain = TrainTable(0, -1);
  const auto replicated = TrainTable(1, -1);
  ASSERT_EQ(plain.first.size(), 160u);
  EXPECT_EQ(plain.first, replicated.first);
  for (int lose = 0; lose < 3; ++lose) {
    const auto failed = TrainTable(1, lose);
    EXPECT_EQ(plain.first, failed.first) << "server " << lose << " lost";
    EXPECT_EQ(replicated.second, failed.second) << "server " << lose << " lost";
  }
}

// dist_async: each copy applies the pushes as they reach it, so a copy may
// hold another order's values; the job goes on from them, every push
// applied once.
TEST(DistKVStoreReplicaTest, AsyncGoesOnWithEveryPushApplied) {
  DistFixture f(3, 2, {{"KVTRAIN_BIGARRAY_BOUND", "100"}}, /*server_replicas=*/1);
  std::atomic<bool> lost{false};
  const Status s = f.Run("dist_async", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {kv_test::Filled(300, 0)}));
    KV_RETURN_IF_ERROR(kv->Barrier());
    for (int t = 0; t < 20; ++t) {
      if (t == 10 && rank == 0 && !lost.exchange(true)) f.Lose(1);
      KV_RETURN_IF_ERROR(kv->Push({"w"}, {kv_test::Filled(300, rank + 1.0f)}, 0));
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    Tensor out = Tensor::Zeros({300});
    KV_RETURN_IF_ERROR(kv->Pull({"w"}, {out}, 0));
    // Without an optimizer an async server accumulates every push:
    // 20 x (1 + 2) on every element.
    for (float v : out.ToVector()) {
      if (v != 60.0f) return Status::Internal("total " + std::to_string(v) + ", want 60");
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// A row-sparse table under dist_async (SGD at lr 1: each row ends at
// minus the sum of its pushes): the primary passes each push on; after
// server 1 is cut off, the pushes it had not answered go to the new
// primary and every push counts once.
TEST(DistKVStoreReplicaTest, AsyncTablesApplyEveryPushOnce) {
  proto::SparseTableSpec spec;
  spec.set_width(4);
  spec.mutable_optimizer()->set_type(proto::OptimizerSpec::SGD);
  spec.mutable_optimizer()->set_learning_rate(1.0f);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < 30; ++i) all.push_back(i * 7919);  // over every server
  DistFixture f(3, 2, {}, /*server_replicas=*/1);
  std::atomic<bool> lost{false};
  const Status s = f.Run("dist_async", [&](KVStore* kv, int rank) -> Status {
    KV_RETURN_IF_ERROR(kv->InitRowSparse("emb", spec));
    for (int t = 0; t < 20; ++t) {
      if (t == 10 && rank == 0 && !lost.exchange(true)) f.Lose(1);
      std::vector<float> rows(all.size() * 4, static_cast<float>(rank + 1));
      Tensor r = Tensor::FromVector(rows, Shape({static_cast<int64_t>(all.size()), 4}));
      KV_RETURN_IF_ERROR(kv->PushRowSparse("emb", kv_test::Ids(all), r));
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    Tensor got = Tensor::Zeros({static_cast<int64_t>(all.size()), 4});
    KV_RETURN_IF_ERROR(kv->RowSparsePull("emb", kv_test::Ids(all), got));
    // 20 pushes of 1 and 20 of 2 on every element.
    for (float v : got.ToVector()) {
      if (v != -60.0f) return Status::Internal("row value " + std::to_string(v) + ", want -60");
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Both copies of a range gone: the job ends, naming the range.
TEST(DistKVStoreReplicaTest, ARangeWithoutACopyEndsTheJob) {
  DistFixture f(3, 1, {{"KVTRAIN_BIGARRAY_BOUND", "10"}}, /*server_replicas=*/1);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int /*rank*/) -> Status {
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {kv_test::Filled(300, 0)}));
    Tensor out = Tensor::Zeros({300});
    KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {kv_test::Filled(300, 1)}, {out}, 0));
    f.Lose(1);
    f.Lose(2);
    for (int t = 0; t < 100; ++t) {
      KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {kv_test::Filled(300, 1)}, {out}, 0));
    }
    return Status::Internal("the job went on without key range 1");
  });
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("has no copy left"));
  EXPECT_THAT(s.message(), HasSubstr("KVTRAIN_SERVER_REPLICAS=1"));
}

}  // namespace
}  // namespace kvtrain
