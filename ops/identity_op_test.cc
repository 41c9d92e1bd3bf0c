// identity passes values and gradients; BlockGrad passes values and stops
// gradients; Cast takes float32 only.
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

TEST(IdentityOpTest, PassesValuesAndGradients) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  for (const char* type : {"identity", "_copy", "Cast"}) {
    OpAttrs attrs;
    if (std::string(type) == "Cast") attrs = {{"dtype", "float32"}};
    auto r = OpRunner::Create(type, attrs, {{2, 3}}, TestDevice());
    ASSERT_TRUE(r.ok()) << type << ": " << r.status();
    ASSERT_TRUE((*r)->Forward(true).ok());
    EXPECT_EQ((*r)->Output(0), (*r)->Input(0)) << type;
    const Values dy = op_test::Random(6, 3);
    std::vector<Values> grads = {Values(6, 1.0f)};
    ASSERT_TRUE((*r)->Backward({dy}, {OpReq::kAdd}, &grads).ok());
    for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(grads[0][i], dy[i] + 1.0f) << type;
    ASSERT_TRUE((*r)->Backward({dy}, {OpReq::kWrite}, &grads).ok());
    EXPECT_EQ(grads[0], dy) << type;
  }
}

TEST(IdentityOpTest, BlockGradStopsTheGradient) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  for (const char* type : {"BlockGrad", "stop_gradient"}) {
    auto r = OpRunner::Create(type, {}, {{4}}, TestDevice());
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE((*r)->Forward(true).ok());
    EXPECT_EQ((*r)->Output(0), (*r)->Input(0));
    std::vector<Values> grads = {Values(4, 7.0f)};
    ASSERT_TRUE((*r)->Backward({op_test::Random(4, 1)}, {OpReq::kWrite}, &grads).ok());
    EXPECT_EQ(grads[0], Values(4, 0.0f));
    grads = {Values(4, 7.0f)};
    ASSERT_TRUE((*r)->Backward({op_test::Random(4, 1)}, {OpReq::kAdd}, &grads).ok());
    EXPECT_EQ(grads[0], Values(4, 7.0f));
  }
}

TEST(IdentityOpTest, CastTakesFloat32Only) {
  auto half = CreateOperator("Cast", "c", {{"dtype", "float16"}});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("float16"), std::string::npos)
      << half.status().message();
  EXPECT_NE(CreateOperator("Cast", "c", {}).status().message().find("missing attribute dtype"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtrain
