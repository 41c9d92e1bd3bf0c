// Flatten and Reshape: shape inference (0 and -1), values, gradients, errors.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

class ReshapeTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(ReshapeTest, FlattenKeepsValuesAndGradient) {
  auto r = OpRunner::Create("Flatten", {}, {{2, 3, 4, 5}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->out_shapes()[0], Shape({2, 60}));
  ASSERT_TRUE((*r)->Forward(false).ok());
  const op_test::Values x = (*r)->Input(0);
  op_test::ExpectNear((*r)->Output(0), std::vector<double>(x.begin(), x.end()),
                      0, 0, "output");
  op_test::CheckGradient(r->get(), op_test::ForInputs({0}));
}

TEST_F(ReshapeTest, ReshapeCopiesAndInfersDimensions) {
  auto r = OpRunner::Create("Reshape", {{"shape", "(0, -1, 2)"}}, {{3, 4, 6}},
                            TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->out_shapes()[0], Shape({3, 12, 2}));
  op_test::CheckGradient(r->get(), op_test::ForInputs({0}));
}

TEST_F(ReshapeTest, Errors) {
  auto op = CreateOperator("Reshape", "r", {{"shape", "(5, -1)"}});
  ASSERT_TRUE(op.ok());
  std::vector<Shape> in = {{3, 4}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "r (Reshape): cannot reshape (3, 4) to (5, -1)");
  EXPECT_EQ(CreateOperator("Reshape", "r", {{"shape", "(-1, -1)"}})
                .status()
                .message(),
            "r (Reshape): shape may contain -1 only once");
  EXPECT_EQ(CreateOperator("Reshape", "r", {}).status().message(),
            "r (Reshape): missing attribute shape, e.g. (0, -1)");
  auto fixed = CreateOperator("Reshape", "r", {{"shape", "(7, 2)"}});
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ((*fixed)->InferShape(&in, &out, &aux).message(),
            "r (Reshape): cannot reshape (3, 4) (12 elements) to (7, 2)");
}

#ifdef KV_TEST_ON_GPU
TEST_F(ReshapeTest, GpuMatchesCpu) {
  op_test::ExpectSameOnDevice("Reshape", {{"shape", "(-1, 6)"}}, {{4, 3, 2}},
                              {op_test::Random(24, 1)}, TestDevice());
  op_test::ExpectSameOnDevice("Flatten", {}, {{4, 3, 2}},
                              {op_test::Random(24, 2)}, TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
