// LRN: values against a double reference written from MXNet's formula,
// gradients against finite differences (odd and even windows), errors.
#include "ops/lrn_op.h"

#include <cmath>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

class LrnTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

std::vector<double> Reference(const Values& x, int64_t batch, int64_t channels, int64_t inner,
                              int64_t n, double alpha, double beta, double k) {
  std::vector<double> out(x.size());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t p = 0; p < inner; ++p) {
        double sum = 0;
        for (int64_t j = c - n / 2; j <= c - n / 2 + n - 1; ++j) {
          if (j < 0 || j >= channels) continue;
          const double v = x[(b * channels + j) * inner + p];
          sum += v * v;
        }
        const int64_t i = (b * channels + c) * inner + p;
        out[i] = x[i] / std::pow(k + alpha / n * sum, beta);
      }
    }
  }
  return out;
}

TEST_F(LrnTest, ValuesAndGradients) {
  for (int64_t n : {1, 3, 4, 5}) {
    const OpAttrs attrs = {{"nsize", std::to_string(n)}, {"alpha", "0.5"}, {"beta", "0.75"},
                           {"knorm", "1.5"}};
    const Shape shape = {2, 6, 3, 2};
    auto r = OpRunner::Create("LRN", attrs, {shape}, TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->num_visible_outputs(), 1);
    (*r)->SetInput(0, op_test::Random(shape.Product(0, 4), 11, -2.0f, 2.0f));
    ASSERT_TRUE((*r)->Forward(true).ok());
    op_test::ExpectNear((*r)->Output(0),
                        Reference((*r)->Input(0), 2, 6, 6, n, 0.5, 0.75, 1.5), 1e-5, 1e-5,
                        "LRN nsize " + std::to_string(n));
    op_test::CheckGradient(r->get(), op_test::ForInputs({0}));
  }
}

TEST_F(LrnTest, MxnetDefaults) {
  auto r = OpRunner::Create("LRN", {{"nsize", "5"}}, {{1, 8, 2, 2}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->SetInput(0, op_test::Random(32, 2, -30.0f, 30.0f));
  ASSERT_TRUE((*r)->Forward(false).ok());
  op_test::ExpectNear((*r)->Output(0), Reference((*r)->Input(0), 1, 8, 4, 5, 1e-4, 0.75, 2),
                      1e-5, 1e-5, "LRN defaults");
}

TEST(LrnErrors, NamesTheProblem) {
  EXPECT_EQ(CreateOperator("LRN", "l", {}).status().message(),
            "l (LRN): missing attribute nsize");
  auto op = CreateOperator("LRN", "l", {{"nsize", "3"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{5}}, out(2), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "l (LRN): l_data is (5); LRN needs (batch, channels, ...)");
}

#ifdef KV_TEST_ON_GPU
TEST(LrnGpu, MatchesCpu) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  op_test::ExpectSameOnDevice("LRN", {{"nsize", "5"}, {"alpha", "0.1"}}, {{3, 7, 4, 5}},
                              {op_test::Random(420, 9)}, TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
