// Concat: values along dims 0 and 1, gradients, mismatched shapes.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;

class ConcatTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
};

TEST_F(ConcatTest, JoinsAlongDimOne) {
  auto r = OpRunner::Create("Concat", {{"num_args", "3"}},
                            {{2, 1, 3}, {2, 2, 3}, {2, 1, 3}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->out_shapes()[0], Shape({2, 4, 3}));
  ASSERT_TRUE((*r)->Forward(false).ok());
  const auto a = (*r)->Input(0), b = (*r)->Input(1), c = (*r)->Input(2);
  std::vector<double> want;
  for (int n = 0; n < 2; ++n) {
    want.insert(want.end(), a.begin() + n * 3, a.begin() + n * 3 + 3);
    want.insert(want.end(), b.begin() + n * 6, b.begin() + n * 6 + 6);
    want.insert(want.end(), c.begin() + n * 3, c.begin() + n * 3 + 3);
  }
  op_test::ExpectNear((*r)->Output(0), want, 0, 0, "output");
  op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1, 2}));
}

TEST_F(ConcatTest, JoinsAlongDimZero) {
  auto r = OpRunner::Create("Concat", {{"num_args", "2"}, {"dim", "0"}},
                            {{2, 3}, {1, 3}}, TestDevice());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->out_shapes()[0], Shape({3, 3}));
  op_test::CheckGradient(r->get(), op_test::ForInputs({0, 1}));
}

TEST_F(ConcatTest, MismatchedShapes) {
  auto op = CreateOperator("Concat", "cat", {{"num_args", "2"}});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ((*op)->ListArguments(), (std::vector<std::string>{"arg0", "arg1"}));
  std::vector<Shape> in = {{2, 3, 4}, {3, 1, 4}}, out(1), aux;
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "cat (Concat): cat_arg1 is (3, 1, 4) but cat_arg0 is (2, 3, 4); "
            "they may differ only in dimension 1");
}

#ifdef KV_TEST_ON_GPU
TEST_F(ConcatTest, GpuMatchesCpu) {
  op_test::ExpectSameOnDevice("Concat", {{"num_args", "2"}}, {{3, 2, 5}, {3, 4, 5}},
                              {op_test::Random(30, 1), op_test::Random(60, 2)},
                              TestDevice());
}
#endif

}  // namespace
}  // namespace kvtrain
