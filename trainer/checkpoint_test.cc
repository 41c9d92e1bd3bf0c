#include "trainer/checkpoint.h"

#include <gtest/gtest.h>

#include "base/file.h"
#include "proto/checkpoint.pb.h"

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

// A flipped bit is caught by the file's checksum; where the damage is in
// an array's data the error names the array.
TEST(CheckpointTest, FlippedBitsAreCaughtAndNamed) {
  ModelArrays a;
  a.args["fc1_weight"] = Tensor::FromVector(std::vector<float>(1000, 0.5f), {1000});
  a.args["fc1_bias"] = Tensor::FromVector({5, 6}, {2});
  const std::string p = Tmp("flip.params");
  ASSERT_TRUE(SaveParams(p, a, 1).ok());
  const std::string raw = *ReadWholeFile(p);
  // Arrays are saved in name order: fc1_bias, then fc1_weight's 4000 bytes,
  // which hold the middle of the file.
  const size_t in_weight = raw.size() / 2;
  std::string bad = raw;
  bad[in_weight] ^= 0x20;
  ASSERT_TRUE(WriteFileAtomic(p, bad).ok());
  StatusOr<ModelArrays> loaded = LoadParams(p);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Status::Code::kDataLoss);
  EXPECT_EQ(loaded.status().message(),
            p + ": array arg:fc1_weight: checksum mismatch (the file is corrupt)");
  // In the epoch field (the file's second byte): the file's checksum.
  bad = raw;
  bad[1] ^= 0x02;
  ASSERT_TRUE(WriteFileAtomic(p, bad).ok());
  loaded = LoadParams(p);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message().rfind(p + ": checksum mismatch", 0), 0u)
      << loaded.status();
}

TEST(CheckpointTest, EmptyAndCutFilesAreRefused) {
  ModelArrays a;
  a.args["fc1_weight"] = Tensor::FromVector({1, 2, 3, 4}, {2, 2});
  a.args["fc1_bias"] = Tensor::FromVector({5, 6}, {2});
  StatusOr<std::string> bytes = EncodeParams(a, 1);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(WriteFileAtomic(Tmp("empty.params"), "").ok());
  StatusOr<ModelArrays> empty = LoadParams(Tmp("empty.params"));
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), Tmp("empty.params") + ": the file is empty");
  // Every cut of the file is refused, those at an array's end included (a
  // protobuf parser alone accepts them: they are well-formed messages).
  int refused = 0;
  for (size_t n = 1; n < bytes->size(); ++n) {
    StatusOr<ModelArrays> cut = DecodeParams(bytes->substr(0, n), "cut.params");
    EXPECT_FALSE(cut.ok()) << "cut at " << n << " of " << bytes->size();
    if (!cut.ok()) {
      EXPECT_EQ(cut.status().code(), Status::Code::kDataLoss);
      EXPECT_EQ(cut.status().message().rfind("cut.params: ", 0), 0u) << cut.status();
      ++refused;
    }
  }
  EXPECT_EQ(refused, static_cast<int>(bytes->size()) - 1);
}

TEST(CheckpointTest, ShapesWhoseSizeWrapsAreRefused) {
  // 2^62 x 4 elements x 4 bytes wraps to 0 bytes: it must not match the
  // empty data (and allocate an impossible array).
  proto::ParamsFile file;
  file.set_epoch(1);
  proto::NamedArray* a = file.add_arrays();
  a->set_name("arg:w");
  a->add_shape(int64_t{1} << 62);
  a->add_shape(4);
  file.set_num_arrays(1);
  StatusOr<ModelArrays> d = DecodeParams(file.SerializeAsString(), "wrap.params");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "wrap.params: array arg:w of shape (4611686018427387904, 4) "
                                  "holds 0 bytes");
}

TEST(CheckpointTest, AnotherEpochsParamsAreRefused) {
  ModelArrays a;
  a.args["w"] = Tensor::FromVector({1}, {1});
  const std::string prefix = Tmp("ep");
  ASSERT_TRUE(SaveParams(ParamsPath(prefix, 1), a, 2).ok());  // a copied epoch-2 file
  StatusOr<ModelArrays> b = LoadCheckpointParams(prefix, 1);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(),
            ParamsPath(prefix, 1) + ": holds the arrays after epoch 2, not 1");
  ASSERT_TRUE(SaveParams(ParamsPath(prefix, 1), a, 1).ok());
  StatusOr<ModelArrays> c = LoadCheckpointParams(prefix, 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->source, ParamsPath(prefix, 1));
}

TEST(CheckpointTest, StatesMustBeTheOnesSavedWithTheParams) {
  ModelArrays a;
  a.args["w"] = Tensor::FromVector({1}, {1});
  ASSERT_TRUE(WriteLocalStates(Tmp("s1.states"), "states of epoch 1").ok());
  ASSERT_TRUE(WriteLocalStates(Tmp("s2.states"), "states of epoch 2").ok());
  const uint64_t digest = StatesDigest(*ReadWholeFile(Tmp("s1.states")));
  ASSERT_TRUE(SaveParams(Tmp("s-0001.params"), a, 1, digest).ok());
  StatusOr<ModelArrays> p = LoadParams(Tmp("s-0001.params"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->states_digest, digest);
  EXPECT_TRUE(CheckStatesBelong(Tmp("s1.states"), *p).ok());
  Status other = CheckStatesBelong(Tmp("s2.states"), *p);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.message(), Tmp("s2.states") + ": not the optimizer states saved with " +
                                 Tmp("s-0001.params") +
                                 " (another epoch's, or cut or changed since)");
  ASSERT_TRUE(WriteFileAtomic(Tmp("s0.states"), "").ok());
  EXPECT_EQ(CheckStatesBelong(Tmp("s0.states"), *p).message(),
            Tmp("s0.states") + ": the file is empty");
  EXPECT_EQ(CheckStatesBelong(Tmp("none.states"), *p).code(), Status::Code::kNotFound);
}

TEST(CheckpointTest, ModelsAboveTwoGigabytesAreAClearError) {
  // Never touched: the size check comes before any copy.
  ModelArrays a;
  a.args["huge"] = Tensor::Empty(Shape({(int64_t{1} << 29) + 1}));
  StatusOr<std::string> bytes = EncodeParams(a, 1);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("a params file holds at most 2147483647"),
            std::string::npos)
      << bytes.status();
  EXPECT_FALSE(SaveParams(Tmp("huge.params"), a, 1).ok());
  EXPECT_EQ(ReadWholeFile(Tmp("huge.params")).status().code(), Status::Code::kNotFound);
}

TEST(CheckpointTest, LocalStatesRoundTrip) {
  ASSERT_TRUE(WriteLocalStates(Tmp("s.states"), "opaque bytes").ok());
  EXPECT_EQ(*ReadLocalStates(Tmp("s.states")), "opaque bytes");
  ASSERT_TRUE(WriteFileAtomic(Tmp("junk.states"), "junk").ok());
  EXPECT_FALSE(ReadLocalStates(Tmp("junk.states")).ok());
}

}  // namespace
}  // namespace kvtrain
