// The dist stores' gradient compression end to end inside one process
// (kvstore/dist_kvstore_compression.cc and the servers' decoding): closed
// form sums, min_bytes, fp16 and half pulls, 1bit, dist_async, residual
// files and spec errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/file.h"
#include "kvstore/dist_fixture_testlib.h"

namespace kvtrain {
namespace {

using kv_test::DistFixture;
using kv_test::Filled;

// Gradient compression, closed form: threshold 0.5, rank 0 pushes 0.25 and
// rank 1 -0.375 every step. Rank 0 sends 0, +0.5, 0, +0.5 (its residual
// reaching the threshold every other step); rank 1 sends 0, -0.5, -0.5,
// -0.5. Without an optimizer a sync step's value is the servers' sum:
// 0, 0, -0.5, 0.
const std::vector<float> kTwoBitSums = {0.0f, 0.0f, -0.5f, 0.0f};

Status CompressedSums(KVStore* kv, int rank, const proto::GradientCompression& spec,
                      const std::vector<int64_t>& sizes,
                      const std::function<float(int step, size_t key, int64_t i)>& want) {
  KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
  std::vector<Key> keys;
  std::vector<Tensor> init;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back("k" + std::to_string(i));
    init.push_back(Filled(sizes[i], 1.0f));
  }
  KV_RETURN_IF_ERROR(kv->Init(keys, init));
  for (int t = 1; t <= static_cast<int>(kTwoBitSums.size()); ++t) {
    std::vector<Tensor> grads, outs;
    for (int64_t n : sizes) {
      grads.push_back(Filled(n, rank == 0 ? 0.25f : -0.375f));
      outs.push_back(Tensor::Zeros({n}));
    }
    KV_RETURN_IF_ERROR(kv->PushPull(keys, grads, outs));
    for (size_t k = 0; k < sizes.size(); ++k) {
      const std::vector<float> got = outs[k].ToVector();
      for (int64_t i = 0; i < sizes[k]; ++i) {
        if (got[i] != want(t, k, i)) {
          return Status::Internal("rank " + std::to_string(rank) + " step " +
                                  std::to_string(t) + " key " + keys[k].ToString() + "[" +
                                  std::to_string(i) + "]: got " + std::to_string(got[i]) +
                                  ", want " + std::to_string(want(t, k, i)));
        }
      }
    }
  }
  return Status::OK();
}

// Sizes with partial 2bit words; 5000 is cut into pieces (bound 1000).
const std::vector<int64_t> kCompressedSizes = {1, 37, 5000};

void TwoBitClosedForm(std::map<std::string, std::string> env) {
  env["KVTRAIN_BIGARRAY_BOUND"] = "1000";
  DistFixture f(2, 2, env);
  proto::GradientCompression spec;
  spec.set_type(proto::GradientCompression::TWO_BIT);
  spec.set_threshold(0.5f);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) {
    return CompressedSums(kv, rank, spec, kCompressedSizes,
                          [](int t, size_t, int64_t) { return kTwoBitSums[t - 1]; });
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, TwoBitServerSumsAreClosedForm) { TwoBitClosedForm({}); }

TEST(DistKVStoreTest, TwoBitWithoutBucketsIsTheSame) {
  TwoBitClosedForm({{"KVTRAIN_PS_BUCKET_BYTES", "0"}});
}

TEST(DistKVStoreTest, KeysBelowMinBytesTravelUncompressed) {
  // min_bytes 200: keys of 1 and 37 values (4 and 148 bytes) are summed
  // exactly (0.25 - 0.375), in the same buckets as the 2bit-encoded one.
  DistFixture f(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "1000"}});
  proto::GradientCompression spec;
  spec.set_type(proto::GradientCompression::TWO_BIT);
  spec.set_threshold(0.5f);
  spec.set_min_bytes(200);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) {
    return CompressedSums(kv, rank, spec, kCompressedSizes, [](int t, size_t k, int64_t) {
      return k < 2 ? -0.125f : kTwoBitSums[t - 1];
    });
  });
  EXPECT_TRUE(s.ok()) << s;
}

// Pieces are cut by what a push-pull moves on the wire: a key of 4000
// floats with pieces of 4000 bytes travels as 4 pieces uncompressed and as
// 2 of 2000 halves with fp16, each in a request of its own.
int64_t RequestsOfOnePushPull(proto::GradientCompression::Type type) {
  DistFixture f(1, 1, {{"KVTRAIN_PS_PIECE_BYTES", "4000"}});
  kv_test::RequestTap tap(&f);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    proto::GradientCompression spec;
    spec.set_type(type);
    if (type != proto::GradientCompression::NONE) {
      KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
    }
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(4000, 0.0f)}));
    tap.Counting(true);
    Tensor out = Tensor::Zeros({4000});
    KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(4000, 0.5f)}, {out}));
    tap.Counting(false);
    for (float v : out.ToVector()) {
      if (v != 0.5f) return Status::Internal("got " + std::to_string(v));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  return tap.requests();
}

TEST(DistKVStoreTest, PiecesAreCutByTheirBytesOnTheWire) {
  EXPECT_EQ(RequestsOfOnePushPull(proto::GradientCompression::NONE), 4);
  EXPECT_EQ(RequestsOfOnePushPull(proto::GradientCompression::FP16), 2);
}

TEST(DistKVStoreTest, Fp16PushesAndAnswersHalves) {
  // 0.25 - 0.375 = -0.125, exact in half; a value that is not exact
  // (0.1) comes back rounded to the nearest half.
  for (const std::string bucket : {"131072", "0"}) {
    DistFixture f(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "1000"}, {"KVTRAIN_PS_BUCKET_BYTES", bucket}});
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::FP16);
    const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) {
      return CompressedSums(kv, rank, spec, kCompressedSizes,
                            [](int, size_t, int64_t) { return -0.125f; });
    });
    EXPECT_TRUE(s.ok()) << "bucket bytes " << bucket << ": " << s;
  }
  DistFixture f(1, 1);
  const Status s = f.Run("dist_sync", [](KVStore* kv, int) -> Status {
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::FP16);
    KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(3, 0.0f)}));
    Tensor out = Tensor::Zeros({3});
    KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(3, 0.1f)}, {out}));
    for (float v : out.ToVector()) {
      if (v != 0.0999755859375f) return Status::Internal("got " + std::to_string(v));
    }
    // A plain pull answers the exact float32 value.
    KV_RETURN_IF_ERROR(kv->Pull({"w"}, {out}));
    for (float v : out.ToVector()) {
      if (v != 0.0999755859375f) return Status::Internal("pull got " + std::to_string(v));
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, TwoBitWithHalfPullsAnswersHalves) {
  // 2bit with threshold 0.1 sends 0.1f exactly; the server holds 0.1f.
  // pull fp16: the push-pull's answer is 0.1 as a half; a plain pull and a
  // key below min_bytes answer exact float32; without pull fp16 the
  // answer is exact. With and without buckets.
  for (const std::string bucket : {"131072", "0"}) {
    for (const bool half : {true, false}) {
      DistFixture f(1, 1, {{"KVTRAIN_PS_BUCKET_BYTES", bucket}});
      const Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
        proto::GradientCompression spec;
        spec.set_type(proto::GradientCompression::TWO_BIT);
        spec.set_threshold(0.1f);
        spec.set_min_bytes(40);
        if (half) spec.set_pull(proto::GradientCompression::PULL_FP16);
        KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
        KV_RETURN_IF_ERROR(kv->Init({"w", "b"}, {Filled(33, 0.0f), Filled(3, 0.0f)}));
        Tensor out = Tensor::Zeros({33}), outb = Tensor::Zeros({3});
        KV_RETURN_IF_ERROR(kv->PushPull({"w", "b"}, {Filled(33, 0.1f), Filled(3, 0.1f)},
                                        {out, outb}));
        const float want = half ? 0.0999755859375f : 0.1f;
        for (float v : out.ToVector()) {
          if (v != want) return Status::Internal("w got " + std::to_string(v));
        }
        for (float v : outb.ToVector()) {
          if (v != 0.1f) return Status::Internal("b got " + std::to_string(v));
        }
        KV_RETURN_IF_ERROR(kv->Pull({"w"}, {out}));
        for (float v : out.ToVector()) {
          if (v != 0.1f) return Status::Internal("pull got " + std::to_string(v));
        }
        return Status::OK();
      });
      EXPECT_TRUE(s.ok()) << "bucket bytes " << bucket << " half " << half << ": " << s;
    }
  }
}

TEST(DistKVStoreTest, SummedCodesComeBackAsExactLevels) {
  // Without an optimizer the servers hold each step's summed 2bit codes and
  // answer them as levels (2, 4 and 8 bits for 1, 2 and 3 workers): worker
  // r pushes -0.5, 0 or +0.5 by the r-th ternary digit of i, so the sums
  // take every value from -0.5N to 0.5N, and rank 0's NaN at 5 arrives as
  // NaN. With an optimizer the servers hold weights (1000 distinct values
  // here, too many for levels) and answer float32. With and without buckets,
  // the key cut into pieces.
  constexpr int64_t kN = 2001;
  for (const int workers : {1, 2, 3}) {
    for (const std::string bucket : {"131072", "0"}) {
      for (const bool optimizer : {false, true}) {
        DistFixture f(2, workers,
                      {{"KVTRAIN_PS_BUCKET_BYTES", bucket}, {"KVTRAIN_BIGARRAY_BOUND", "1000"}});
        const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
          proto::GradientCompression spec;
          spec.set_type(proto::GradientCompression::TWO_BIT);
          spec.set_threshold(0.5f);
          KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
          std::vector<float> init(kN);
          for (int64_t i = 0; i < kN; ++i) init[i] = static_cast<float>(i % 1000) * 0.001f;
          KV_RETURN_IF_ERROR(kv->Init({"w"}, {Tensor::FromVector(init, {kN})}));
          if (optimizer) {
            proto::OptimizerSpec sgd;
            sgd.set_type(proto::OptimizerSpec::SGD);
            sgd.set_learning_rate(1.0f);
            KV_RETURN_IF_ERROR(kv->SetOptimizer(sgd));
          }
          auto code = [](int r, int64_t i) {
            int64_t d = i;
            for (int k = 0; k < r; ++k) d /= 3;
            return static_cast<float>(d % 3 - 1) * 0.5f;
          };
          std::vector<float> g(kN);
          for (int64_t i = 0; i < kN; ++i) g[i] = code(rank, i);
          if (rank == 0) g[5] = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> w = init;
          for (int step = 1; step <= 2; ++step) {
            Tensor out = Tensor::Zeros({kN});
            KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Tensor::FromVector(g, {kN})}, {out}));
            const std::vector<float> got = out.ToVector();
            for (int64_t i = 0; i < kN; ++i) {
              float sum = 0.0f;
              for (int r = 0; r < workers; ++r) sum += code(r, i);
              if (i == 5) sum = std::numeric_limits<float>::quiet_NaN();
              const float want = optimizer ? (w[i] -= sum) : sum;
              if (!(got[i] == want || (std::isnan(got[i]) && std::isnan(want)))) {
                return Status::Internal("step " + std::to_string(step) + " [" +
                                        std::to_string(i) + "] got " + std::to_string(got[i]) +
                                        ", want " + std::to_string(want));
              }
            }
          }
          return Status::OK();
        });
        EXPECT_TRUE(s.ok()) << workers << " workers, bucket bytes " << bucket << ", optimizer "
                            << optimizer << ": " << s;
      }
    }
  }
}

TEST(DistKVStoreTest, LevelsOfASumThatIsNotCodesAreAnErrorNamingTheKey) {
  // Rank 0 compresses, rank 1 does not: the step's sum takes 40 values and
  // cannot come back to rank 0 as levels; its error names the key, and
  // rank 1 (float32 answers) goes on.
  Status rank0 = Status::Internal("rank 0 did not run");
  DistFixture f(1, 2);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int rank) -> Status {
    if (rank == 0) {
      proto::GradientCompression spec;
      spec.set_type(proto::GradientCompression::TWO_BIT);
      spec.set_threshold(0.5f);
      KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
    }
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(40, 0.0f)}));
    std::vector<float> g(40);
    for (size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) * 0.01f;
    Tensor out = Tensor::Zeros({40});
    const Status pp = kv->PushPull({"w"}, {Tensor::FromVector(g, {40})}, {out});
    if (rank == 0) {
      rank0 = pp;
      return Status::OK();
    }
    KV_RETURN_IF_ERROR(pp);
    return kv->Pull({"w"}, {out});
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_FALSE(rank0.ok());
  EXPECT_NE(rank0.message().find("key w"), std::string::npos) << rank0;
  EXPECT_NE(rank0.message().find("more than 16 distinct values"), std::string::npos) << rank0;
}

TEST(DistKVStoreTest, OneBitSendsSignsTimesTheMeanMagnitude) {
  // Rank 0 pushes 1, -3, 1, -3, ...: scale 2, so it sends +2, -2, ...;
  // rank 1 pushes 0.5 everywhere and sends it exactly. Step 1's sums are
  // 2.5 and -1.5.
  DistFixture f(1, 2);
  const Status s = f.Run("dist_sync", [](KVStore* kv, int rank) -> Status {
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::ONE_BIT);
    KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(33, 0.0f)}));
    std::vector<float> g(33, 0.5f);
    if (rank == 0) {
      for (size_t i = 0; i < g.size(); ++i) g[i] = i % 2 ? -3.0f : 1.0f;
    }
    Tensor out = Tensor::Zeros({33});
    KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Tensor::FromVector(g, {33})}, {out}));
    const std::vector<float> got = out.ToVector();
    for (size_t i = 0; i < got.size(); ++i) {
      // 17 ones and 16 minus-threes: mean |v| = (17 + 48) / 33.
      const float scale = static_cast<float>((17.0 + 48.0) / 33.0);
      const float want = (i % 2 ? -scale : scale) + 0.5f;
      if (got[i] != want) {
        return Status::Internal("[" + std::to_string(i) + "] got " + std::to_string(got[i]) +
                                ", want " + std::to_string(want));
      }
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, AsyncCompressedPushesAddUp) {
  // dist_async applies each push: after both workers' 4 steps the value is
  // 1 + the sum of everything sent (rank 0: 1, rank 1: -1.5) = 0.5.
  DistFixture f(2, 2, {{"KVTRAIN_BIGARRAY_BOUND", "1000"}});
  const Status s = f.Run("dist_async", [](KVStore* kv, int rank) -> Status {
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::TWO_BIT);
    spec.set_threshold(0.5f);
    KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
    KV_RETURN_IF_ERROR(kv->Init({"w"}, {Filled(5000, 1.0f)}));
    Tensor out = Tensor::Zeros({5000});
    for (int t = 0; t < 4; ++t) {
      KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(5000, rank == 0 ? 0.25f : -0.375f)},
                                      {out}));
    }
    KV_RETURN_IF_ERROR(kv->Barrier());
    KV_RETURN_IF_ERROR(kv->Pull({"w"}, {out}));
    for (float v : out.ToVector()) {
      if (v != 0.5f) return Status::Internal("got " + std::to_string(v) + ", want 0.5");
    }
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
}

TEST(DistKVStoreTest, CompressionSpecsAndResidualFilesAreChecked) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  DistFixture f(1, 1);
  const Status s = f.Run("dist_sync", [&](KVStore* kv, int) -> Status {
    proto::GradientCompression bad;
    bad.set_type(proto::GradientCompression::TWO_BIT);
    const Status zero = kv->SetGradientCompression(bad);
    EXPECT_NE(zero.message().find("threshold 0"), std::string::npos) << zero;
    proto::GradientCompression spec;
    spec.set_type(proto::GradientCompression::TWO_BIT);
    spec.set_threshold(0.5f);
    KV_RETURN_IF_ERROR(kv->SetGradientCompression(spec));
    KV_RETURN_IF_ERROR(kv->Init({"w", 3}, {Filled(20, 0.0f), Filled(2, 0.0f)}));
    const Status late = kv->SetGradientCompression(spec);
    EXPECT_NE(late.message().find("before Init"), std::string::npos) << late;
    Tensor out = Tensor::Zeros({20}), out3 = Tensor::Zeros({2});
    KV_RETURN_IF_ERROR(kv->PushPull({"w", 3}, {Filled(20, 0.25f), Filled(2, 0.75f)},
                                    {out, out3}));
    // Saved and restored: the residuals (0.25 and 0.25) carry on, so the
    // next push of 0.25 sends +0.5 for "w".
    KV_RETURN_IF_ERROR(kv->SaveResiduals(dir + "/r"));
    KV_RETURN_IF_ERROR(kv->PushPull({"w"}, {Filled(20, -0.25f)}, {out}));  // residual 0
    KV_RETURN_IF_ERROR(kv->LoadResiduals(dir + "/r"));
    KV_RETURN_IF_ERROR(kv->PushPull({"w", 3}, {Filled(20, 0.25f), Filled(2, 0.0f)},
                                    {out, out3}));
    EXPECT_EQ(out.ToVector(), std::vector<float>(20, 0.5f));
    EXPECT_EQ(out3.ToVector(), std::vector<float>(2, 0.0f));
    // Another spec's file is refused, naming both.
    proto::ResidualsFile file;
    std::string bytes;
    KV_ASSIGN_OR_RETURN(bytes, ReadChecksummedFile(dir + "/r"));
    EXPECT_TRUE(file.ParseFromString(bytes));
    file.mutable_spec()->set_threshold(0.25f);
    KV_RETURN_IF_ERROR(WriteChecksummedFile(dir + "/other", file.SerializeAsString()));
    const Status other = kv->LoadResiduals(dir + "/other");
    EXPECT_NE(other.message().find("saved with gradient compression 2bit threshold 0.25"),
              std::string::npos)
        << other;
    KV_RETURN_IF_ERROR(WriteFileAtomic(dir + "/cut", bytes.substr(0, bytes.size() / 2)));
    EXPECT_NE(kv->LoadResiduals(dir + "/cut").message().find(
                  dir + "/cut: no checksum trailer"),
              std::string::npos);
    // A checksummed file that is no residuals file.
    KV_RETURN_IF_ERROR(WriteChecksummedFile(dir + "/junk", "junk"));
    EXPECT_NE(kv->LoadResiduals(dir + "/junk").message().find("not a residuals file"),
              std::string::npos);
    // One flipped bit anywhere in a saved file.
    KV_ASSIGN_OR_RETURN(std::string raw, ReadWholeFile(dir + "/r"));
    raw[raw.size() / 2] ^= 0x01;
    KV_RETURN_IF_ERROR(WriteFileAtomic(dir + "/flipped", raw));
    EXPECT_NE(kv->LoadResiduals(dir + "/flipped").message().find(
                  dir + "/flipped: checksum mismatch"),
              std::string::npos);
    return Status::OK();
  });
  EXPECT_TRUE(s.ok()) << s;
  // Stores that send nothing refuse compression, naming themselves.
  auto local = KVStore::Create("local");
  ASSERT_TRUE(local.ok());
  proto::GradientCompression fp16;
  fp16.set_type(proto::GradientCompression::FP16);
  const Status l = (*local)->SetGradientCompression(fp16);
  EXPECT_NE(l.message().find("the 'local' store sends nothing"), std::string::npos) << l;
}

}  // namespace
}  // namespace kvtrain
