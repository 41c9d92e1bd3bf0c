// MNIST-format directories: loading, the checks, and parts read per epoch
// against the whole loaded set's.
#include "engine/io/data_iter.h"

#include <sys/stat.h>
#include <zlib.h>

#include <fstream>
#include <random>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

std::string Dir(const std::string& name) {
  std::string d = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(d.c_str(), 0755);
  return d;
}

void WriteIdx(const std::string& path, std::vector<uint32_t> dims,
              const std::string& payload, bool gz = true) {
  std::string h = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>(d >> s));
  }
  const std::string all = h + payload;
  if (!gz) {
    std::ofstream(path, std::ios::binary) << all;
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, all.data(), all.size());
  gzclose(f);
}

TEST(MnistTest, LoadsADirectoryAndChecksIt) {
  const std::string dir = Dir("mnist_ok");
  WriteIdx(dir + "/t10k-images-idx3-ubyte.gz", {3, 2, 2}, std::string(12, '\x10'));
  WriteIdx(dir + "/t10k-labels-idx1-ubyte.gz", {3}, std::string("\x01\x02\x09", 3));
  IterOptions o;
  o.batch_size = 3;
  o.flat = false;
  StatusOr<std::unique_ptr<DataIter>> it = NewMnistIter(dir, false, o);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_EQ((*it)->data_shape(), Shape({3, 1, 2, 2}));
  Batch b;
  ASSERT_TRUE(*(*it)->Next(&b));
  EXPECT_EQ(b.label.ToVector(), std::vector<float>({1, 2, 9}));

  EXPECT_EQ(NewMnistIter(dir + "/none", false, o).status().message(),
            "data directory " + dir + "/none does not exist");
  EXPECT_EQ(NewMnistIter(dir, true, o).status().message(),
            dir + "/train-images-idx3-ubyte[.gz] not found");

  const std::string bad = Dir("mnist_bad");
  WriteIdx(bad + "/t10k-images-idx3-ubyte.gz", {2, 2, 2}, std::string(8, '\x10'));
  WriteIdx(bad + "/t10k-labels-idx1-ubyte.gz", {3}, std::string("\x01\x02\x03", 3));
  EXPECT_EQ(NewMnistIter(bad, false, o).status().message(),
            bad + "/t10k-labels-idx1-ubyte.gz has 3 labels but " + bad +
                "/t10k-images-idx3-ubyte.gz has 2 images");
  WriteIdx(bad + "/t10k-labels-idx1-ubyte.gz", {2}, std::string("\x01\x0c", 2));
  EXPECT_EQ(NewMnistIter(bad, false, o).status().message(),
            bad + "/t10k-labels-idx1-ubyte.gz: label 12 at index 1 is not a class 0-9");
}

TEST(MnistTest, TheBundledFashionMnist) {
  struct stat st;
  if (stat(kDefaultMnistDir, &st) != 0) {
    GTEST_SKIP() << kDefaultMnistDir << " is missing (tools/setup.sh installs "
                 << "dataset-fashion-mnist)";
  }
  Tensor images, labels;
  ASSERT_TRUE(LoadMnist(kDefaultMnistDir, false, &images, &labels).ok());
  EXPECT_EQ(images.shape(), Shape({10000, 28, 28}));
  std::vector<int> per_class(10);
  for (float l : labels.ToVector()) per_class[static_cast<int>(l)]++;
  EXPECT_EQ(per_class, std::vector<int>(10, 1000));
  // A part of the (gzipped) files, read per epoch, is the loaded set's part.
  IterOptions o;
  o.batch_size = 100;
  o.shuffle = true;
  o.num_parts = 7;
  o.part_index = 3;
  auto whole =
      std::move(NewArrayIter(images.Reshape({10000, 784}).value(), labels, o)).value();
  auto part = std::move(NewMnistIter(kDefaultMnistDir, false, o)).value();
  for (int epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE(whole->StartEpoch(epoch).ok());
    ASSERT_TRUE(part->StartEpoch(epoch).ok());
    Batch a, b;
    while (*whole->Next(&a)) {
      ASSERT_TRUE(*part->Next(&b));
      EXPECT_EQ(b.data.ToVector(), a.data.ToVector());
      EXPECT_EQ(b.label.ToVector(), a.label.ToVector());
    }
    EXPECT_FALSE(*part->Next(&b));
  }
}

// An MNIST-format directory of `n` images of 5x3 random pixels, plain or
// gzipped.
void WriteMnist(const std::string& dir, int n, bool gz, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string pixels, labels;
  for (int i = 0; i < n * 15; ++i) pixels.push_back(static_cast<char>(rng()));
  for (int i = 0; i < n; ++i) labels.push_back(static_cast<char>(rng() % 10));
  const std::string ext = gz ? ".gz" : "";
  WriteIdx(dir + "/train-images-idx3-ubyte" + ext, {static_cast<uint32_t>(n), 5, 3}, pixels,
           gz);
  WriteIdx(dir + "/train-labels-idx1-ubyte" + ext, {static_cast<uint32_t>(n)}, labels, gz);
}

// Every part of an MNIST directory, read per epoch, holds exactly the
// examples, in the same order and with the same pixels, that cutting the
// whole loaded set gives (the way every worker loaded it before).
TEST(MnistTest, APartIsTheWholeSetsPart) {
  for (bool gz : {false, true}) {
    const std::string dir = Dir(gz ? "mnist_parts_gz" : "mnist_parts");
    WriteMnist(dir, 1037, gz, 5);
    Tensor images, labels;
    ASSERT_TRUE(LoadMnist(dir, true, &images, &labels).ok());
    for (int parts : {1, 2, 3, 7, 128}) {
      for (int part : {0, 1, parts / 2, parts - 1}) {
        if (part >= parts) continue;
        for (int64_t num_examples : {0, 300}) {
          SCOPED_TRACE(std::string(gz ? "gzipped" : "plain") + ", part " +
                       std::to_string(part) + " of " + std::to_string(parts) + ", " +
                       std::to_string(num_examples) + " examples");
          IterOptions o;
          o.batch_size = 8;
          o.shuffle = true;
          o.seed = 3;
          o.num_parts = parts;
          o.part_index = part;
          o.num_examples = num_examples;
          o.prefetch = part % 2 == 0;
          auto whole = std::move(NewArrayIter(images.Reshape({1037, 15}).value(), labels, o))
                           .value();
          StatusOr<std::unique_ptr<DataIter>> it = NewMnistIter(dir, true, o);
          ASSERT_TRUE(it.ok()) << it.status();
          EXPECT_EQ((*it)->num_batches(), whole->num_batches());
          EXPECT_EQ((*it)->max_part_batches(), whole->max_part_batches());
          for (int epoch = 0; epoch < 3; ++epoch) {
            ASSERT_TRUE((*it)->StartEpoch(epoch).ok());
            ASSERT_TRUE(whole->StartEpoch(epoch).ok());
            Batch a, b;
            int64_t batches = 0;
            while (*whole->Next(&a)) {
              ASSERT_TRUE(*(*it)->Next(&b));
              EXPECT_EQ(b.data.ToVector(), a.data.ToVector()) << "epoch " << epoch;
              EXPECT_EQ(b.label.ToVector(), a.label.ToVector()) << "epoch " << epoch;
              EXPECT_EQ(b.pad, a.pad);
              ++batches;
            }
            EXPECT_FALSE(*(*it)->Next(&b));
            EXPECT_EQ(batches, whole->num_batches());
          }
        }
      }
    }
  }
}

// Damaged files are named in the error, plain or gzipped, whatever part.
TEST(MnistTest, DamagedFilesAreNamed) {
  for (bool gz : {false, true}) {
    const std::string ext = gz ? ".gz" : "";
    const std::string dir = Dir(gz ? "mnist_damaged_gz" : "mnist_damaged");
    const std::string images = dir + "/train-images-idx3-ubyte" + ext;
    const std::string labels = dir + "/train-labels-idx1-ubyte" + ext;
    IterOptions o;
    o.batch_size = 4;
    o.shuffle = true;
    o.num_parts = 3;
    o.part_index = 2;
    // The pixels stop short of what the header promises.
    WriteMnist(dir, 40, gz, 1);
    WriteIdx(images, {40, 5, 3}, std::string(40 * 15 - 7, 'x'), gz);
    EXPECT_EQ(NewMnistIter(dir, true, o).status().message(),
              images + ": truncated: header says (40, 5, 3) uint8 (600 bytes of data) but "
                       "only 593 follow");
    // Not an IDX file.
    WriteIdx(images, {40, 5, 3}, std::string(600, 'x'), gz);
    std::string bytes = "PK" + std::string(700, 'x');
    if (gz) {
      gzFile f = gzopen(images.c_str(), "wb");
      gzwrite(f, bytes.data(), bytes.size());
      gzclose(f);
    } else {
      std::ofstream(images, std::ios::binary) << bytes;
    }
    EXPECT_EQ(NewMnistIter(dir, true, o).status().message(),
              images + ": bad magic 0x50 0x4B: an IDX file starts with two zero bytes (is it "
                       "an IDX file?)");
    // Images and labels disagree on the count.
    WriteIdx(images, {41, 5, 3}, std::string(41 * 15, 'x'), gz);
    EXPECT_EQ(NewMnistIter(dir, true, o).status().message(),
              labels + " has 40 labels but " + images + " has 41 images");
    // Images of another shape.
    WriteIdx(images, {40, 15}, std::string(40 * 15, 'x'), gz);
    EXPECT_EQ(NewMnistIter(dir, true, o).status().message(),
              images + ": expected (N, rows, cols) uint8 images, got (40, 15) uint8");
  }
}

}  // namespace
}  // namespace kvtrain
