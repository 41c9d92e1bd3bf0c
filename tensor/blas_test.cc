// BLAS wrapper tests against a naive double-precision reference, run on the
// CPU and (as blas_test_gpu) on gpu(0).
#include "tensor/blas.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include <gtest/gtest.h>

#include "tensor/cpu_threads.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Row-major C = alpha op(A) op(B) + beta C with explicit leading dimensions.
void NaiveGemm(bool ta, bool tb, int m, int n, int k, float alpha,
               const std::vector<float>& a, int lda,
               const std::vector<float>& b, int ldb, float beta,
               std::vector<float>* c, int ldc) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      (*c)[i * ldc + j] = static_cast<float>(alpha * s + beta * (*c)[i * ldc + j]);
    }
  }
}

Tensor OnDevice(const std::vector<float>& v) {
  StatusOr<Tensor> t =
      Tensor::FromVector(v, {static_cast<int64_t>(v.size())}).CopyTo(TestDevice());
  CHECK(t.ok()) << t.status();
  return *t;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "at " << i;
  }
}

// (m, n, k, trans_a, trans_b)
using GemmCase = std::tuple<int, int, int, bool, bool>;

class GemmTest : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_P(GemmTest, MatchesNaiveReferenceWithPaddedLeadingDims) {
  const auto [m, n, k, ta, tb] = GetParam();
  // Leading dimensions wider than the matrices: the wrapper must honour them.
  const int a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int b_rows = tb ? n : k, b_cols = tb ? k : n;
  const int lda = a_cols + 3, ldb = b_cols + 1, ldc = n + 2;
  const auto a = Random(a_rows * lda, 1), b = Random(b_rows * ldb, 2);
  auto c = Random(m * ldc, 3);
  const float alpha = 0.75f, beta = -0.5f;
  Tensor da = OnDevice(a), db = OnDevice(b), dc = OnDevice(c);
  DeviceContext* ctx = *DeviceContext::Get(TestDevice());
  blas::Gemm(ctx, ta, tb, m, n, k, alpha, da.data<float>(), lda,
             db.data<float>(), ldb, beta, dc.data<float>(), ldc);
  NaiveGemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, &c, ldc);
  ExpectNear(dc.ToVector(), c, 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(
    OddSizesAndTransposes, GemmTest,
    ::testing::Combine(::testing::Values(1, 7, 33), ::testing::Values(1, 13, 64),
                       ::testing::Values(1, 5, 129), ::testing::Bool(),
                       ::testing::Bool()));

// GEMMs big enough to be split across the CPU pool (blocks of rows or of
// columns, with a ragged last block) still match the reference.
TEST(BlasThreadsTest, SplitGemmMatchesReference) {
  if (TestDevice().is_gpu()) GTEST_SKIP() << "the CPU pool only splits CPU GEMMs";
  SetCpuThreads(3);
  DeviceContext* ctx = *DeviceContext::Get(Device::CPU());
  for (const auto& [m, n, k] : {std::tuple<int, int, int>{150, 70, 90},
                                {40, 333, 100}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const int lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
        const auto a = Random((ta ? k : m) * lda, 7);
        const auto b = Random((tb ? n : k) * ldb, 8);
        auto c = Random(m * ldc, 9);
        auto got = c;
        blas::Gemm(ctx, ta, tb, m, n, k, 1.5f, a.data(), lda, b.data(), ldb,
                   0.5f, got.data(), ldc);
        NaiveGemm(ta, tb, m, n, k, 1.5f, a, lda, b, ldb, 0.5f, &c, ldc);
        ExpectNear(got, c, 1e-4f);
      }
    }
  }
  EXPECT_EQ(CpuThreads(), 3);
  EXPECT_NE(blas::CpuBlasDescription().find("kernels)"), std::string::npos);
  std::vector<int> hits(1000, 0);
  ParallelFor(1000, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ++hits[i];
  });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 1000);
  SetCpuThreads(1);
}

class BlasTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(BlasTest, StridedBatchedGemm) {
  const int m = 5, n = 3, k = 4, batch = 3;
  const auto a = Random(batch * m * k, 4), b = Random(batch * k * n, 5);
  std::vector<float> c(batch * m * n, 0);
  Tensor da = OnDevice(a), db = OnDevice(b), dc = OnDevice(c);
  blas::GemmStridedBatched(*DeviceContext::Get(TestDevice()), false, false, m,
                           n, k, 1.0f, da.data<float>(), k, m * k,
                           db.data<float>(), n, k * n, 0.0f, dc.data<float>(),
                           n, m * n, batch);
  for (int i = 0; i < batch; ++i) {
    std::vector<float> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    std::vector<float> bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
    std::vector<float> ci(m * n, 0);
    NaiveGemm(false, false, m, n, k, 1, ai, k, bi, n, 0, &ci, n);
    std::copy(ci.begin(), ci.end(), c.begin() + i * m * n);
  }
  ExpectNear(dc.ToVector(), c, 1e-5f);
}

TEST_F(BlasTest, TensorGemmChecksShapes) {
  const Device d = TestDevice();
  Tensor a = Tensor::Zeros({2, 3}, DType::kFloat32, d);
  Tensor b = Tensor::Zeros({4, 5}, DType::kFloat32, d);
  Tensor c = Tensor::Zeros({2, 5}, DType::kFloat32, d);
  Status s = blas::Gemm(a, false, b, false, 1, 0, &c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "gemm: op(A) is (2, 3) but op(B) is (4, 5): inner dimensions 3 "
            "and 4 differ");
  Tensor b2 = Tensor::Zeros({3, 5}, DType::kFloat32, d);
  Tensor bad_c = Tensor::Zeros({5, 2}, DType::kFloat32, d);
  EXPECT_EQ(blas::Gemm(a, false, b2, false, 1, 0, &bad_c).message(),
            "gemm: C is (5, 2) but op(A) op(B) is (2, 5)");
  Tensor ints = Tensor::Zeros({3, 5}, DType::kInt32, d);
  EXPECT_EQ(blas::Gemm(a, false, ints, false, 1, 0, &c).message(),
            "gemm: B is int32, only float32 is supported");
  Tensor v = Tensor::Zeros({3}, DType::kFloat32, d);
  EXPECT_EQ(blas::Gemm(a, false, v, false, 1, 0, &c).message(),
            "gemm: operands must be 2-D, got (3)");
  EXPECT_TRUE(blas::Gemm(a, false, b2, false, 1, 0, &c).ok());
  // Transposed A: (3, 2)^T is (2, 3).
  Tensor at = Tensor::Zeros({3, 2}, DType::kFloat32, d);
  EXPECT_TRUE(blas::Gemm(at, true, b2, false, 1, 0, &c).ok());
}

TEST_F(BlasTest, TensorGemmComputes) {
  Tensor a = *Tensor::FromVector({1, 2, 3, 4, 5, 6}, {2, 3}).CopyTo(TestDevice());
  Tensor b = *Tensor::FromVector({1, 0, 0, 1, 1, 1}, {3, 2}).CopyTo(TestDevice());
  Tensor c = Tensor::Zeros({2, 2}, DType::kFloat32, TestDevice());
  ASSERT_TRUE(blas::Gemm(a, false, b, false, 1, 0, &c).ok());
  EXPECT_EQ(c.ToVector(), std::vector<float>({4, 5, 10, 11}));
}

TEST_F(BlasTest, Level1) {
  const auto x = Random(1001, 7), y = Random(1001, 8);
  Tensor dx = OnDevice(x), dy = OnDevice(y);
  ASSERT_TRUE(blas::Axpy(2.0f, dx, &dy).ok());
  std::vector<float> want(x.size());
  double dot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    want[i] = y[i] + 2 * x[i];
    dot += static_cast<double>(x[i]) * want[i];
  }
  ExpectNear(dy.ToVector(), want, 1e-6f);
  StatusOr<float> got = blas::Dot(dx, dy);
  ASSERT_TRUE(got.ok());
  EXPECT_NEAR(*got, dot, 1e-3);
  ASSERT_TRUE(blas::Scal(-3.0f, &dy).ok());
  for (float& w : want) w *= -3;
  ExpectNear(dy.ToVector(), want, 1e-6f);
  Tensor shorter = OnDevice(Random(10, 9));
  EXPECT_EQ(blas::Axpy(1, shorter, &dy).message(),
            "axpy: shape mismatch: (10) float32 vs (1001) float32");
}

TEST(BlasThreadsTest, FromEnv) {
  EXPECT_EQ(*CpuThreadsFromEnv(MapEnv({{"KVTRAIN_NUM_THREADS", "3"},
                                             {"OMP_NUM_THREADS", "5"}})),
            3);
  EXPECT_EQ(*CpuThreadsFromEnv(MapEnv({{"OMP_NUM_THREADS", "5"}})), 5);
  EXPECT_GE(*CpuThreadsFromEnv(MapEnv({})), 1);
  StatusOr<int> bad =
      CpuThreadsFromEnv(MapEnv({{"KVTRAIN_NUM_THREADS", "0"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "KVTRAIN_NUM_THREADS=\"0\": expected an integer in [1, 1024]");
  SetCpuThreads(1);
  EXPECT_EQ(CpuThreads(), 1);
}

}  // namespace
}  // namespace kvtrain
