#include "tensor/device.h"

#include <gtest/gtest.h>

#include "tensor/tensor.h"

namespace kvtrain {
namespace {

TEST(DeviceTest, ParseAndPrint) {
  EXPECT_EQ(*Device::Parse("cpu"), Device::CPU(0));
  EXPECT_EQ(*Device::Parse("cpu(2)"), Device::CPU(2));
  EXPECT_EQ(*Device::Parse("gpu(1)"), Device::GPU(1));
  EXPECT_EQ(*Device::Parse("gpu:3"), Device::GPU(3));
  EXPECT_EQ(*Device::Parse("gpu0"), Device::GPU(0));
  EXPECT_EQ(Device::GPU(1).ToString(), "gpu(1)");
  EXPECT_EQ(Device::CPU().ToString(), "cpu(0)");
  for (const char* bad : {"tpu(0)", "gpu", "gpu(x)", "cpu(-1)", "", "gpu(1"}) {
    StatusOr<Device> d = Device::Parse(bad);
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find("expected cpu, cpu(N) or gpu(N)"),
              std::string::npos);
  }
}

TEST(DeviceTest, CpuContextsAlwaysExist) {
  StatusOr<DeviceContext*> c0 = DeviceContext::Get(Device::CPU(0));
  StatusOr<DeviceContext*> c1 = DeviceContext::Get(Device::CPU(1));
  ASSERT_TRUE(c0.ok());
  ASSERT_TRUE(c1.ok());
  EXPECT_NE(*c0, *c1);
  EXPECT_EQ(*c0, *DeviceContext::Get(Device::CPU(0)));
  EXPECT_EQ((*c0)->stream(), nullptr);
  EXPECT_TRUE((*c0)->Synchronize().ok());
}

TEST(DeviceTest, UnusableGpuIsAClearError) {
  const Device gpu = Device::GPU(NumGpus());  // one past the last GPU
  Status s = CheckDevice(gpu);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(s.message(), gpu.ToString() +
                               " requested but kvtrain was built without "
                               "CUDA (rebuild with --config=cuda)");
    EXPECT_EQ(NumGpus(), 0);
  } else if (NumGpus() == 0) {
    EXPECT_NE(s.message().find("no CUDA device"), std::string::npos) << s;
  } else {
    EXPECT_NE(s.message().find("present"), std::string::npos) << s;
  }
  // The same error reaches whoever allocates on it.
  StatusOr<Tensor> t = Tensor::Create({2, 2}, DType::kFloat32, gpu);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status(), s);
  EXPECT_EQ(DeviceContext::Get(gpu).status(), s);
}

}  // namespace
}  // namespace kvtrain
