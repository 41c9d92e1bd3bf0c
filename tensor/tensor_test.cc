// Tensor tests, run on the CPU and (as tensor_test_gpu) on gpu(0).
#include "tensor/tensor.h"

#include <cstdint>

#include <gtest/gtest.h>

#include "tensor/test_device.h"

namespace kvtrain {
namespace {

class TensorTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }
  const Device dev_ = TestDevice();

  // A tensor on the test device holding `values`.
  Tensor On(const std::vector<float>& values, const Shape& shape) {
    StatusOr<Tensor> t = Tensor::FromVector(values, shape).CopyTo(dev_);
    EXPECT_TRUE(t.ok()) << t.status();
    return *t;
  }
};

TEST(DTypeTest, SizesNamesAndParsing) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(DType::kUInt8), 1u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  for (DType d : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kFloat64}) {
    EXPECT_EQ(*ParseDType(DTypeName(d)), d);
  }
  StatusOr<DType> bad = ParseDType("bfloat16");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "unknown dtype \"bfloat16\": expected one of float32, int32, "
            "int64, uint8, float64");
}

TEST(ShapeTest, Basics) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.NumElements(), 24);
  EXPECT_EQ(s.Product(1, 3), 12);
  EXPECT_EQ(s.ToString(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.NumElements(), 1);
  EXPECT_EQ(Shape{}.ToString(), "()");
  EXPECT_EQ(Shape({5, 0}).NumElements(), 0);
  EXPECT_FALSE(Shape({2, -1}).IsValid());
  // Products that overflow are invalid, and NumElements saturates instead
  // of wrapping (a wrapped product could pass a size check).
  const Shape huge({int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_FALSE(huge.IsValid());
  EXPECT_EQ(huge.NumElements(), INT64_MAX);
  EXPECT_FALSE(Shape({int64_t{1} << 31, int64_t{1} << 31, 4}).IsValid());  // 2^64
  EXPECT_FALSE(Shape({(int64_t{1} << 60) + 1}).IsValid());
  EXPECT_TRUE(Shape({int64_t{1} << 30, int64_t{1} << 30}).IsValid());
  EXPECT_EQ(Shape({1, 2}), Shape(std::vector<int64_t>{1, 2}));
  EXPECT_NE(Shape({1, 2}), Shape({2, 1}));
}

TEST_F(TensorTest, CreateReportsShapeDtypeDevice) {
  StatusOr<Tensor> t = Tensor::Create({3, 5}, DType::kInt64, dev_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->defined());
  EXPECT_EQ(t->shape(), Shape({3, 5}));
  EXPECT_EQ(t->dtype(), DType::kInt64);
  EXPECT_EQ(t->device(), dev_);
  EXPECT_EQ(t->size(), 15);
  EXPECT_EQ(t->nbytes(), 120u);
  EXPECT_FALSE(Tensor().defined());
}

TEST_F(TensorTest, StorageIs64ByteAligned) {
  for (int n : {1, 3, 17, 1000}) {
    Tensor t = Tensor::Empty({n}, DType::kUInt8, dev_);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << n;
  }
}

TEST_F(TensorTest, NegativeDimensionIsAnError) {
  StatusOr<Tensor> t = Tensor::Create({2, -3}, DType::kFloat32, dev_);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "negative dimension in shape (2, -3)");
}

TEST_F(TensorTest, ZerosAndFillEveryDtype) {
  for (DType d : {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kUInt8,
                  DType::kFloat64}) {
    Tensor t = Tensor::Zeros({4, 3}, d, dev_);
    EXPECT_EQ(t.ToVector(), std::vector<float>(12, 0.0f)) << DTypeName(d);
    ASSERT_TRUE(t.Fill(7).ok());
    EXPECT_EQ(t.ToVector(), std::vector<float>(12, 7.0f)) << DTypeName(d);
  }
  Tensor f = Tensor::Empty({5}, DType::kFloat32, dev_);
  ASSERT_TRUE(f.Fill(-2.5).ok());
  EXPECT_EQ(f.ToVector(), std::vector<float>(5, -2.5f));
}

TEST_F(TensorTest, ReshapeIsAViewOfTheSameMemory) {
  Tensor t = On({1, 2, 3, 4, 5, 6}, {2, 3});
  StatusOr<Tensor> r = t.Reshape({3, 2});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->shape(), Shape({3, 2}));
  EXPECT_TRUE(r->SharesMemoryWith(t));
  EXPECT_EQ(r->raw_data(), t.raw_data());
  ASSERT_TRUE(r->Fill(9).ok());
  EXPECT_EQ(t.ToVector(), std::vector<float>(6, 9));
  StatusOr<Tensor> bad = t.Reshape({4, 2});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "cannot reshape (2, 3) (6 elements) to (4, 2)");
}

TEST_F(TensorTest, SliceViewsRows) {
  Tensor t = On({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  StatusOr<Tensor> s = t.Slice(1, 3);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->shape(), Shape({2, 2}));
  EXPECT_EQ(s->ToVector(), std::vector<float>({2, 3, 4, 5}));
  EXPECT_TRUE(s->SharesMemoryWith(t));
  EXPECT_FALSE(s->SharesMemoryWith(*t.Slice(3, 4)));
  ASSERT_TRUE(s->Fill(0).ok());
  EXPECT_EQ(t.ToVector(), std::vector<float>({0, 1, 0, 0, 0, 0, 6, 7}));
  EXPECT_TRUE(t.Slice(4, 4).ok());  // empty slice at the end
  StatusOr<Tensor> bad = t.Slice(3, 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "slice [3, 5) out of range for shape (4, 2)");
}

TEST_F(TensorTest, CopiesBetweenDevices) {
  Tensor src = On({1, 2, 3, 4}, {2, 2});
  Tensor dst = Tensor::Zeros({2, 2}, DType::kFloat32, dev_);
  ASSERT_TRUE(dst.CopyFrom(src).ok());
  EXPECT_EQ(dst.ToVector(), std::vector<float>({1, 2, 3, 4}));
  EXPECT_FALSE(dst.SharesMemoryWith(src));
  StatusOr<Tensor> host = dst.CopyTo(Device::CPU());
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(host->device(), Device::CPU());
  EXPECT_EQ(host->data<float>()[3], 4.0f);
  Tensor clone = src.Clone();
  EXPECT_EQ(clone.device(), dev_);
  EXPECT_FALSE(clone.SharesMemoryWith(src));
  EXPECT_EQ(clone.ToVector(), src.ToVector());
}

TEST_F(TensorTest, CopyMismatchNamesBothShapes) {
  Tensor a = Tensor::Zeros({2, 3}, DType::kFloat32, dev_);
  Tensor b = Tensor::Zeros({3, 2}, DType::kFloat32, dev_);
  Status s = a.CopyFrom(b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "copy: shape mismatch: (2, 3) float32 vs (3, 2) float32");
  Tensor c = Tensor::Zeros({2, 3}, DType::kInt32, dev_);
  EXPECT_EQ(a.CopyFrom(c).message(),
            "copy: shape mismatch: (2, 3) float32 vs (2, 3) int32");
  EXPECT_FALSE(a.CopyFrom(Tensor()).ok());
}

TEST_F(TensorTest, WrapRunsReleaseWhenLastViewGoes) {
  std::vector<float> host = {1, 2, 3};
  int released = 0;
  {
    Tensor w = Tensor::Wrap(host.data(), {3}, DType::kFloat32, Device::CPU(),
                            [&released] { ++released; });
    Tensor view = *w.Reshape({1, 3});
    EXPECT_EQ(view.ToVector(), host);
    w = Tensor();
    EXPECT_EQ(released, 0);
  }
  EXPECT_EQ(released, 1);
}

TEST_F(TensorTest, DebugString) {
  Tensor t = On({1, 2, 3}, {3});
  EXPECT_EQ(t.DebugString(2),
            "float32 (3) on " + dev_.ToString() + ": [1, 2, ...]");
}

TEST(TensorDeathTest, WrongTypedAccessIsAProgrammerBug) {
  Tensor t = Tensor::Zeros({2}, DType::kInt32);
  EXPECT_DEATH((void)t.data<float>(), "tensor holds int32, accessed as float32");
}

}  // namespace
}  // namespace kvtrain
