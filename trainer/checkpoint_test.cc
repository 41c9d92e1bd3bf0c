#include "trainer/checkpoint.h"

#include <gtest/gtest.h>

#include "base/file.h"

namespace kvtrain {
namespace {

std::string Tmp(const std::string& n) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + n; }

TEST(CheckpointTest, PathsFollowMxnetNaming) {
  EXPECT_EQ(SymbolPath("out/mnist"), "out/mnist-symbol.txt");
  EXPECT_EQ(ParamsPath("out/mnist", 3), "out/mnist-0003.params");
  EXPECT_EQ(StatesPath("m", 12), "m-0012.states");
}

TEST(CheckpointTest, RoundTrip) {
  ModelArrays a;
  a.args["fc1_weight"] = Tensor::FromVector({1, 2, 3, 4, 5, 6}, {2, 3});
  a.args["fc1_bias"] = Tensor::FromVector({-1, 0.5f}, {2});
  a.aux["bn_moving_var"] = Tensor::FromVector({7}, {1});
  ASSERT_TRUE(SaveParams(Tmp("m-0002.params"), a, 2).ok());
  int epoch = 0;
  StatusOr<ModelArrays> b = LoadParams(Tmp("m-0002.params"), &epoch);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(epoch, 2);
  ASSERT_EQ(b->args.size(), 2u);
  EXPECT_EQ(b->args["fc1_weight"].shape(), Shape({2, 3}));
  EXPECT_EQ(b->args["fc1_weight"].ToVector(), a.args["fc1_weight"].ToVector());
  EXPECT_EQ(b->args["fc1_bias"].ToVector(), a.args["fc1_bias"].ToVector());
  EXPECT_EQ(b->aux["bn_moving_var"].ToVector(), std::vector<float>({7}));
}

TEST(CheckpointTest, CorruptFilesAreNamed) {
  EXPECT_EQ(LoadParams(Tmp("none.params")).status().code(), Status::Code::kNotFound);
  ModelArrays a;
  a.args["w"] = Tensor::FromVector(std::vector<float>(100, 1), {100});
  StatusOr<std::string> bytes = EncodeParams(a, 1);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomic(Tmp("cut.params"), bytes->substr(0, bytes->size() - 37)).ok());
  StatusOr<ModelArrays> cut = LoadParams(Tmp("cut.params"));
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), Status::Code::kDataLoss);
  EXPECT_NE(cut.status().message().find(Tmp("cut.params")), std::string::npos);
  ModelArrays ints;
  ints.args["i"] = Tensor::Zeros({2}, DType::kInt32);
  EXPECT_EQ(EncodeParams(ints, 1).status().message(),
            "checkpoint: i is int32, only float32 is saved");
}

TEST(CheckpointTest, LocalStatesRoundTrip) {
  ASSERT_TRUE(WriteLocalStates(Tmp("s.states"), "opaque bytes").ok());
  EXPECT_EQ(*ReadLocalStates(Tmp("s.states")), "opaque bytes");
  ASSERT_TRUE(WriteFileAtomic(Tmp("junk.states"), "junk").ok());
  EXPECT_FALSE(ReadLocalStates(Tmp("junk.states")).ok());
}

}  // namespace
}  // namespace kvtrain
