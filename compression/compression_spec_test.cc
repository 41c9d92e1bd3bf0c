// Tests for the gradient compression specs of compression/compression.h
// (compression/compression_spec.cc): parsing, checks and their messages, pulls,
// names.
#include "compression/compression.h"

#include <gtest/gtest.h>

#include <string>

#include "compression/compression_test_util.h"

namespace kvtrain {
namespace kv {

using namespace testutil;  // NOLINT: the shared test constants and checks

TEST(SpecTest, ParseValidTypes) {
  auto none = ParseCompression("none", 0.0f);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->type(), kNone);
  auto one = ParseCompression("1bit", 0.0f);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->type(), kOneBit);
  auto fp16 = ParseCompression("fp16", -1.0f);  // the threshold is 2bit's only
  ASSERT_TRUE(fp16.ok()) << fp16.status();
  EXPECT_EQ(fp16->type(), kFp16);
  auto two = ParseCompression("2bit", 0.5f);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->type(), kTwoBit);
  EXPECT_EQ(two->threshold(), 0.5f);
  EXPECT_TRUE(CheckCompression(*two).ok());
}

TEST(SpecTest, TwoBitThresholdMustBeFiniteAndPositive) {
  struct Case {
    float threshold;
    const char* named;  // how the message shows it
  };
  for (const Case& c : {Case{0.0f, "threshold 0"}, Case{-1.0f, "threshold -1"},
                        Case{kNaN, "threshold nan"}, Case{kInf, "threshold inf"},
                        Case{-kInf, "threshold -inf"}}) {
    SCOPED_TRACE(c.named);
    auto spec = ParseCompression("2bit", c.threshold);
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), Status::Code::kInvalidArgument) << spec.status();
    EXPECT_TRUE(Contains(spec.status().message(), "threshold")) << spec.status();
    EXPECT_TRUE(Contains(spec.status().message(), c.named)) << spec.status();
    proto::GradientCompression raw;
    raw.set_type(kTwoBit);
    raw.set_threshold(c.threshold);
    const Status st = CheckCompression(raw);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st;
    EXPECT_TRUE(Contains(st.message(), "threshold")) << st;
  }
}

TEST(SpecTest, UnknownTypeListsTheValidOnes) {
  for (const char* type : {"3bit", "FP16", "int8"}) {
    auto spec = ParseCompression(type, 0.5f);
    ASSERT_FALSE(spec.ok()) << type;
    EXPECT_EQ(spec.status().code(), Status::Code::kInvalidArgument);
    const std::string& msg = spec.status().message();
    EXPECT_TRUE(Contains(msg, type)) << msg;
    for (const char* valid : {"none", "2bit", "1bit", "fp16"}) {
      EXPECT_TRUE(Contains(msg, valid)) << msg;
    }
  }
  proto::GradientCompression raw;
  raw.set_type(static_cast<CompressionType>(9));
  const Status st = CheckCompression(raw);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st;
  EXPECT_TRUE(ContainsNumber(st.message(), 9)) << st;
}

TEST(SpecTest, PullsAreHalvesWhereAsked) {
  // The default: halves for fp16 only; pull fp16 adds them to 2bit and
  // 1bit; pull float32 keeps fp16's answers exact.
  struct Case {
    const char* type;
    const char* pull;
    bool half;
  };
  for (const Case& c : {Case{"fp16", "", true}, Case{"2bit", "", false}, Case{"1bit", "", false},
                        Case{"2bit", "fp16", true}, Case{"1bit", "fp16", true},
                        Case{"fp16", "float32", false}, Case{"2bit", "float32", false},
                        Case{"none", "", false}, Case{"none", "float32", false}}) {
    SCOPED_TRACE(std::string(c.type) + " pull '" + c.pull + "'");
    auto spec = ParseCompression(c.type, 0.5f, 0, c.pull);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(HalfPulls(*spec), c.half);
    EXPECT_EQ(PullName(spec->pull()), c.pull);
  }
  auto unknown = ParseCompression("2bit", 0.5f, 0, "bf16");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(Contains(unknown.status().message(), "unknown pull 'bf16'")) << unknown.status();
  EXPECT_TRUE(Contains(unknown.status().message(), "float32, fp16")) << unknown.status();
  auto none = ParseCompression("none", 0.5f, 0, "fp16");
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(Contains(none.status().message(), "pull fp16 needs a type")) << none.status();
  proto::GradientCompression raw;
  raw.set_type(kTwoBit);
  raw.set_threshold(0.5f);
  raw.set_pull(static_cast<proto::GradientCompression::Pull>(7));
  const Status st = CheckCompression(raw);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st;
  EXPECT_TRUE(ContainsNumber(st.message(), 7)) << st;
}

TEST(SpecTest, NamesRoundTrip) {
  EXPECT_EQ(CompressionName(kNone), "none");
  EXPECT_EQ(CompressionName(kTwoBit), "2bit");
  EXPECT_EQ(CompressionName(kOneBit), "1bit");
  EXPECT_EQ(CompressionName(kFp16), "fp16");
  for (CompressionType type : {kNone, kTwoBit, kOneBit, kFp16}) {
    auto spec = ParseCompression(CompressionName(type), 0.5f);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->type(), type);
    EXPECT_TRUE(CheckCompression(*spec).ok());
  }
}

}  // namespace kv
}  // namespace kvtrain
