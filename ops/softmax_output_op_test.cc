// SoftmaxOutput: probabilities against a double softmax, the cross-entropy
// gradient by central differences, normalisation, ignored and bad labels.
#include <cmath>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

class SoftmaxOutputTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

// -scale * sum_rows log p[label], from the logits (in double).
double CrossEntropy(const Values& x, const Values& label, int rows,
                    int classes, double scale) {
  double loss = 0;
  for (int r = 0; r < rows; ++r) {
    double m = x[r * classes], sum = 0;
    for (int c = 0; c < classes; ++c) m = std::max(m, double(x[r * classes + c]));
    for (int c = 0; c < classes; ++c) sum += std::exp(x[r * classes + c] - m);
    loss -= x[r * classes + static_cast<int>(label[r])] - m - std::log(sum);
  }
  return scale * loss;
}

TEST_F(SoftmaxOutputTest, ProbabilitiesAndCrossEntropyGradient) {
  const int rows = 6, classes = 5;
  auto r = OpRunner::Create("SoftmaxOutput", {{"normalization", "batch"}},
                            {{rows, classes}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->in_shapes()[1], Shape({rows}));
  const Values label = {0, 4, 2, 2, 1, 3};
  (*r)->SetInput(1, label);
  (*r)->SetInput(0, op_test::Random(rows * classes, 3, -3, 3));
  ASSERT_TRUE((*r)->Forward(true).ok());
  const Values x = (*r)->Input(0);
  std::vector<double> want;
  for (int i = 0; i < rows; ++i) {
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(double(x[i * classes + c]));
    for (int c = 0; c < classes; ++c) {
      want.push_back(std::exp(double(x[i * classes + c])) / sum);
    }
  }
  op_test::ExpectNear((*r)->Output(0), want, 1e-6, 1e-5, "probabilities");
  op_test::GradCheckOptions o = op_test::ForInputs({0});
  o.loss = [&](const std::vector<Values>&, const std::vector<Values>& in) {
    return CrossEntropy(in[0], in[1], rows, classes, 1.0 / rows);
  };
  op_test::CheckGradient(r->get(), o);
}

TEST_F(SoftmaxOutputTest, IgnoredRowsGetNoGradient) {
  auto r = OpRunner::Create(
      "SoftmaxOutput",
      {{"use_ignore", "true"}, {"ignore_label", "-1"}, {"normalization", "valid"},
       {"grad_scale", "2"}},
      {{3, 4}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  (*r)->SetInput(1, {1, -1, 3});
  ASSERT_TRUE((*r)->Forward(true).ok());
  const Values p = (*r)->Output(0);
  std::vector<Values> g = {Values(12, 0.0f), Values(3, 0.0f)};
  ASSERT_TRUE((*r)->Backward({}, {OpReq::kWrite, OpReq::kWrite}, &g).ok());
  for (int c = 0; c < 4; ++c) {
    // Two valid rows: scale 2 / 2.
    EXPECT_NEAR(g[0][c], p[c] - (c == 1), 1e-6);
    EXPECT_EQ(g[0][4 + c], 0.0f);
    EXPECT_NEAR(g[0][8 + c], p[8 + c] - (c == 3), 1e-6);
  }
  EXPECT_EQ(g[1], Values(3, 0.0f));
}

TEST_F(SoftmaxOutputTest, BadLabelsAndShapes) {
  auto r = OpRunner::Create("SoftmaxOutput", {}, {{2, 3}}, TestDevice());
  ASSERT_TRUE(r.ok());
  (*r)->SetInput(1, {0, 3});
  ASSERT_TRUE((*r)->Forward(true).ok());
  std::vector<Values> g = {Values(6, 0.0f), Values(2, 0.0f)};
  EXPECT_EQ((*r)->Backward({}, {OpReq::kWrite, OpReq::kNull}, &g).message(),
            "op (SoftmaxOutput): 1 label(s) outside [0, 3)");
  auto op = CreateOperator("SoftmaxOutput", "softmax", {});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{4, 10}, {5}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "softmax (SoftmaxOutput): softmax_label is (5) but the batch has 4 "
            "rows; expected (4)");
}

#ifdef KV_TEST_ON_GPU
TEST_F(SoftmaxOutputTest, GpuMatchesCpu) {
  Values label;
  for (int i = 0; i < 37; ++i) label.push_back(i % 10);
  op_test::ExpectSameOnDevice("SoftmaxOutput", {{"normalization", "batch"}},
                              {{37, 10}}, {op_test::Random(370, 1, -5, 5), label},
                              TestDevice());
}

// cuDNN's softmax against kvtrain's kernel, at a batch that fills the GPU.
TEST_F(SoftmaxOutputTest, CudnnMatchesReference) {
  Values label;
  for (int i = 0; i < 1024; ++i) label.push_back(i % 10);
  op_test::ExpectCudnnMatchesReference(
      "SoftmaxOutput", {{"normalization", "batch"}}, {{1024, 10}},
      {op_test::Random(10240, 1, -5, 5), label}, TestDevice(), 1e-5f);
}
#endif

}  // namespace
}  // namespace kvtrain
