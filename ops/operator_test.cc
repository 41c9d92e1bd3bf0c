// The op registry, attribute parsing, backward-needs defaults and the
// NaN/Inf check.
#include "ops/operator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "tensor/test_device.h"

namespace kvtrain {
namespace {

TEST(OperatorRegistryTest, KnowsEveryOperator) {
  const std::vector<std::string> names = RegisteredOperators();
  for (const char* op :
       {"Activation", "BatchNorm", "Concat", "Convolution", "Dropout",
        "Embedding", "Flatten", "FullyConnected", "LinearRegressionOutput",
        "Pooling", "Reshape", "SoftmaxOutput", "elemwise_add", "elemwise_mul",
        "elemwise_sub", "sgd_update", "sgd_mom_update", "nag_mom_update",
        "adam_update", "adagrad_update", "ftrl_update", "rmsprop_update",
        "signsgd_update", "signum_update",
        "_CrossDeviceCopy", "_plus_scalar", "_minus_scalar", "_rminus_scalar",
        "_mul_scalar", "_div_scalar", "_rdiv_scalar"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), op), names.end()) << op;
  }
}

TEST(OperatorRegistryTest, UnknownOperatorListsTheKnownOnes) {
  auto op = CreateOperator("Convolution3D", "c", {});
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(op.status().message(),
            "unknown operator \"Convolution3D\" (for c); known operators: "
            "Activation, BatchNorm, BlockGrad, Cast, Concat, Convolution, Deconvolution, Dropout, "
            "Embedding, Flatten, FullyConnected, LRN, LeakyReLU, LinearRegressionOutput, "
            "Pooling, Reshape, SoftmaxOutput, adagrad_update, adam_update, broadcast_add, "
            "broadcast_axis, broadcast_div, broadcast_equal, broadcast_greater, "
            "broadcast_greater_equal, broadcast_lesser, broadcast_lesser_equal, broadcast_like, "
            "broadcast_maximum, broadcast_minimum, broadcast_mul, broadcast_not_equal, "
            "broadcast_power, broadcast_sub, broadcast_to, clip, "
            "elemwise_add, elemwise_mul, elemwise_sub, ftrl_update, identity, "
            "log_softmax, nag_mom_update, rmsprop_update, sgd_mom_update, sgd_update, "
            "signsgd_update, signum_update, softmax, "
            "stop_gradient");
}

TEST(OperatorRegistryTest, IdentityAndNames) {
  auto op = CreateOperator("FullyConnected", "fc1", {{"num_hidden", "3"}});
  ASSERT_TRUE(op.ok());
  EXPECT_EQ((*op)->type(), "FullyConnected");
  EXPECT_EQ((*op)->name(), "fc1");
  EXPECT_EQ((*op)->Describe(), "fc1 (FullyConnected)");
  EXPECT_EQ((*op)->input_name(1), "fc1_weight");
  (*op)->set_input_names({"x", "w", "b"});
  EXPECT_EQ((*op)->input_name(1), "w");
  EXPECT_EQ((*op)->attrs().at("num_hidden"), "3");
  EXPECT_EQ(CreateOperator("FullyConnected", "", {{"num_hidden", "3"}})
                .status()
                .message(),
            "an operator of type FullyConnected needs a name");
}

TEST(AttrReaderTest, TypedValuesAndErrors) {
  OpAttrs attrs = {{"a", " 12 "}, {"b", "0.5"}, {"c", "true"},
                   {"d", "(3, 4)"}, {"e", "avg"}, {"f", "(2,-1,0)"}};
  AttrReader r("x (T)", attrs);
  int64_t a = 0;
  double b = 0;
  bool c = false, present = false;
  std::vector<int64_t> d, f;
  int e = -1;
  EXPECT_TRUE(r.Int("a", &a, 0, 100).ok());
  EXPECT_TRUE(r.Float("b", &b, 0, 1, 0).ok());
  EXPECT_TRUE(r.Bool("c", &c, false).ok());
  EXPECT_TRUE(r.Tuple("d", 2, 1, &d, &present).ok());
  EXPECT_TRUE(r.Enum("e", {"max", "avg"}, &e, 0).ok());
  EXPECT_TRUE(r.IntList("f", -1, &f, &present).ok());
  EXPECT_TRUE(r.Finish().ok());
  EXPECT_EQ(a, 12);
  EXPECT_EQ(b, 0.5);
  EXPECT_TRUE(c);
  EXPECT_EQ(d, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(e, 1);
  EXPECT_EQ(f, (std::vector<int64_t>{2, -1, 0}));
  EXPECT_EQ(r.Int("a", &a, 20, 100).message(),
            "x (T): attribute a=\" 12 \": expected an integer in [20, 100]");
  EXPECT_EQ(r.Bool("b", &c, false).message(),
            "x (T): attribute b=\"0.5\": expected true or false");
  EXPECT_EQ(r.Float("c", &b, 0, 1, 0).message(),
            "x (T): attribute c=\"true\": expected a number in [0, 1]");
}

TEST(OperatorRegistryTest, DescribeReadsWhatTheFactoryParses) {
  StatusOr<OpDoc> fc = DescribeOperator("FullyConnected");
  ASSERT_TRUE(fc.ok()) << fc.status().ToString();
  EXPECT_EQ(fc->arguments, (std::vector<std::string>{"data", "weight", "bias"}));
  ASSERT_GE(fc->attrs.size(), 3u);
  EXPECT_EQ(fc->attrs[0].key, "num_hidden");
  EXPECT_TRUE(fc->attrs[0].required);
  EXPECT_EQ(fc->attrs[1].key, "no_bias");
  EXPECT_EQ(fc->attrs[1].kind, "bool");
  EXPECT_EQ(fc->attrs[1].fallback, "false");
  EXPECT_FALSE(fc->attrs[1].required);

  // Required tuples are read as placeholders: every attribute is listed.
  StatusOr<OpDoc> conv = DescribeOperator("Convolution");
  ASSERT_TRUE(conv.ok()) << conv.status().ToString();
  std::vector<std::string> keys;
  for (const AttrDoc& a : conv->attrs) keys.push_back(a.key);
  for (const char* k : {"kernel", "stride", "pad", "num_filter"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  }
  EXPECT_FALSE(conv->arguments.empty());

  // Every registered op can be described; a normal create still checks.
  for (const std::string& type : RegisteredOperators()) {
    EXPECT_TRUE(DescribeOperator(type).ok()) << type;
  }
  EXPECT_FALSE(CreateOperator("FullyConnected", "fc", {}).ok());
  EXPECT_EQ(DescribeOperator("NoSuchOp").status().code(), Status::Code::kNotFound);
}

TEST(CheckFiniteTest, CountsNanAndInf) {
  KV_SKIP_IF_NO_TEST_DEVICE();
  std::vector<float> v(100, 1.0f);
  EXPECT_TRUE(CheckFinite(*Tensor::FromVector(v, {100}).CopyTo(TestDevice()),
                          "x").ok());
  v[3] = std::numeric_limits<float>::quiet_NaN();
  v[70] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(CheckFinite(*Tensor::FromVector(v, {100}).CopyTo(TestDevice()),
                        "output 0 of fc1")
                .message(),
            "output 0 of fc1 has 2 NaN/Inf values (of 100)");
}

}  // namespace
}  // namespace kvtrain
