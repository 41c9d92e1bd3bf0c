// Embedding: a hand-computed lookup, the weight gradient (duplicates, kAdd
// and kWrite, numeric check), bad indices, shape inference and attributes;
// on a GPU, the CPU comparison and the kernels' clamping.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "ops/op_test_util.h"
#include "tensor/test_device.h"

namespace kvtrain {
namespace {

using op_test::OpRunner;
using op_test::Values;

class EmbeddingTest : public ::testing::Test {
 protected:
  void SetUp() override { KV_SKIP_IF_NO_TEST_DEVICE(); }

  // A runner of Embedding(input_dim, output_dim) over data of `shape`.
  static std::unique_ptr<OpRunner> Runner(int64_t input_dim, int64_t output_dim,
                                          const Shape& shape,
                                          const Device& device = TestDevice()) {
    auto r = OpRunner::Create("Embedding",
                              {{"input_dim", std::to_string(input_dim)},
                               {"output_dim", std::to_string(output_dim)}},
                              {shape}, device);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
};

// weight[r][c] = 10 r + c.
Values Table(int64_t rows, int64_t dim) {
  Values w;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < dim; ++c) w.push_back(10.0f * r + c);
  }
  return w;
}

TEST_F(EmbeddingTest, ForwardLooksUpRows) {
  auto r = Runner(4, 3, {2, 2});
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->out_shapes()[0], (Shape{2, 2, 3}));
  r->SetInput(0, {2, 0, 3, 2});
  r->SetInput(1, Table(4, 3));
  ASSERT_TRUE(r->Forward(false).ok());
  EXPECT_EQ(r->Output(0),
            (Values{20, 21, 22, 0, 1, 2, 30, 31, 32, 20, 21, 22}));
  // kAdd adds the rows onto what is there.
  ASSERT_TRUE(r->Forward(false, OpReq::kAdd).ok());
  EXPECT_EQ(r->Output(0),
            (Values{40, 42, 44, 0, 2, 4, 60, 62, 64, 40, 42, 44}));
}

TEST_F(EmbeddingTest, DuplicateIndicesAccumulateInTheWeightGradient) {
  auto r = Runner(4, 2, {5});
  ASSERT_NE(r, nullptr);
  r->SetInput(0, {1, 1, 3, 1, 0});
  ASSERT_TRUE(r->Forward(true).ok());
  const Values dy = {1, 2, 10, 20, 100, 200, 1000, 2000, 5, 6};
  std::vector<Values> grads = {Values(5, 7.0f), Values(8, 7.0f)};
  ASSERT_TRUE(r->Backward({dy}, {OpReq::kWrite, OpReq::kWrite}, &grads).ok());
  EXPECT_EQ(grads[0], Values(5, 0.0f));  // data: no gradient, zeros
  EXPECT_EQ(grads[1], (Values{5, 6, 1011, 2022, 0, 0, 100, 200}));
}

TEST_F(EmbeddingTest, AddAccumulatesAndWriteOverwrites) {
  auto r = Runner(3, 2, {3});
  ASSERT_NE(r, nullptr);
  r->SetInput(0, {2, 0, 2});
  ASSERT_TRUE(r->Forward(true).ok());
  const Values dy = {1, 2, 3, 4, 5, 6};
  const Values before = {0.5f, 0.5f, -1, -1, 2, 2};
  // kWrite ignores what is there (the runner fills it with NaN first).
  std::vector<Values> write = {Values(3, 9.0f), before};
  ASSERT_TRUE(r->Backward({dy}, {OpReq::kNull, OpReq::kWrite}, &write).ok());
  EXPECT_EQ(write[1], (Values{3, 4, 0, 0, 6, 8}));
  // kAdd adds onto it; kAdd on data leaves it alone.
  std::vector<Values> add = {Values(3, 9.0f), before};
  ASSERT_TRUE(r->Backward({dy}, {OpReq::kAdd, OpReq::kAdd}, &add).ok());
  EXPECT_EQ(add[0], Values(3, 9.0f));
  EXPECT_EQ(add[1], (Values{3.5f, 4.5f, -1, -1, 8, 10}));
}

TEST_F(EmbeddingTest, WeightGradientCheck) {
  auto r = Runner(7, 5, {3, 4});
  ASSERT_NE(r, nullptr);
  // Duplicates and unused rows (5 and 6).
  r->SetInput(0, {0, 3, 3, 1, 4, 0, 2, 3, 1, 1, 4, 0});
  op_test::GradCheckOptions o = op_test::ForInputs({1});
  o.max_elements = 35;  // every weight element
  op_test::CheckGradient(r.get(), o);
}

#ifndef KV_TEST_ON_GPU
// The CPU path checks every index. The GPU kernels clamp instead (below).
TEST(EmbeddingCpuTest, BadIndicesNameThePositionAndTheValue) {
  auto r =
      OpRunner::Create("Embedding", {{"input_dim", "10"}, {"output_dim", "3"}},
                       {{2, 3}}, Device::CPU());
  ASSERT_TRUE(r.ok()) << r.status();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    float value;
    const char* text;
  } cases[] = {
      {-1, "-1"}, {10, "10"}, {1.5f, "1.5"}, {nan, "nan"}, {1e9f, "1e+09"}};
  for (const auto& c : cases) {
    (*r)->SetInput(0, {0, 9, 4, 3, c.value, 2});
    const std::string want =
        "op (Embedding): op_data[1, 1] = " + std::string(c.text) +
        " is not a row index: expected an integer in [0, 10)";
    EXPECT_EQ((*r)->Forward(false).message(), want);
    // Backward checks too, before it writes anywhere.
    std::vector<Values> grads = {Values(6, 0.0f), Values(30, 0.0f)};
    EXPECT_EQ((*r)->Backward({Values(18, 1.0f)}, {OpReq::kNull, OpReq::kWrite},
                             &grads)
                  .message(),
              want);
  }
}
#endif

TEST_F(EmbeddingTest, ShapeInference) {
  auto op = CreateOperator("Embedding", "emb",
                           {{"input_dim", "100"}, {"output_dim", "16"}});
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ((*op)->ListArguments(),
            (std::vector<std::string>{"data", "weight"}));
  std::vector<Shape> in = {{8, 5}, {}}, out(1), aux;
  ASSERT_TRUE((*op)->InferShape(&in, &out, &aux).ok());
  EXPECT_EQ(in[1], (Shape{100, 16}));
  EXPECT_EQ(out[0], (Shape{8, 5, 16}));
  in = {{4}, {100, 16}};
  ASSERT_TRUE((*op)->InferShape(&in, &out, &aux).ok());
  EXPECT_EQ(out[0], (Shape{4, 16}));

  in = {{4}, {100, 15}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "emb (Embedding): emb_weight is (100, 15), expected (input_dim, "
            "output_dim) = (100, 16)");
  in = {{}, {}};
  EXPECT_EQ((*op)->InferShape(&in, &out, &aux).message(),
            "emb (Embedding): the shape of emb_data is unknown");
}

TEST_F(EmbeddingTest, BadAttributes) {
  EXPECT_EQ(CreateOperator("Embedding", "e", {{"output_dim", "4"}})
                .status()
                .message(),
            "e (Embedding): missing attribute input_dim");
  EXPECT_EQ(
      CreateOperator("Embedding", "e", {{"input_dim", "4"}}).status().message(),
      "e (Embedding): missing attribute output_dim");
  EXPECT_EQ(CreateOperator("Embedding", "e",
                           {{"input_dim", "4"}, {"output_dim", "0"}})
                .status()
                .message(),
            "e (Embedding): attribute output_dim=\"0\": expected an integer "
            "in [1, 2147483647]");
  // Beyond 2^24 a float32 index cannot name every row.
  EXPECT_EQ(CreateOperator("Embedding", "e",
                           {{"input_dim", "16777217"}, {"output_dim", "4"}})
                .status()
                .message(),
            "e (Embedding): attribute input_dim=\"16777217\": expected an "
            "integer in [1, 16777216]");
  StatusOr<OpDoc> doc = DescribeOperator("Embedding");
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->attrs.size(), 2u);
  EXPECT_EQ(doc->attrs[0].key, "input_dim");
  EXPECT_TRUE(doc->attrs[0].required);
  EXPECT_EQ(doc->attrs[1].key, "output_dim");
}

#ifdef KV_TEST_ON_GPU
TEST_F(EmbeddingTest, GpuMatchesCpu) {
  // Many positions per row, so the GPU's atomic adds collide.
  const int64_t rows = 50, dim = 33, n = 64 * 20;
  Values data = op_test::Random(n, 5, 0, static_cast<float>(rows));
  for (float& v : data) v = std::floor(v);
  op_test::ExpectSameOnDevice(
      "Embedding",
      {{"input_dim", std::to_string(rows)},
       {"output_dim", std::to_string(dim)}},
      {{64, 20}}, {data, op_test::Random(rows * dim, 6)}, TestDevice());
}

TEST_F(EmbeddingTest, GpuClampsBadIndices) {
  auto r = Runner(4, 2, {5});
  ASSERT_NE(r, nullptr);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  r->SetInput(0, {-3, 7, 2.7f, nan, 1});
  r->SetInput(1, Table(4, 2));
  ASSERT_TRUE(r->Forward(false).ok());
  EXPECT_EQ(r->Output(0), (Values{0, 1, 30, 31, 20, 21, 0, 1, 10, 11}));
  std::vector<Values> grads = {Values(5, 0.0f), Values(8, 0.0f)};
  ASSERT_TRUE(
      r->Backward({Values(10, 1.0f)}, {OpReq::kWrite, OpReq::kWrite}, &grads)
          .ok());
  EXPECT_EQ(grads[1], (Values{2, 2, 1, 1, 1, 1, 1, 1}));
}
#endif

}  // namespace
}  // namespace kvtrain
