// Convolution: forward against a naive double-precision convolution (with
// stride and padding), numeric gradients, the threaded path, shape errors.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/blas.h"
#include "tensor/cpu_threads.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

struct Case {
  int n, c, h, w, f, kh, kw, sh, sw, ph, pw;
};

// Naive NCHW convolution in double.
std::vector<double> NaiveConv(const Case& k, const op_test::Values& x,
                              const op_test::Values& wt,
                              const op_test::Values& b) {
  const int oh = (k.h + 2 * k.ph - k.kh) / k.sh + 1;
  const int ow = (k.w + 2 * k.pw - k.kw) / k.sw + 1;
  std::vector<double> out(k.n * k.f * oh * ow);
  for (int n = 0; n < k.n; ++n)
    for (int f = 0; f < k.f; ++f)
      for (int oy = 0; oy < oh; ++oy)
        for (int ox = 0; ox < ow; ++ox) {
          double s = b[f];
          for (int c = 0; c < k.c; ++c)
            for (int i = 0; i < k.kh; ++i)
              for (int j = 0; j < k.kw; ++j) {
                const int y = oy * k.sh - k.ph + i, xx = ox * k.sw - k.pw + j;
                if (y < 0 || y >= k.h || xx < 0 || xx >= k.w) continue;
                s += double(x[((n * k.c + c) * k.h + y) * k.w + xx]) *
                     wt[((f * k.c + c) * k.kh + i) * k.kw + j];
              }
          out[((n * k.f + f) * oh + oy) * ow + ox] = s;
        }
  return out;
}

OpAttrs AttrsOf(const Case& k) {
  return {{"kernel", "(" + std::to_string(k.kh) + ", " + std::to_string(k.kw) + ")"},
          {"stride", "(" + std::to_string(k.sh) + "," + std::to_string(k.sw) + ")"},
          {"pad", "(" + std::to_string(k.ph) + "," + std::to_string(k.pw) + ")"},
          {"num_filter", std::to_string(k.f)}};
}

class ConvolutionTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_P(ConvolutionTest, ForwardMatchesNaiveAndGradientChecks) {
  const Case k = GetParam();
  auto r = OpRunner::Create("Convolution", AttrsOf(k), {{k.n, k.c, k.h, k.w}},
                            TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Forward(true).ok());
  op_test::ExpectNear((*r)->Output(0),
                      NaiveConv(k, (*r)->Input(0), (*r)->Input(1),
                                (*r)->Input(2)),
                      1e-5, 1e-5, "output");
  op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1, 2}));
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, ConvolutionTest,
    ::testing::Values(Case{2, 3, 6, 5, 4, 3, 3, 1, 1, 0, 0},
                      Case{3, 2, 7, 7, 3, 3, 2, 2, 1, 1, 2},
                      Case{1, 1, 5, 5, 2, 5, 5, 1, 1, 2, 2}));

// Several threads, each with its own share of the batch and groups of
// images, give the naive result (and the same gradient as one thread).
TEST(ConvolutionThreads, SplitBatchMatchesNaive) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  SetCpuThreads(3);
  const Case k{13, 4, 12, 12, 6, 5, 5, 1, 1, 0, 0};
  auto r = OpRunner::Create("Convolution", AttrsOf(k), {{k.n, k.c, k.h, k.w}},
                            TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Forward(true).ok());
  op_test::ExpectNear((*r)->Output(0),
                      NaiveConv(k, (*r)->Input(0), (*r)->Input(1),
                                (*r)->Input(2)),
                      1e-4, 1e-5, "output");
  const op_test::Values dy = op_test::Random((*r)->out_shapes()[0].NumElements(), 5);
  std::vector<op_test::Values> g3(3), g1(3);
  for (int i = 0; i < 3; ++i) {
    g3[i].assign((*r)->in_shapes()[i].NumElements(), 0.0f);
    g1[i] = g3[i];
  }
  const std::vector<OpReq> reqs(3, OpReq::kWrite);
  ASSERT_TRUE((*r)->Backward({dy}, reqs, &g3).ok());
  SetCpuThreads(1);
  auto r1 = OpRunner::Create("Convolution", AttrsOf(k), {{k.n, k.c, k.h, k.w}},
                             TestDevice());
  ASSERT_TRUE(r1.ok());
  ASSERT_TRUE((*r1)->Forward(true).ok());
  ASSERT_TRUE((*r1)->Backward({dy}, reqs, &g1).ok());
  for (int i = 0; i < 3; ++i) {
    std::vector<double> want(g1[i].begin(), g1[i].end());
    op_test::ExpectNear(g3[i], want, 1e-4, 1e-4, "gradient");
  }
}

TEST(ConvolutionErrors, ShapesAndAttributes) {
  auto op = CreateOperator("Convolution", "conv1",
                           {{"kernel", "(5,5)"}, {"num_filter", "8"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{2, 3, 28}, {}, {}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "conv1 (Convolution): conv1_data must be 4-D (batch, channel, "
            "height, width), got (2, 3, 28)");
  in = {{2, 3, 4, 4}, {}, {}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "conv1 (Convolution): kernel (5, 5) is larger than the padded "
            "input (2, 3, 4, 4) of conv1_data");
  in = {{2, 3, 8, 8}, {8, 4, 5, 5}, {}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "conv1 (Convolution): input has 3 channels but conv1_weight is "
            "(8, 4, 5, 5)");
  EXPECT_EQ(CreateOperator("Convolution", "c", {{"num_filter", "2"}})
                .status()
                .message(),
            "c (Convolution): missing attribute kernel, e.g. (5, 5)");
  EXPECT_EQ(CreateOperator("Convolution", "c",
                           {{"kernel", "(3,x)"}, {"num_filter", "2"}})
                .status()
                .message(),
            "c (Convolution): attribute kernel=\"(3,x)\": expected 2 integers "
            ">= 1, e.g. (2, 2)");
}

// cudnn_off and workspace are accepted everywhere (CPUs ignore them), and a
// bad workspace is an error naming it.
TEST(Convolution, CudnnAttributes) {
  OpAttrs attrs = {{"kernel", "(3,3)"}, {"num_filter", "2"},
                   {"cudnn_off", "true"}, {"workspace", "256"}};
  auto r = OpRunner::Create("Convolution", attrs, {{2, 3, 5, 5}}, Device::CPU());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->Forward(true).ok());
  attrs["workspace"] = "-1";
  const Status bad =
      OpRunner::Create("Convolution", attrs, {{2, 3, 5, 5}}, Device::CPU())
          .status();
  EXPECT_NE(bad.message().find("workspace"), std::string::npos) << bad;
}

#ifdef KV_TEST_ON_GPU
TEST(ConvolutionGpu, MatchesCpu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  const Case k{5, 3, 9, 8, 4, 3, 3, 2, 1, 1, 1};
  op_test::ExpectSameOnDevice(
      "Convolution", AttrsOf(k), {{k.n, k.c, k.h, k.w}},
      {op_test::Random(5 * 3 * 9 * 8, 1), op_test::Random(4 * 3 * 9, 2),
       op_test::Random(4, 3)},
      TestDevice());
}

// cuDNN against the im2col kernels: LeNet's two layers at a batch that
// fills the GPU, stride and padding, no bias, a 1x1 kernel, and no cuDNN
// workspace at all.
TEST(ConvolutionGpu, CudnnMatchesReference) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  const Case cases[] = {
      {256, 1, 28, 28, 20, 5, 5, 1, 1, 0, 0},
      {256, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0},
      {5, 3, 9, 8, 4, 3, 3, 2, 1, 1, 1},
      {7, 16, 6, 5, 8, 1, 1, 1, 1, 0, 0},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << "input " << k.n << "x" << k.c << "x"
                                      << k.h << "x" << k.w << " filters " << k.f);
    const int64_t in = int64_t{k.n} * k.c * k.h * k.w;
    const std::vector<op_test::Values> inputs = {
        op_test::Random(in, 1), op_test::Random(k.f * k.c * k.kh * k.kw, 2),
        op_test::Random(k.f, 3)};
    op_test::ExpectCudnnMatchesReference("Convolution", AttrsOf(k),
                                         {{k.n, k.c, k.h, k.w}}, inputs,
                                         TestDevice());
  }
  const Case k{6, 4, 10, 10, 5, 3, 3, 1, 1, 1, 1};
  OpAttrs attrs = AttrsOf(k);
  attrs["no_bias"] = "true";
  attrs["workspace"] = "0";
  op_test::ExpectCudnnMatchesReference(
      "Convolution", attrs, {{k.n, k.c, k.h, k.w}},
      {op_test::Random(6 * 4 * 100, 4), op_test::Random(5 * 4 * 9, 5)},
      TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
