// _CrossDeviceCopy: forward copies to the output's device, Backward copies
// (or adds) the gradient back. On the CPU build the two devices are cpu(0)
// and cpu(1); on the GPU build cpu(0) and gpu(0).
#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

Device Destination() {
  return TestDevice().is_gpu() ? TestDevice() : Device::CPU(1);
}

TEST(CrossDeviceCopyTest, CopiesBothWays) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  auto op = CreateOperator("_CrossDeviceCopy", "copy", {});
  ASSERT_TRUE(op.ok()) << op.status();
  const op_test::Values x = op_test::Random(12, 1);
  ForwardArgs f;
  f.in = {Tensor::FromVector(x, {3, 4})};
  f.out = {Tensor::Zeros({3, 4}, DType::kFloat32, Destination())};
  f.req = {OpReq::kWrite};
  OpContext ctx;
  ctx.device = *DeviceContext::Get(Destination());
  ASSERT_TRUE((*op)->Forward(ctx, &f).ok());
  EXPECT_EQ(f.out[0].ToVector(), x);
  EXPECT_EQ(f.out[0].device(), Destination());

  const op_test::Values dy = op_test::Random(12, 2);
  BackwardArgs b;
  b.out_grad = {*Tensor::FromVector(dy, {3, 4}).CopyTo(Destination())};
  b.in = f.in;
  b.out = f.out;
  b.in_grad = {Tensor::FromVector(op_test::Values(12, 1.0f), {3, 4})};
  b.req = {OpReq::kAdd};
  ASSERT_TRUE((*op)->Backward(ctx, &b).ok());
  const op_test::Values got = b.in_grad[0].ToVector();
  for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(got[i], dy[i] + 1.0f);
  b.req = {OpReq::kWrite};
  ASSERT_TRUE((*op)->Backward(ctx, &b).ok());
  EXPECT_EQ(b.in_grad[0].ToVector(), dy);
}

}  // namespace
}  // namespace kvtrain
