// The factory and the local/device stores.
#include <gtest/gtest.h>

#include "base/file.h"
#include "kvstore/kvstore.h"

namespace kvtrain {
namespace {

Tensor Vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector(v, {n});
}

std::unique_ptr<KVStore> Make(const std::string& type) {
  StatusOr<std::unique_ptr<KVStore>> kv = KVStore::Create(type);
  EXPECT_TRUE(kv.ok()) << kv.status();
  return std::move(kv).value();
}

std::string Tmp(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(KVStoreFactoryTest, UnknownTypeListsTheValidOnes) {
  StatusOr<std::unique_ptr<KVStore>> kv = KVStore::Create("dist_sink");
  ASSERT_FALSE(kv.ok());
  EXPECT_EQ(kv.status().message(),
            "unknown KVStore type \"dist_sink\"; valid types: local, device, "
            "dist_sync, dist_device_sync, dist_async, dist_ssp, dist_allreduce");
}

TEST(KVStoreFactoryTest, DistTypesNeedAJob) {
  KVStoreOptions opts;
  opts.env = MapEnv({});
  StatusOr<std::unique_ptr<KVStore>> kv = KVStore::Create("dist_sync", opts);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("DMLC_ROLE is not set"), std::string::npos);
  opts.env = MapEnv({{"DMLC_ROLE", "worker"}, {"DMLC_NUM_WORKER", "two"}});
  EXPECT_NE(KVStore::Create("dist_async", opts).status().message().find("DMLC_PS_ROOT_URI"),
            std::string::npos);
  // A distributed store without the job's key (or KVTRAIN_INSECURE=1).
  opts.env = MapEnv({{"DMLC_ROLE", "worker"}, {"DMLC_PS_ROOT_URI", "127.0.0.1"},
                     {"DMLC_PS_ROOT_PORT", "9"}, {"DMLC_NUM_WORKER", "1"},
                     {"DMLC_NUM_SERVER", "1"}});
  EXPECT_NE(KVStore::Create("dist_sync", opts).status().message().find(
                "no job key: set KVTRAIN_JOB_KEY"),
            std::string::npos);
}

class LocalKVStoreTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LocalKVStoreTest, PushSumsPullBroadcasts) {
  auto kv = Make(GetParam());
  EXPECT_EQ(kv->type(), GetParam());
  EXPECT_EQ(kv->rank(), 0);
  EXPECT_EQ(kv->num_workers(), 1);
  ASSERT_TRUE(kv->Init({3, "fc1_weight"}, {Vec({1, 2}), Vec({0, 0, 0})}).ok());
  Tensor out = Tensor::Zeros({2});
  ASSERT_TRUE(kv->Pull({3}, {out}).ok());
  EXPECT_EQ(out.ToVector(), std::vector<float>({1, 2}));
  // Two values of one key (two devices) are summed; no updater: the stored
  // value becomes the sum.
  ASSERT_TRUE(kv->Push({"fc1_weight", "fc1_weight"},
                       {Vec({1, 2, 3}), Vec({10, 20, 30})}).ok());
  Tensor a = Tensor::Zeros({3}), b = Tensor::Zeros({3});
  ASSERT_TRUE(kv->Pull({"fc1_weight", "fc1_weight"}, {a, b}).ok());
  EXPECT_EQ(a.ToVector(), std::vector<float>({11, 22, 33}));
  EXPECT_EQ(b.ToVector(), a.ToVector());
}

TEST_P(LocalKVStoreTest, UpdaterAndOptimizer) {
  auto kv = Make(GetParam());
  ASSERT_TRUE(kv->Init({0}, {Vec({1, 1})}).ok());
  ASSERT_TRUE(kv->SetUpdater([](const Key& key, const Tensor& grad, Tensor* w) {
                  EXPECT_EQ(key.ToString(), "0");
                  std::vector<float> v = w->ToVector(), g = grad.ToVector();
                  for (size_t i = 0; i < v.size(); ++i) v[i] += 2 * g[i];
                  return w->CopyFrom(Vec(v));
                }).ok());
  Tensor out = Tensor::Zeros({2});
  ASSERT_TRUE(kv->PushPull({0}, {Vec({1, 2})}, {out}).ok());
  EXPECT_EQ(out.ToVector(), std::vector<float>({3, 5}));
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(0.5f);
  ASSERT_TRUE(kv->SetOptimizer(sgd).ok());
  ASSERT_TRUE(kv->PushPull({0}, {Vec({2, 4})}, {out}).ok());
  EXPECT_EQ(out.ToVector(), std::vector<float>({2, 3}));  // w -= 0.5 g
}

TEST_P(LocalKVStoreTest, OneValueIsUpdatedFromAsTwoSummedAre) {
  // One pushed value is read by the optimizer where it lies; two are
  // summed first. Both give the same weights, and no push alters its values.
  proto::OptimizerSpec mom;
  mom.set_type(proto::OptimizerSpec::SGD);
  mom.set_learning_rate(0.25f);
  mom.set_momentum(0.5f);
  mom.set_weight_decay(0.125f);
  auto one = Make(GetParam()), two = Make(GetParam());
  for (KVStore* kv : {one.get(), two.get()}) {
    ASSERT_TRUE(kv->Init({"w"}, {Vec({1, -2, 3})}).ok());
    ASSERT_TRUE(kv->SetOptimizer(mom).ok());
  }
  Tensor a = Tensor::Zeros({3}), b = Tensor::Zeros({3});
  for (int step = 0; step < 3; ++step) {
    const float s = static_cast<float>(step + 1);
    Tensor grad = Vec({4 * s, -2 * s, 1}), half1 = Vec({2 * s, -s, 0.5f}),
           half2 = Vec({2 * s, -s, 0.5f});
    ASSERT_TRUE(one->PushPull({"w"}, {grad}, {a}).ok());
    ASSERT_TRUE(two->PushPull({"w", "w"}, {half1, half2}, {b, b}).ok());
    EXPECT_EQ(grad.ToVector(), std::vector<float>({4 * s, -2 * s, 1}));
    EXPECT_EQ(half1.ToVector(), std::vector<float>({2 * s, -s, 0.5f}));
    EXPECT_EQ(a.ToVector(), b.ToVector()) << "step " << step;
  }
  EXPECT_NE(a.ToVector(), std::vector<float>({1, -2, 3}));
}

TEST_P(LocalKVStoreTest, OptimizerStatesRoundTrip) {
  proto::OptimizerSpec mom;
  mom.set_type(proto::OptimizerSpec::SGD);
  mom.set_learning_rate(1.0f);
  mom.set_momentum(0.5f);
  auto run = [&](KVStore* kv, int steps) {
    Tensor out = Tensor::Zeros({1});
    for (int i = 0; i < steps; ++i) {
      EXPECT_TRUE(kv->PushPull({"w"}, {Vec({1})}, {out}).ok());
    }
    return out.ToVector()[0];
  };
  auto a = Make(GetParam());
  ASSERT_TRUE(a->Init({"w"}, {Vec({0})}).ok());
  ASSERT_TRUE(a->SetOptimizer(mom).ok());
  run(a.get(), 2);
  const std::string path = Tmp("states_" + GetParam());
  ASSERT_TRUE(a->SaveOptimizerStates(path).ok());
  const float uninterrupted = run(a.get(), 2);
  // A new store starting from the saved weight and states continues alike.
  auto c = Make(GetParam());
  ASSERT_TRUE(c->Init({"w"}, {Vec({-2.5f})}).ok());  // weight after 2 steps
  ASSERT_TRUE(c->SetOptimizer(mom).ok());
  ASSERT_TRUE(c->LoadOptimizerStates(path).ok());
  EXPECT_FLOAT_EQ(run(c.get(), 2), uninterrupted);
}

TEST_P(LocalKVStoreTest, BadInputNamesKeyAndShapes) {
  auto kv = Make(GetParam());
  ASSERT_TRUE(kv->Init({"w"}, {Vec({1, 2})}).ok());
  EXPECT_EQ(kv->Push({"nope"}, {Vec({1})}).message(),
            "key nope: was never initialised (call Init first)");
  EXPECT_EQ(kv->Push({"w"}, {Vec({1, 2, 3})}).message(),
            "key w: pushed shape (3) but it was initialised with (2)");
  EXPECT_EQ(kv->Pull({"w"}, {Tensor::Zeros({5})}).message(),
            "key w: pull into shape (5) but the value has shape (2)");
  EXPECT_EQ(kv->Init({"w"}, {Vec({1, 2})}).message(), "key w: already initialised");
  EXPECT_EQ(kv->Push({"w", "x"}, {Vec({1, 2})}).message(), "push: 2 keys but 1 tensors");
  EXPECT_EQ(kv->Push({"w"}, {Tensor::Zeros({2}, DType::kInt32)}).message(),
            "key w: push got a int32 tensor; KVStore values are float32");
  EXPECT_EQ(kv->Push({-1}, {Vec({1})}).message(),
            "key -1: int keys must be >= 0 (or use a name)");
  EXPECT_FALSE(kv->Wait(12345).ok());
  EXPECT_EQ(kv->SaveOptimizerStates(Tmp("x")).code(), Status::Code::kFailedPrecondition);
  EXPECT_EQ(kv->RunServer().code(), Status::Code::kFailedPrecondition);
  ASSERT_TRUE(WriteChecksummedFile(Tmp("garbage"), "not a states file").ok());
  proto::OptimizerSpec sgd;
  sgd.set_type(proto::OptimizerSpec::SGD);
  sgd.set_learning_rate(0.1f);
  ASSERT_TRUE(kv->SetOptimizer(sgd).ok());
  EXPECT_NE(kv->LoadOptimizerStates(Tmp("garbage")).message().find(
                "not an optimizer states file"),
            std::string::npos);
  // Without the checksum trailer (cut, or not kvtrain's): refused, named.
  ASSERT_TRUE(WriteFileAtomic(Tmp("plain"), "not a states file").ok());
  EXPECT_EQ(kv->LoadOptimizerStates(Tmp("plain")).message(),
            Tmp("plain") + ": no checksum trailer (cut short, corrupt, or not "
                           "written by this version of kvtrain)");
}

INSTANTIATE_TEST_SUITE_P(Types, LocalKVStoreTest, ::testing::Values("local", "device"));

}  // namespace
}  // namespace kvtrain
