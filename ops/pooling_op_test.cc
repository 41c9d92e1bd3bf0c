// Pooling: max and average against a double reference (stride, padding,
// global), numeric gradients on inputs with distinct values, shape errors.
#include <algorithm>
#include <limits>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

struct Case {
  std::string type;
  int kh, kw, sh, sw, ph, pw;
  bool global;
};

std::vector<double> NaivePool(const Case& k, int planes, int h, int w,
                              const op_test::Values& x) {
  const int kh = k.global ? h : k.kh, kw = k.global ? w : k.kw;
  const int sh = k.global ? 1 : k.sh, sw = k.global ? 1 : k.sw;
  const int ph = k.global ? 0 : k.ph, pw = k.global ? 0 : k.pw;
  const int oh = (h + 2 * ph - kh) / sh + 1, ow = (w + 2 * pw - kw) / sw + 1;
  std::vector<double> out;
  for (int p = 0; p < planes; ++p)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox) {
        double m = -std::numeric_limits<double>::infinity(), s = 0;
        for (int i = 0; i < kh; ++i)
          for (int j = 0; j < kw; ++j) {
            const int y = oy * sh - ph + i, xx = ox * sw - pw + j;
            if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
            const double v = x[(p * h + y) * w + xx];
            m = std::max(m, v);
            s += v;
          }
        out.push_back(k.type == "max" ? m : s / (kh * kw));
      }
  return out;
}

class PoolingTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_P(PoolingTest, ForwardMatchesNaiveAndGradientChecks) {
  const Case k = GetParam();
  OpAttrs attrs = {{"pool_type", k.type}};
  if (k.global) {
    attrs["global_pool"] = "true";
  } else {
    attrs["kernel"] = "(" + std::to_string(k.kh) + "," + std::to_string(k.kw) + ")";
    attrs["stride"] = "(" + std::to_string(k.sh) + "," + std::to_string(k.sw) + ")";
    attrs["pad"] = "(" + std::to_string(k.ph) + "," + std::to_string(k.pw) + ")";
  }
  auto r = OpRunner::Create("Pooling", attrs, {{2, 3, 7, 6}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  // A shuffled ramp: distinct values 0.01 apart, so the max is unique and
  // stays put under the gradient check's perturbation.
  op_test::Values x(2 * 3 * 7 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * ((i * 37) % x.size());
  (*r)->SetInput(0, x);
  ASSERT_TRUE((*r)->Forward(false).ok());
  op_test::ExpectNear((*r)->Output(0), NaivePool(k, 6, 7, 6, x), 1e-6, 1e-6,
                      "output");
  op_test::GradCheckOptions o = op_test::ForInputs({0});
  o.eps = 1e-3;
  op_test::CheckGradient(r->get(), o);
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, PoolingTest,
    ::testing::Values(Case{"max", 2, 2, 2, 2, 0, 0, false},
                      Case{"max", 3, 2, 2, 1, 1, 1, false},
                      Case{"avg", 2, 2, 2, 2, 0, 0, false},
                      Case{"avg", 3, 3, 2, 2, 1, 1, false},
                      Case{"max", 0, 0, 0, 0, 0, 0, true},
                      Case{"avg", 0, 0, 0, 0, 0, 0, true}));

TEST(PoolingErrors, ShapesAndAttributes) {
  EXPECT_EQ(CreateOperator("Pooling", "pool", {}).status().message(),
            "pool (Pooling): missing attribute kernel, e.g. (2, 2) (or "
            "global_pool=true)");
  EXPECT_EQ(CreateOperator("Pooling", "pool",
                           {{"kernel", "2"}, {"pool_type", "min"}})
                .status()
                .message(),
            "pool (Pooling): attribute pool_type=\"min\": expected one of "
            "max, avg");
  auto op = CreateOperator("Pooling", "pool", {{"kernel", "(4,4)"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{1, 1, 3, 3}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "pool (Pooling): kernel (4, 4) is larger than the padded input "
            "(1, 1, 3, 3)");
  in = {{5, 6}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "pool (Pooling): pool_data must be 4-D (batch, channel, height, "
            "width), got (5, 6)");
}

#ifdef KV_TEST_ON_GPU
TEST(PoolingGpu, MatchesCpu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  for (const char* type : {"max", "avg"}) {
    op_test::ExpectSameOnDevice(
        "Pooling",
        {{"pool_type", type}, {"kernel", "(3,3)"}, {"stride", "2"}, {"pad", "1"}},
        {{4, 5, 11, 9}}, {op_test::Random(4 * 5 * 11 * 9, 8)}, TestDevice());
  }
}

// cuDNN against kvtrain's kernels: LeNet's pools, padded windows, and
// global pooling.
TEST(PoolingGpu, CudnnMatchesReference) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  for (const char* type : {"max", "avg"}) {
    SCOPED_TRACE(type);
    op_test::ExpectCudnnMatchesReference(
        "Pooling", {{"pool_type", type}, {"kernel", "(2,2)"}, {"stride", "2"}},
        {{64, 20, 24, 24}}, {op_test::Random(64 * 20 * 24 * 24, 9)},
        TestDevice());
    op_test::ExpectCudnnMatchesReference(
        "Pooling",
        {{"pool_type", type}, {"kernel", "(3,3)"}, {"stride", "2"}, {"pad", "1"}},
        {{4, 5, 11, 9}}, {op_test::Random(4 * 5 * 11 * 9, 8)}, TestDevice());
    op_test::ExpectCudnnMatchesReference(
        "Pooling", {{"pool_type", type}, {"global_pool", "true"}},
        {{4, 5, 7, 7}}, {op_test::Random(4 * 5 * 7 * 7, 7)}, TestDevice());
  }
}
#endif

}  // namespace
}  // namespace kvtrain
