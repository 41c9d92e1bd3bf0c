// dist_allreduce on in-process groups: Init takes rank 0's values, pushes
// are summed across ranks whatever order threads push in, buckets seal
// deterministically, optimizers keep every rank's copy equal.
#include "kvstore/allreduce_kvstore.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>

#include "transport/collective/communicator.h"

namespace kvtrain {
namespace {

using Stores = std::vector<std::unique_ptr<KVStore>>;

Tensor Vec(const std::vector<float>& v) {
  return Tensor::FromVector(v, {static_cast<int64_t>(v.size())});
}

// n stores over a local group; `bucket_bytes` small to get many buckets.
Stores Make(int n, int64_t bucket_bytes) {
  collective::CommunicatorOptions o;
  o.timeout = std::chrono::seconds(30);
  auto group = collective::Communicator::CreateLocalGroup(n, o);
  EXPECT_TRUE(group.ok()) << group.status();
  Stores out;
  if (!group.ok()) return out;
  KVStoreOptions opts;
  opts.env = MapEnv({{"KVTRAIN_ALLREDUCE_BUCKET_BYTES", std::to_string(bucket_bytes)},
                     {"KVTRAIN_KVSTORE_TIMEOUT", "30"}});
  for (int r = 0; r < n; ++r) {
    opts.communicator = (*group)[r];
    auto kv = KVStore::Create("dist_allreduce", opts);
    EXPECT_TRUE(kv.ok()) << kv.status();
    if (kv.ok()) out.push_back(std::move(kv).value());
  }
  return out;
}

void OnEachRank(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { fn(r); });
  for (auto& t : threads) t.join();
}

TEST(AllreduceKVStoreTest, InitTakesRankZerosValuesAndPushesSum) {
  const int n = 3;
  Stores kv = Make(n, 8);  // every key its own bucket (or two)
  ASSERT_EQ(kv.size(), 3u);
  OnEachRank(n, [&](int r) {
    EXPECT_EQ(kv[r]->rank(), r);
    EXPECT_EQ(kv[r]->num_workers(), n);
    ASSERT_TRUE(kv[r]->Init({"a", "b", 7}, {Vec({float(r), 1}), Vec({2, 2, 2}),
                                             Vec({float(10 * r)})})
                    .ok());
    Tensor a = Tensor::Zeros({2}), b = Tensor::Zeros({3}), c = Tensor::Zeros({1});
    ASSERT_TRUE(kv[r]->Pull({"a", "b", 7}, {a, b, c}).ok());
    EXPECT_EQ(a.ToVector(), std::vector<float>({0, 1}));
    EXPECT_EQ(c.ToVector(), std::vector<float>({0}));
    // No updater: the value becomes the sum of every rank's push; a key
    // pushed twice (two devices) is summed locally first.
    ASSERT_TRUE(kv[r]->PushPull({"a", "a", "b", 7},
                                {Vec({1, float(r)}), Vec({1, 0}), Vec({1, 2, 3}), Vec({1})},
                                {a, a, b, c})
                    .ok());
    EXPECT_EQ(a.ToVector(), std::vector<float>({6, 3}));
    EXPECT_EQ(b.ToVector(), std::vector<float>({3, 6, 9}));
    EXPECT_EQ(c.ToVector(), std::vector<float>({3}));
    ASSERT_TRUE(kv[r]->Finalize().ok());
  });
}

// Threads push keys in a different order on every rank, as engine threads
// do; the buckets still match, and the optimizer's results agree.
TEST(AllreduceKVStoreTest, AnyPushOrderGivesTheSameResult) {
  const int n = 2, keys = 12;
  Stores kv = Make(n, 64);  // a few keys per bucket
  ASSERT_EQ(kv.size(), 2u);
  std::vector<std::vector<float>> final(n);
  OnEachRank(n, [&](int r) {
    std::vector<Key> ks;
    std::vector<Tensor> init;
    for (int k = 0; k < keys; ++k) {
      ks.push_back("w" + std::to_string(k));
      init.push_back(Vec(std::vector<float>(k + 3, 1.0f)));
    }
    ASSERT_TRUE(kv[r]->Init(ks, init).ok());
    proto::OptimizerSpec sgd;
    sgd.set_type(proto::OptimizerSpec::SGD);
    sgd.set_learning_rate(0.5f);
    sgd.set_momentum(0.9f);
    ASSERT_TRUE(kv[r]->SetOptimizer(sgd).ok());
    std::mt19937 rng(r + 1);
    std::vector<Tensor> weights;
    for (int k = 0; k < keys; ++k) weights.push_back(Tensor::Zeros({k + 3}));
    for (int step = 0; step < 3; ++step) {
      std::vector<int> order(keys);
      for (int k = 0; k < keys; ++k) order[k] = k;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<KVHandle> handles(keys);
      std::vector<std::thread> pushers;
      for (int t = 0; t < 3; ++t) {
        pushers.emplace_back([&, t] {
          for (int i = t; i < keys; i += 3) {
            const int k = order[i];
            std::vector<float> g(k + 3, float(r + 1) * (step + 1));
            auto h = kv[r]->PushPullAsync({ks[k]}, {Vec(g)}, {weights[k]}, -k);
            ASSERT_TRUE(h.ok());
            handles[k] = *h;
          }
        });
      }
      for (auto& p : pushers) p.join();
      for (int k = 0; k < keys; ++k) ASSERT_TRUE(kv[r]->Wait(handles[k]).ok());
    }
    for (const Tensor& w : weights) {
      for (float v : w.ToVector()) final[r].push_back(v);
    }
    ASSERT_TRUE(kv[r]->Finalize().ok());
  });
  ASSERT_EQ(final[0], final[1]);
  // Momentum SGD by hand for one element: g = 3, 6, 9 (sum over ranks).
  float w = 1, m = 0;
  for (float g : {3.f, 6.f, 9.f}) {
    m = 0.9f * m - 0.5f * g;
    w += m;
  }
  EXPECT_NEAR(final[0][0], w, 1e-4);
}

TEST(AllreduceKVStoreTest, PartialAndRepeatedPushesSealInOrder) {
  const int n = 2;
  Stores kv = Make(n, 1 << 20);  // one bucket for all keys
  ASSERT_EQ(kv.size(), 2u);
  OnEachRank(n, [&](int r) {
    ASSERT_TRUE(kv[r]->Init({0, 1, 2}, {Vec({0}), Vec({0}), Vec({0})}).ok());
    Tensor out = Tensor::Zeros({1});
    // Only key 1 pushed: the Wait seals the bucket with it alone.
    ASSERT_TRUE(kv[r]->PushPull({1}, {Vec({float(r + 1)})}, {out}).ok());
    EXPECT_EQ(out.ToVector()[0], 3);
    // Key 2 pushed twice before any pull: two rounds.
    ASSERT_TRUE(kv[r]->Push({2}, {Vec({1})}).ok());
    auto h = kv[r]->PushAsync({2}, {Vec({10})});
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(kv[r]->Wait(*h).ok());
    ASSERT_TRUE(kv[r]->Pull({2}, {out}).ok());
    EXPECT_EQ(out.ToVector()[0], 20);
    ASSERT_TRUE(kv[r]->Barrier().ok());
    EXPECT_EQ(kv[r]->Push({9}, {Vec({1})}).code(), Status::Code::kNotFound);
    ASSERT_TRUE(kv[r]->Finalize().ok());
  });
}

TEST(AllreduceKVStoreTest, StatesLoadedOnRankZeroReachEveryRankAtBarrier) {
  const int n = 2;
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/states";
  proto::OptimizerSpec mom;
  mom.set_type(proto::OptimizerSpec::SGD);
  mom.set_learning_rate(1.0f);
  mom.set_momentum(0.5f);
  {
    Stores kv = Make(n, 1 << 20);
    ASSERT_EQ(kv.size(), 2u);
    OnEachRank(n, [&](int r) {
      ASSERT_TRUE(kv[r]->Init({"w"}, {Vec({0})}).ok());
      ASSERT_TRUE(kv[r]->SetOptimizer(mom).ok());
      Tensor out = Tensor::Zeros({1});
      ASSERT_TRUE(kv[r]->PushPull({"w"}, {Vec({1})}, {out}).ok());
      if (r == 0) {
        ASSERT_TRUE(kv[r]->SaveOptimizerStates(path).ok());
      }
      ASSERT_TRUE(kv[r]->Finalize().ok());
    });
  }
  Stores kv = Make(n, 1 << 20);
  ASSERT_EQ(kv.size(), 2u);
  std::vector<float> got(n);
  OnEachRank(n, [&](int r) {
    ASSERT_TRUE(kv[r]->Init({"w"}, {Vec({-2})}).ok());
    ASSERT_TRUE(kv[r]->SetOptimizer(mom).ok());
    if (r == 0) {
      ASSERT_TRUE(kv[r]->LoadOptimizerStates(path).ok());
    }
    ASSERT_TRUE(kv[r]->Barrier().ok());
    Tensor out = Tensor::Zeros({1});
    ASSERT_TRUE(kv[r]->PushPull({"w"}, {Vec({1})}, {out}).ok());
    got[r] = out.ToVector()[0];
    ASSERT_TRUE(kv[r]->Finalize().ok());
  });
  // Momentum after step 1 was -2; step 2: m = 0.5 * -2 - 2 = -3.
  EXPECT_EQ(got[0], -5);
  EXPECT_EQ(got[1], -5);
}

// 2bit, threshold 0.5: even ranks push 0.25 every step and send 0, +0.5,
// 0, +0.5; odd ranks push -0.375 and send 0, -0.5, -0.5, -0.5 (compression.h).
// The gathered encodings sum to the same closed form on every rank.
void TwoBitSums(int n, const std::vector<float>& want, int64_t min_bytes = 0) {
  Stores kv = Make(n, 64);  // several buckets
  ASSERT_EQ(kv.size(), static_cast<size_t>(n));
  const std::vector<int64_t> sizes = {1, 37, 5000};
  OnEachRank(n, [&](int r) {
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::TWO_BIT);
    spec.set_threshold(0.5f);
    spec.set_min_bytes(min_bytes);
    ASSERT_TRUE(kv[r]->SetGradientCompression(spec).ok());
    std::vector<Key> keys;
    std::vector<Tensor> init;
    for (size_t k = 0; k < sizes.size(); ++k) {
      keys.push_back("k" + std::to_string(k));
      init.push_back(Tensor::Zeros({sizes[k]}));
    }
    ASSERT_TRUE(kv[r]->Init(keys, init).ok());
    for (size_t t = 0; t < want.size(); ++t) {
      std::vector<Tensor> grads, outs;
      for (int64_t size : sizes) {
        grads.push_back(Tensor::FromVector(
            std::vector<float>(size, r % 2 ? -0.375f : 0.25f), {size}));
        outs.push_back(Tensor::Zeros({size}));
      }
      ASSERT_TRUE(kv[r]->PushPull(keys, grads, outs).ok());
      for (size_t k = 0; k < sizes.size(); ++k) {
        // Keys below min_bytes are summed exactly.
        const float exact = (n / 2) * -0.375f + ((n + 1) / 2) * 0.25f;
        EXPECT_EQ(outs[k].ToVector(),
                  std::vector<float>(sizes[k], sizes[k] * 4 < min_bytes ? exact : want[t]))
            << "rank " << r << " step " << t + 1 << " key " << k;
      }
    }
    ASSERT_TRUE(kv[r]->Finalize().ok());
  });
}

TEST(AllreduceKVStoreTest, TwoBitSumsAreClosedForm) { TwoBitSums(2, {0, 0, -0.5f, 0}); }

TEST(AllreduceKVStoreTest, TwoBitSumsOverThreeRanks) { TwoBitSums(3, {0, 0.5f, -0.5f, 0.5f}); }

TEST(AllreduceKVStoreTest, KeysBelowMinBytesAreSummedExactly) {
  TwoBitSums(2, {0, 0, -0.5f, 0}, 200);
}

TEST(AllreduceKVStoreTest, Fp16SumsTheRoundedGradients) {
  Stores kv = Make(2, 4 << 20);
  ASSERT_EQ(kv.size(), 2u);
  OnEachRank(2, [&](int r) {
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::FP16);
    ASSERT_TRUE(kv[r]->SetGradientCompression(spec).ok());
    ASSERT_TRUE(kv[r]->Init({"w"}, {Tensor::Zeros({3})}).ok());
    Tensor out = Tensor::Zeros({3});
    ASSERT_TRUE(kv[r]->PushPull({"w"}, {Vec({0.1f, 0.2f, 1.0f})}, {out}).ok());
    // 0.1 and 0.2 as halves: 0.0999755859375 and 0.199951171875.
    EXPECT_EQ(out.ToVector(), std::vector<float>({0.199951171875f, 0.39990234375f, 2.0f}));
    ASSERT_TRUE(kv[r]->Finalize().ok());
  });
}

TEST(AllreduceKVStoreTest, HalfPullsAreRefused) {
  // No weights are pulled: asking for halves back is an error naming why.
  KVStoreOptions opts;
  opts.env = MapEnv({});
  auto kv = KVStore::Create("dist_allreduce", opts);
  ASSERT_TRUE(kv.ok()) << kv.status();
  proto::GradientCompression spec;
  spec.set_type(proto::GradientCompression::TWO_BIT);
  spec.set_threshold(0.5f);
  spec.set_pull(proto::GradientCompression::PULL_FP16);
  const Status s = (*kv)->SetGradientCompression(spec);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("pull fp16 does not apply to dist_allreduce"), std::string::npos)
      << s;
  spec.set_pull(proto::GradientCompression::PULL_DEFAULT);
  EXPECT_TRUE((*kv)->SetGradientCompression(spec).ok());
}

TEST(AllreduceKVStoreTest, WithoutALauncherIsAGroupOfOne) {
  KVStoreOptions opts;
  opts.env = MapEnv({});
  auto kv = KVStore::Create("dist_allreduce", opts);
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ((*kv)->num_workers(), 1);
  ASSERT_TRUE((*kv)->Init({0}, {Vec({1, 2})}).ok());
  Tensor out = Tensor::Zeros({2});
  ASSERT_TRUE((*kv)->PushPull({0}, {Vec({3, 4})}, {out}).ok());
  EXPECT_EQ(out.ToVector(), std::vector<float>({3, 4}));
  opts.env = MapEnv({{"DMLC_ROLE", "server"}});
  EXPECT_NE(KVStore::Create("dist_allreduce", opts).status().message().find("-s 0"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtrain
