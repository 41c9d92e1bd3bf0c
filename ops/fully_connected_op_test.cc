// FullyConnected: forward against a double-precision reference, numeric
// gradients, shape errors; on gpu(0) also against the CPU.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

class FullyConnectedTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
  std::unique_ptr<OpRunner> Make(const OpAttrs& attrs,
                                 const std::vector<Shape>& shapes) {
    auto r = OpRunner::Create("FullyConnected", attrs, shapes, TestDevice());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(r).value() : nullptr;
  }
};

TEST_F(FullyConnectedTest, ForwardMatchesDoubleReference) {
  // (4, 3, 2) is flattened to 4 rows of 6 features.
  auto r = Make({{"num_hidden", "5"}}, {{4, 3, 2}});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->in_shapes()[1], Shape({5, 6}));
  EXPECT_EQ(r->in_shapes()[2], Shape({5}));
  EXPECT_EQ(r->out_shapes()[0], Shape({4, 5}));
  ASSERT_TRUE(r->Forward(false).ok());
  const auto x = r->Input(0), w = r->Input(1), b = r->Input(2);
  std::vector<double> want(20);
  for (int n = 0; n < 4; ++n) {
    for (int h = 0; h < 5; ++h) {
      double s = b[h];
      for (int k = 0; k < 6; ++k) s += double(x[n * 6 + k]) * w[h * 6 + k];
      want[n * 5 + h] = s;
    }
  }
  op_test::ExpectNear(r->Output(0), want, 1e-5, 1e-5, "output");
  // kAdd accumulates onto the output.
  ASSERT_TRUE(r->Forward(false, OpReq::kAdd).ok());
  for (double& v : want) v *= 2;
  op_test::ExpectNear(r->Output(0), want, 1e-5, 1e-5, "output after kAdd");
}

TEST_F(FullyConnectedTest, GradientCheck) {
  auto r = Make({{"num_hidden", "4"}}, {{3, 7}});
  ASSERT_NE(r, nullptr);
  op_test::CheckGradient(r.get(), op_test::ForInputs({0, 1, 2}));
}

TEST_F(FullyConnectedTest, NoBiasWithoutFlatten) {
  auto r = Make({{"num_hidden", "3"}, {"no_bias", "true"}, {"flatten", "0"}},
                {{2, 3, 4}});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->op()->ListArguments(), (std::vector<std::string>{"data", "weight"}));
  EXPECT_EQ(r->out_shapes()[0], Shape({2, 3, 3}));
  op_test::CheckGradient(r.get(), op_test::ForInputs({0, 1}));
}

TEST_F(FullyConnectedTest, ShapeErrorsNameTheOpAndBothShapes) {
  auto op = CreateOperator("FullyConnected", "fc2", {{"num_hidden", "10"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{32, 128}, {10, 64}, {}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "fc2 (FullyConnected): input has 128 features but fc2_weight is "
            "(10, 64)");
  in = {{32, 128}, {10, 128}, {11}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "fc2 (FullyConnected): fc2_bias is (11), expected (10)");
}

TEST_F(FullyConnectedTest, BadAttributes) {
  EXPECT_EQ(CreateOperator("FullyConnected", "fc", {}).status().message(),
            "fc (FullyConnected): missing attribute num_hidden");
  EXPECT_EQ(CreateOperator("FullyConnected", "fc", {{"num_hidden", "ten"}})
                .status()
                .message(),
            "fc (FullyConnected): attribute num_hidden=\"ten\": expected an "
            "integer in [1, 2147483647]");
  EXPECT_EQ(CreateOperator("FullyConnected", "fc",
                           {{"num_hidden", "3"}, {"num_hiden", "3"}})
                .status()
                .message(),
            "fc (FullyConnected): unknown attribute \"num_hiden\"; accepted: "
            "flatten, no_bias, num_hidden");
}

TEST_F(FullyConnectedTest, ForwardRejectsTensorsOfTheWrongShape) {
  auto r = Make({{"num_hidden", "4"}}, {{3, 7}});
  ASSERT_NE(r, nullptr);
  auto ctx = DeviceContext::Get(TestDevice());
  ForwardArgs args;
  args.in = {Tensor::Zeros({3, 7}, DType::kFloat32, TestDevice()),
             Tensor::Zeros({4, 7}, DType::kFloat32, TestDevice()),
             Tensor::Zeros({4}, DType::kFloat32, TestDevice())};
  args.out = {Tensor::Zeros({3, 5}, DType::kFloat32, TestDevice())};
  args.req = {OpReq::kWrite};
  OpContext c;
  c.device = *ctx;
  EXPECT_EQ(r->op()->Forward(c, &args).message(),
            "op (FullyConnected): output 0 (op_output) is (3, 5), expected "
            "(3, 4)");
  args.out[0] = Tensor::Zeros({3, 4}, DType::kInt32, TestDevice());
  EXPECT_EQ(r->op()->Forward(c, &args).message(),
            "op (FullyConnected): output 0 (op_output) is int32; operators "
            "take float32");
}

#ifdef KV_TEST_ON_GPU
TEST_F(FullyConnectedTest, GpuMatchesCpu) {
  op_test::ExpectSameOnDevice("FullyConnected", {{"num_hidden", "33"}},
                              {{17, 3, 5}},
                              {op_test::Random(255, 1), op_test::Random(495, 2),
                               op_test::Random(33, 3)},
                              TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
