// Deconvolution: shapes, values against a direct double loop (each input
// pixel spreading its kernel-weighted copy over the output), gradients
// against finite differences, errors; the GPU build against the CPU.
#include "ops/deconvolution_op.h"

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

class DeconvolutionTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

struct Case {
  OpAttrs attrs;
  Shape data;
  int64_t kernel[2], stride[2], pad[2], adj[2];
  int64_t filters;
  bool bias;
};

std::vector<double> Reference(const Case& c, const Values& x, const Values& w, const Values& b,
                              const Shape& out) {
  const int64_t N = c.data[0], C = c.data[1], H = c.data[2], W = c.data[3];
  const int64_t F = c.filters, OH = out[2], OW = out[3];
  std::vector<double> y(static_cast<size_t>(N * F * OH * OW), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f)
      for (int64_t i = 0; i < OH * OW; ++i) y[(n * F + f) * OH * OW + i] = c.bias ? b[f] : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t j = 0; j < W; ++j)
          for (int64_t f = 0; f < F; ++f)
            for (int64_t ki = 0; ki < c.kernel[0]; ++ki)
              for (int64_t kj = 0; kj < c.kernel[1]; ++kj) {
                const int64_t oy = i * c.stride[0] - c.pad[0] + ki;
                const int64_t ox = j * c.stride[1] - c.pad[1] + kj;
                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                y[((n * F + f) * OH + oy) * OW + ox] +=
                    x[((n * C + ch) * H + i) * W + j] *
                    w[((ch * F + f) * c.kernel[0] + ki) * c.kernel[1] + kj];
              }
  return y;
}

TEST_F(DeconvolutionTest, ValuesAndGradients) {
  const std::vector<Case> cases = {
      {{{"kernel", "(3, 3)"}, {"num_filter", "2"}}, {2, 3, 4, 4}, {3, 3}, {1, 1}, {0, 0},
       {0, 0}, 2, false},
      {{{"kernel", "(4, 3)"}, {"num_filter", "3"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"},
        {"adj", "(1, 0)"}, {"no_bias", "false"}},
       {3, 2, 3, 4}, {4, 3}, {2, 2}, {1, 1}, {1, 0}, 3, true},
  };
  for (const Case& c : cases) {
    auto r = OpRunner::Create("Deconvolution", c.attrs, {c.data}, TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    const Shape out = (*r)->out_shapes()[0];
    const int64_t oh = (c.data[2] - 1) * c.stride[0] - 2 * c.pad[0] + c.kernel[0] + c.adj[0];
    const int64_t ow = (c.data[3] - 1) * c.stride[1] - 2 * c.pad[1] + c.kernel[1] + c.adj[1];
    EXPECT_EQ(out, (Shape{c.data[0], c.filters, oh, ow}));
    EXPECT_EQ((*r)->in_shapes()[1], (Shape{c.data[1], c.filters, c.kernel[0], c.kernel[1]}));
    ASSERT_TRUE((*r)->Forward(true).ok());
    const Values b = c.bias ? (*r)->Input(2) : Values();
    op_test::ExpectNear((*r)->Output(0), Reference(c, (*r)->Input(0), (*r)->Input(1), b, out),
                        1e-5, 1e-5, "Deconvolution " + c.data.ToString());
    op_test::CheckGradient(r->get(),
                           op_test::ForInputs(c.bias ? std::vector<int>{0, 1, 2}
                                                     : std::vector<int>{0, 1}));
  }
}

TEST(DeconvolutionErrors, NameTheProblem) {
  EXPECT_EQ(CreateOperator("Deconvolution", "d",
                           {{"kernel", "(2, 2)"}, {"num_filter", "1"}, {"adj", "(1, 1)"}})
                .status()
                .message(),
            "d (Deconvolution): adj (1, 1) must be smaller than stride (1, 1)");
  auto op = CreateOperator("Deconvolution", "d", {{"kernel", "(2, 2)"}, {"num_filter", "4"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{1, 3, 5, 5}, {2, 4, 2, 2}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "d (Deconvolution): input has 3 channels but d_weight is (2, 4, 2, 2) (channels, "
            "num_filter, kh, kw)");
}

#ifdef KV_TEST_ON_GPU
TEST(DeconvolutionGpu, MatchesCpu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  op_test::ExpectSameOnDevice(
      "Deconvolution",
      {{"kernel", "(4, 4)"}, {"num_filter", "5"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"},
       {"no_bias", "false"}},
      {{3, 4, 6, 5}}, {op_test::Random(360, 1), op_test::Random(320, 2), op_test::Random(5, 3)},
      TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
