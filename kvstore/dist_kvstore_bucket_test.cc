// The dist stores' buckets and pieces inside one process: a step's small
// keys travel as one request per server, a Wait or a Flush sends the open
// bucket, and a key pushed twice before a Wait keeps both steps.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "kvstore/dist_fixture_testlib.h"
#include "kvstore/kvstore.h"

namespace kvtrain {
namespace {

using kv_test::DistFixture;
using kv_test::Filled;

// A trainer's step: one push-pull per parameter, issued as backward makes
// each gradient, then every wait. Small keys travel together, one request
// per server, up to KVTRAIN_PS_BUCKET_BYTES; a larger key is cut into
// pieces, each sent as soon as the next would overfill its bucket.
int64_t KVRequestsOfAStep(const std::string& bucket_bytes, int64_t* big_alone) {
  DistFixture f(1, 1, {{"KVTRAIN_PS_BUCKET_BYTES", bucket_bytes}});
  *big_alone = 0;
  kv_test::RequestTap tap(&f, [big_alone](size_t keys, size_t bytes) {
    if (keys == 1 && bytes >= 4 * 10000) ++*big_alone;
  });
  const std::vector<int64_t> sizes = {10, 640, 8192, 64, 20000, 128};
  Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    std::vector<Key> keys;
    std::vector<Tensor> init;
    for (size_t i = 0; i < sizes.size(); ++i) {
      keys.push_back("p" + std::to_string(i));
      init.push_back(Filled(sizes[i], 1.0f));
    }
    KV_RETURN_IF_ERROR(kv->Init(keys, init));
    std::vector<Tensor> outs;
    for (int64_t n : sizes) outs.push_back(Tensor::Zeros({n}));
    tap.Counting(true);
    std::vector<KVHandle> handles;
    for (size_t i = 0; i < sizes.size(); ++i) {
      KV_ASSIGN_OR_RETURN(KVHandle h,
                          kv->PushPullAsync({keys[i]}, {Filled(sizes[i], 2.0f)},
                                            {outs[i]}, -static_cast<int>(i)));
      handles.push_back(h);
    }
    for (KVHandle h : handles) KV_RETURN_IF_ERROR(kv->Wait(h));
    tap.Counting(false);
    // No optimizer: the step's sum (one worker) is the new value.
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::vector<float> got = outs[i].ToVector();
      if (got.front() != 2.0f || got.back() != 2.0f) {
        return Status::Internal("key " + keys[i].ToString() + ": got " +
                                std::to_string(got.back()));
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  return tap.requests();
}

TEST(DistKVStoreTest, SmallKeysOfAStepTravelAsOneRequest) {
  int64_t big_alone = 0;
  // 10 + 640 + 8192 + 64 floats wait; the 80 KB key is cut into 2 pieces
  // of 40 KB: the first would overfill the bucket, which leaves; the second
  // sends the first alone; the wait sends the second with the last key (128
  // floats).
  EXPECT_EQ(KVRequestsOfAStep("65536", &big_alone), 3);
  EXPECT_EQ(big_alone, 1);
  EXPECT_EQ(KVRequestsOfAStep("0", &big_alone), 6);
  EXPECT_EQ(KVRequestsOfAStep("1000000000", &big_alone), 1);
  EXPECT_EQ(big_alone, 0);
}

// Waiting for one key sends what waits in the open bucket, though that
// handle does not need it: otherwise a step's last small key would leave
// only when waited for, a round trip after the keys waited for before it.
TEST(DistKVStoreTest, AWaitSendsTheOpenBucket) {
  // 1024 floats fill a bucket of 4096 bytes and leave at once; the 10 floats
  // after them wait in the next one.
  DistFixture f(1, 1, {{"KVTRAIN_PS_BUCKET_BYTES", "4096"}});
  std::mutex mu;
  std::vector<size_t> sent;  // bytes of each data request, in order
  f.job().net()->SetTap([&](const ps::RawMessage& raw) {
    size_t keys = 0, bytes = 0;
    if (!ps::IsDataRequest(raw, &keys, &bytes)) return;
    std::lock_guard<std::mutex> l(mu);
    sent.push_back(bytes);
  });
  Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(
        kv->Init({"big", "small"}, {Filled(1024, 1.0f), Filled(10, 1.0f)}));
    {
      std::lock_guard<std::mutex> l(mu);
      sent.clear();
    }
    Tensor big = Tensor::Zeros({1024}), small = Tensor::Zeros({10});
    KV_ASSIGN_OR_RETURN(
        KVHandle hb,
        kv->PushPullAsync({"big"}, {Filled(1024, 2.0f)}, {big}, 0));
    KV_ASSIGN_OR_RETURN(
        KVHandle hs,
        kv->PushPullAsync({"small"}, {Filled(10, 3.0f)}, {small}, -1));
    {
      std::lock_guard<std::mutex> l(mu);
      if (sent.size() != 1) {
        return Status::Internal(
            "before any wait: " + std::to_string(sent.size()) +
            " requests sent, expected the full bucket's 1");
      }
    }
    KV_RETURN_IF_ERROR(kv->Wait(hb));
    {
      std::lock_guard<std::mutex> l(mu);
      if (sent.size() != 2) {
        return Status::Internal(
            "after waiting for 'big': " + std::to_string(sent.size()) +
            " requests sent, expected 2 ('small' too)");
      }
    }
    KV_RETURN_IF_ERROR(kv->Wait(hs));
    if (big.ToVector().back() != 2.0f || small.ToVector().back() != 3.0f) {
      return Status::Internal(
          "wrong values: big " + std::to_string(big.ToVector().back()) +
          ", small " + std::to_string(small.ToVector().back()));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  f.job().net()->SetTap(nullptr);
}

// Flush sends the open bucket without waiting for anything (a trainer's
// step calls it right after its last push-pull); the values are the same.
TEST(DistKVStoreTest, FlushSendsTheOpenBucketWithoutAWait) {
  DistFixture f(1, 1, {{"KVTRAIN_PS_BUCKET_BYTES", "4096"}});
  std::mutex mu;
  std::condition_variable cv;
  int sent = 0;
  f.job().net()->SetTap([&](const ps::RawMessage& raw) {
    size_t keys = 0, bytes = 0;
    if (!ps::IsDataRequest(raw, &keys, &bytes)) return;
    std::lock_guard<std::mutex> l(mu);
    ++sent;
    cv.notify_all();
  });
  Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    KV_RETURN_IF_ERROR(
        kv->Init({"a", "b"}, {Filled(10, 1.0f), Filled(20, 1.0f)}));
    {
      std::lock_guard<std::mutex> l(mu);
      sent = 0;
    }
    Tensor a = Tensor::Zeros({10}), b = Tensor::Zeros({20});
    KV_ASSIGN_OR_RETURN(KVHandle ha,
                        kv->PushPullAsync({"a"}, {Filled(10, 2.0f)}, {a}, 0));
    KV_ASSIGN_OR_RETURN(KVHandle hb,
                        kv->PushPullAsync({"b"}, {Filled(20, 3.0f)}, {b}, -1));
    {
      std::unique_lock<std::mutex> l(mu);
      if (cv.wait_for(l, std::chrono::milliseconds(200),
                      [&] { return sent > 0; })) {
        return Status::Internal("the bucket left before Flush");
      }
    }
    kv->Flush();
    {
      std::unique_lock<std::mutex> l(mu);
      if (!cv.wait_for(l, std::chrono::seconds(20), [&] { return sent > 0; })) {
        return Status::Internal("Flush sent nothing");
      }
      if (sent != 1)
        return Status::Internal(std::to_string(sent) + " requests, expected 1");
    }
    kv->Flush();  // nothing open: a no-op
    KV_RETURN_IF_ERROR(kv->Wait(ha));
    KV_RETURN_IF_ERROR(kv->Wait(hb));
    if (a.ToVector().back() != 2.0f || b.ToVector().back() != 3.0f) {
      return Status::Internal("wrong values: a " +
                              std::to_string(a.ToVector().back()) + ", b " +
                              std::to_string(b.ToVector().back()));
    }
    std::lock_guard<std::mutex> l(mu);
    return sent == 1 ? Status::OK()
                     : Status::Internal(std::to_string(sent) +
                                        " requests after the waits");
  });
  EXPECT_TRUE(s.ok()) << s;
  f.job().net()->SetTap(nullptr);
}

// Buckets keep each key's own step: a key pushed again before the first
// push's answer goes out in a second request, and sync and async servers
// apply both in order.
TEST(DistKVStoreTest, AKeyPushedTwiceBeforeAWaitKeepsItsSteps) {
  for (const std::string type : {"dist_sync", "dist_async"}) {
    DistFixture f(2, 2);
    Status s = f.Run(type, [&](KVStore* kv, int rank) -> Status {
      KV_RETURN_IF_ERROR(kv->Init({"a", "b"}, {Filled(5, 0), Filled(7, 0)}));
      proto::OptimizerSpec sgd;
      sgd.set_type(proto::OptimizerSpec::SGD);
      sgd.set_learning_rate(1.0f);
      KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
      Tensor a1 = Tensor::Zeros({5}), b1 = Tensor::Zeros({7}),
             a2 = Tensor::Zeros({5});
      KV_ASSIGN_OR_RETURN(
          KVHandle h1, kv->PushPullAsync(
                           {"a", "b"}, {Filled(5, 1), Filled(7, 1)}, {a1, b1}));
      KV_ASSIGN_OR_RETURN(KVHandle h2,
                          kv->PushPullAsync({"a"}, {Filled(5, 1)}, {a2}));
      KV_RETURN_IF_ERROR(kv->Wait(h2));
      KV_RETURN_IF_ERROR(kv->Wait(h1));
      KV_RETURN_IF_ERROR(kv->Barrier());
      Tensor a = Tensor::Zeros({5});
      KV_RETURN_IF_ERROR(kv->Pull({"a"}, {a}));
      // Every worker pushed `a` twice with gradient 1 and lr 1.
      if (a.ToVector()[4] != -4.0f) {
        return Status::Internal(type +
                                ": a = " + std::to_string(a.ToVector()[4]));
      }
      if (type == "dist_sync" &&
          (a1.ToVector()[0] != -2.0f || a2.ToVector()[0] != -4.0f ||
           b1.ToVector()[6] != -2.0f)) {
        return Status::Internal("sync answers " +
                                std::to_string(a1.ToVector()[0]) + ", " +
                                std::to_string(a2.ToVector()[0]) + ", " +
                                std::to_string(b1.ToVector()[6]));
      }
      return Status::OK();
    });
    EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace kvtrain
