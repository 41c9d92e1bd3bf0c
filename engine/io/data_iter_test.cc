#include "engine/io/data_iter.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

// Data rows [i, i, ...] and labels i, so batches reveal which examples they hold.
void MakeData(int64_t n, int64_t width, Tensor* data, Tensor* label) {
  *data = Tensor::Empty({n, width}, DType::kFloat32);
  *label = Tensor::Empty({n}, DType::kInt32);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < width; ++j) data->data<float>()[i * width + j] = i;
    label->data<int32_t>()[i] = static_cast<int32_t>(i);
  }
}

std::vector<std::vector<int>> Epoch(DataIter* it, std::vector<int>* pads = nullptr) {
  std::vector<std::vector<int>> out;
  Batch b;
  while (true) {
    StatusOr<bool> more = it->Next(&b);
    EXPECT_TRUE(more.ok());
    if (!*more) break;
    std::vector<int> ids;
    for (float v : b.label.ToVector()) ids.push_back(static_cast<int>(v));
    // The data rows match the labels.
    const std::vector<float> d = b.data.ToVector();
    const int64_t width = b.data.size() / b.data.dim(0);
    for (size_t r = 0; r < ids.size(); ++r) EXPECT_EQ(d[r * width], ids[r]);
    out.push_back(ids);
    if (pads) pads->push_back(b.pad);
  }
  return out;
}

// An iterator over MakeData rows, unscaled so rows keep their ids.
std::unique_ptr<DataIter> Iter(int64_t n, IterOptions o) {
  Tensor data, label;
  MakeData(n, 3, &data, &label);
  o.scale = 1;
  StatusOr<std::unique_ptr<DataIter>> it = NewArrayIter(data, label, o);
  EXPECT_TRUE(it.ok()) << it.status();
  return std::move(it).value();
}

TEST(ArrayIterTest, BatchesInOrderWithPadding) {
  IterOptions o;
  o.batch_size = 4;
  auto it = Iter(10, o);
  EXPECT_EQ(it->num_batches(), 3);
  EXPECT_EQ(it->data_shape(), Shape({4, 3}));
  std::vector<int> pads;
  auto epoch = Epoch(it.get(), &pads);
  ASSERT_EQ(epoch.size(), 3u);
  EXPECT_EQ(epoch[0], std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(epoch[2], std::vector<int>({8, 9, 0, 1}));  // wrapped from the start
  EXPECT_EQ(pads, std::vector<int>({0, 0, 2}));
  // A second epoch after Reset is the same (no shuffle).
  ASSERT_TRUE(it->Reset().ok());
  EXPECT_EQ(Epoch(it.get()), epoch);
}

TEST(ArrayIterTest, DiscardDropsTheIncompleteBatch) {
  IterOptions o;
  o.batch_size = 4;
  o.last_batch = LastBatch::kDiscard;
  auto it = Iter(10, o);
  EXPECT_EQ(it->num_batches(), 2);
  EXPECT_EQ(Epoch(it.get()).size(), 2u);
}

TEST(ArrayIterTest, ShuffleIsSeededAndChangesPerEpoch) {
  IterOptions o;
  o.batch_size = 5;
  o.shuffle = true;
  o.seed = 7;
  auto a = Iter(20, o), b = Iter(20, o);
  const auto a0 = Epoch(a.get()), b0 = Epoch(b.get());
  EXPECT_EQ(a0, b0);  // same seed, same order
  std::set<int> seen;
  for (const auto& batch : a0) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(seen.size(), 20u);  // a permutation
  ASSERT_TRUE(a->Reset().ok());
  EXPECT_NE(Epoch(a.get()), a0);  // the next epoch is reshuffled
  o.seed = 8;
  EXPECT_NE(Epoch(Iter(20, o).get()), a0);
}

// Part i's batch t is global batch t's i-th slice: n workers at batch b see
// what one process sees at batch n*b.
TEST(ArrayIterTest, StartEpochReproducesThatEpoch) {
  IterOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.seed = 5;
  auto a = Iter(24, o);
  std::vector<std::vector<std::vector<int>>> epochs;
  for (int e = 0; e < 3; ++e) {
    if (e > 0) {
      ASSERT_TRUE(a->Reset().ok());
    }
    epochs.push_back(Epoch(a.get()));
  }
  auto b = Iter(24, o);
  ASSERT_TRUE(b->StartEpoch(2).ok());
  EXPECT_EQ(Epoch(b.get()), epochs[2]);
  ASSERT_TRUE(b->StartEpoch(1).ok());
  EXPECT_EQ(Epoch(b.get()), epochs[1]);
  EXPECT_FALSE(b->StartEpoch(-1).ok());
}

TEST(ArrayIterTest, PartsInterleaveByBatch) {
  IterOptions global;
  global.batch_size = 6;
  global.shuffle = true;
  global.seed = 3;
  const auto whole = Epoch(Iter(36, global).get());
  IterOptions part = global;
  part.batch_size = 3;
  part.num_parts = 2;
  std::vector<std::vector<std::vector<int>>> parts;
  for (int i = 0; i < 2; ++i) {
    part.part_index = i;
    parts.push_back(Epoch(Iter(36, part).get()));
  }
  ASSERT_EQ(parts[0].size(), whole.size());
  for (size_t t = 0; t < whole.size(); ++t) {
    std::vector<int> joined = parts[0][t];
    joined.insert(joined.end(), parts[1][t].begin(), parts[1][t].end());
    EXPECT_EQ(joined, whole[t]) << "batch " << t;
  }
}

TEST(ArrayIterTest, MaxPartBatchesIsPartZeros) {
  // 7 chunks of 3 (the last short) over 3 parts: parts get 3, 2 and 2.
  IterOptions o;
  o.batch_size = 3;
  o.num_parts = 3;
  for (int i = 0; i < 3; ++i) {
    o.part_index = i;
    auto it = Iter(20, o);
    EXPECT_EQ(it->num_batches(), i == 0 ? 3 : 2) << i;
    EXPECT_EQ(it->max_part_batches(), 3) << i;
  }
  // Discard: the short chunk makes no batch, so 6 whole chunks, 2 each.
  o.last_batch = LastBatch::kDiscard;
  o.part_index = 2;
  EXPECT_EQ(Iter(20, o)->max_part_batches(), 2);
}

TEST(ArrayIterTest, PrefetchGivesTheSameBatches) {
  IterOptions o;
  o.batch_size = 7;
  o.shuffle = true;
  o.prefetch = false;
  const auto plain = Epoch(Iter(50, o).get());
  o.prefetch = true;
  auto it = Iter(50, o);
  EXPECT_EQ(Epoch(it.get()), plain);
  // Reset in the middle of an epoch, with the producer running.
  ASSERT_TRUE(it->Reset().ok());
  Batch b;
  ASSERT_TRUE(*it->Next(&b));
  ASSERT_TRUE(it->Reset().ok());
  EXPECT_EQ(Epoch(it.get()).size(), plain.size());
}

TEST(ArrayIterTest, ScalesUint8Pixels) {
  Tensor data = Tensor::Empty({2, 2}, DType::kUInt8);
  for (int i = 0; i < 4; ++i) data.data<uint8_t>()[i] = static_cast<uint8_t>(i * 85);
  Tensor label = Tensor::Zeros({2}, DType::kUInt8);
  IterOptions o;
  o.batch_size = 2;
  auto it = std::move(NewArrayIter(data, label, o)).value();
  Batch b;
  ASSERT_TRUE(*it->Next(&b));
  const auto v = b.data.ToVector();
  EXPECT_FLOAT_EQ(v[0], 0);
  EXPECT_FLOAT_EQ(v[3], 1);
  EXPECT_FLOAT_EQ(v[1], 85.0f / 255);
}

TEST(ArrayIterTest, BadOptions) {
  Tensor data, label;
  MakeData(10, 2, &data, &label);
  IterOptions o;
  o.batch_size = 0;
  EXPECT_EQ(NewArrayIter(data, label, o).status().message(),
            "batch size must be at least 1, got 0");
  o.batch_size = 2;
  o.num_parts = 2;
  o.part_index = 2;
  EXPECT_EQ(NewArrayIter(data, label, o).status().message(),
            "part_index 2 is not in [0, num_parts=2)");
  o = IterOptions();
  Tensor short_label = Tensor::Zeros({9}, DType::kInt32);
  EXPECT_EQ(NewArrayIter(data, short_label, o).status().message(),
            "iterator labels (9) do not match data (10, 2): expected one label per row");
}

// One batch's rows written by its writer, [0, rows) in two parts.
std::vector<float> Written(const RowWriter& write, int64_t rows,
                           int64_t width) {
  Tensor out = Tensor::Empty({rows, width}, DType::kFloat32);
  const int64_t half = rows / 2;
  Tensor first = out.Slice(0, half).value(),
         second = out.Slice(half, rows).value();
  EXPECT_TRUE(write(0, half, first).ok());
  EXPECT_TRUE(write(half, rows, second).ok());
  return out.ToVector();
}

TEST(ArrayIterTest, NextRowsGivesNextsBatches) {
  for (bool prefetch : {false, true}) {
    for (DType dtype : {DType::kUInt8, DType::kFloat32}) {
      SCOPED_TRACE(std::string("prefetch ") + (prefetch ? "on " : "off ") +
                   DTypeName(dtype));
      // Rows of distinct pixel values, scaled as MNIST's are.
      const int64_t n = 23, width = 37;
      Tensor data = Tensor::Empty({n, width}, dtype);
      Tensor label = Tensor::Empty({n}, DType::kInt32);
      for (int64_t i = 0; i < n * width; ++i) {
        if (dtype == DType::kUInt8) {
          data.data<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
        } else {
          data.data<float>()[i] = static_cast<float>(i);
        }
      }
      for (int64_t i = 0; i < n; ++i)
        label.data<int32_t>()[i] = static_cast<int32_t>(i);
      IterOptions o;
      o.batch_size = 5;
      o.shuffle = true;
      o.prefetch = prefetch;
      auto plain = std::move(NewArrayIter(data, label, o)).value();
      auto rows = std::move(NewArrayIter(data, label, o)).value();
      Batch want, got;
      RowWriter write;
      std::vector<RowWriter> writers;
      std::vector<std::vector<float>> wanted;
      int batches = 0;
      while (*plain->Next(&want)) {
        ASSERT_TRUE(*rows->NextRows(&got, &write));
        EXPECT_FALSE(got.data.defined());
        EXPECT_EQ(got.label.ToVector(), want.label.ToVector());
        EXPECT_EQ(got.pad, want.pad);
        writers.push_back(write);
        wanted.push_back(want.data.ToVector());
        ++batches;
      }
      EXPECT_FALSE(*rows->NextRows(&got, &write));
      EXPECT_EQ(batches, 5);
      // The writers hold what they read: written after the epoch ended and
      // the iterator is gone, each gives its own batch.
      rows.reset();
      for (size_t i = 0; i < writers.size(); ++i) {
        EXPECT_EQ(Written(writers[i], o.batch_size, width), wanted[i])
            << "batch " << i;
      }
    }
  }
}

TEST(ArrayIterTest, NextAndNextRowsMixInOneEpoch) {
  IterOptions o;
  o.batch_size = 3;
  o.shuffle = true;
  o.prefetch = true;
  const auto plain = Epoch(Iter(20, o).get());
  auto it = Iter(20, o);
  Batch b;
  RowWriter write;
  std::vector<std::vector<int>> seen;
  for (size_t i = 0; i < plain.size(); ++i) {
    // Every third batch by Next (the producer then works ahead), the others
    // by NextRows, which takes a batch made ahead before gathering its own.
    const bool by_rows = i % 3 != 0;
    ASSERT_TRUE(by_rows ? *it->NextRows(&b, &write) : *it->Next(&b));
    std::vector<int> ids;
    for (float v : b.label.ToVector()) ids.push_back(static_cast<int>(v));
    const std::vector<float> d =
        by_rows ? Written(write, o.batch_size, 3) : b.data.ToVector();
    for (size_t r = 0; r < ids.size(); ++r)
      EXPECT_EQ(d[r * 3], ids[r]) << "batch " << i;
    seen.push_back(ids);
  }
  EXPECT_FALSE(*it->NextRows(&b, &write));
  EXPECT_EQ(seen, plain);
}

TEST(ArrayIterTest, RowWriterNamesBadRowsAndArrays) {
  IterOptions o;
  o.batch_size = 4;
  auto it = Iter(8, o);
  Batch b;
  RowWriter write;
  ASSERT_TRUE(*it->NextRows(&b, &write));
  const Status range = write(2, 5, Tensor::Empty({3, 3}));
  EXPECT_EQ(range.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(range.message().find("rows [2, 5) of a batch of 4"),
            std::string::npos)
      << range;
  const Status shape = write(0, 2, Tensor::Empty({2, 4}));
  EXPECT_EQ(shape.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(shape.message().find("array of 6 values, got (2, 4)"),
            std::string::npos)
      << shape;
  const Status dtype = write(0, 2, Tensor::Empty({2, 3}, DType::kInt32));
  EXPECT_EQ(dtype.code(), Status::Code::kInvalidArgument) << dtype;
}

TEST(SyntheticIterTest, NextRowsCopiesTheBatch) {
  auto a = std::move(NewSyntheticIter({4, 5}, 10, 2, 1)).value();
  auto b = std::move(NewSyntheticIter({4, 5}, 10, 2, 1)).value();
  Batch x, y;
  RowWriter write;
  while (*a->Next(&x)) {
    ASSERT_TRUE(*b->NextRows(&y, &write));
    EXPECT_EQ(Written(write, 4, 5), x.data.ToVector());
    EXPECT_EQ(y.label.ToVector(), x.label.ToVector());
  }
  EXPECT_FALSE(*b->NextRows(&y, &write));
}

TEST(SyntheticIterTest, FixedBySeed) {
  auto a = std::move(NewSyntheticIter({4, 5}, 10, 3, 1)).value();
  auto b = std::move(NewSyntheticIter({4, 5}, 10, 3, 1)).value();
  Batch x, y;
  int n = 0;
  while (*a->Next(&x)) {
    ASSERT_TRUE(*b->Next(&y));
    EXPECT_EQ(x.data.ToVector(), y.data.ToVector());
    for (float l : x.label.ToVector()) EXPECT_TRUE(l >= 0 && l < 10);
    for (float d : x.data.ToVector()) EXPECT_TRUE(d >= -1 && d < 1);
    ++n;
  }
  EXPECT_EQ(n, 3);
  EXPECT_FALSE(NewSyntheticIter({0, 5}, 10, 3, 1).ok());
}

// A reader over MakeData rows that records what it was asked for.
struct RecordingReader {
  Tensor data, label;
  std::vector<std::vector<int64_t>> asked;

  ExampleReader Reader() {
    return [this](const std::vector<int64_t>& examples, Tensor* d, Tensor* l) -> Status {
      asked.push_back(examples);
      const int64_t k = examples.size(), width = data.dim(1);
      *d = Tensor::Empty({k, width}, DType::kFloat32);
      *l = Tensor::Empty({k}, DType::kInt32);
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t j = 0; j < width; ++j) {
          d->data<float>()[i * width + j] = data.data<float>()[examples[i] * width + j];
        }
        l->data<int32_t>()[i] = label.data<int32_t>()[examples[i]];
      }
      return Status::OK();
    };
  }
};

std::set<int> Ids(const std::vector<std::vector<int>>& epoch) {
  std::set<int> out;
  for (const auto& batch : epoch) out.insert(batch.begin(), batch.end());
  return out;
}

// A part read per epoch gives the batches of the part cut from the whole
// set in memory, epoch after epoch, reading only that part's examples.
TEST(PartIterTest, GivesTheBatchesOfTheArrayIter) {
  struct Case {
    int64_t n;
    int batch, parts;
    bool shuffle;
    LastBatch last;
    int64_t num_examples;
  };
  const Case cases[] = {
      {36, 6, 1, true, LastBatch::kPad, 0},    {36, 3, 2, true, LastBatch::kPad, 0},
      {100, 7, 3, true, LastBatch::kPad, 0},   {100, 7, 3, false, LastBatch::kPad, 0},
      {100, 7, 4, true, LastBatch::kDiscard, 0}, {101, 10, 5, true, LastBatch::kPad, 0},
      {50, 4, 16, true, LastBatch::kPad, 0},   {200, 9, 7, true, LastBatch::kPad, 61},
  };
  for (const Case& c : cases) {
    for (int part = 0; part < c.parts; ++part) {
      SCOPED_TRACE(std::to_string(c.n) + " examples, batch " + std::to_string(c.batch) +
                   ", part " + std::to_string(part) + " of " + std::to_string(c.parts) +
                   (c.shuffle ? ", shuffled" : ""));
      IterOptions o;
      o.batch_size = c.batch;
      o.num_parts = c.parts;
      o.part_index = part;
      o.shuffle = c.shuffle;
      o.seed = 11;
      o.last_batch = c.last;
      o.num_examples = c.num_examples;
      o.scale = 1;
      auto whole = Iter(c.n, o);
      RecordingReader r;
      MakeData(c.n, 3, &r.data, &r.label);
      StatusOr<std::unique_ptr<DataIter>> it = NewPartIter(c.n, {3}, r.Reader(), o);
      ASSERT_TRUE(it.ok()) << it.status();
      EXPECT_EQ((*it)->num_batches(), whole->num_batches());
      EXPECT_EQ((*it)->max_part_batches(), whole->max_part_batches());
      EXPECT_EQ((*it)->data_shape(), whole->data_shape());
      for (int64_t epoch : {0, 1, 2, 1}) {
        ASSERT_TRUE(whole->StartEpoch(epoch).ok());
        ASSERT_TRUE((*it)->StartEpoch(epoch).ok());
        std::vector<int> pads, whole_pads;
        const auto batches = Epoch(it->get(), &pads);
        EXPECT_EQ(batches, Epoch(whole.get(), &whole_pads)) << "epoch " << epoch;
        EXPECT_EQ(pads, whole_pads);
        if (batches.empty()) continue;
        // What was read last is exactly this epoch's part, nothing more.
        ASSERT_FALSE(r.asked.empty());
        const std::set<int> asked(r.asked.back().begin(), r.asked.back().end());
        EXPECT_EQ(asked, Ids(batches)) << "epoch " << epoch;
      }
      // Reset and restarting the same epoch (a short part started over)
      // read nothing new.
      const size_t reads = r.asked.size();
      ASSERT_TRUE((*it)->StartEpoch(1).ok());
      EXPECT_EQ(r.asked.size(), reads);
      // The part changes with the epoch only when shuffled into several.
      const size_t expected = c.shuffle && c.parts > 1 ? 4 : 1;
      if (whole->num_batches() > 0) {
        EXPECT_EQ(reads, expected);
      }
    }
  }
}

TEST(PartIterTest, NextRowsWritesThePartsRows) {
  IterOptions o;
  o.batch_size = 4;
  o.num_parts = 3;
  o.part_index = 1;
  o.shuffle = true;
  o.scale = 1;
  RecordingReader r;
  MakeData(50, 3, &r.data, &r.label);
  auto it = std::move(NewPartIter(50, {3}, r.Reader(), o)).value();
  const auto want = Epoch(Iter(50, o).get());
  Batch b;
  RowWriter write;
  std::vector<std::vector<int>> got;
  while (*it->NextRows(&b, &write)) {
    std::vector<int> ids;
    for (float v : b.label.ToVector()) ids.push_back(static_cast<int>(v));
    const std::vector<float> rows = Written(write, o.batch_size, 3);
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(rows[i * 3], ids[i]);
    got.push_back(ids);
  }
  EXPECT_EQ(got, want);
}

TEST(PartIterTest, AReadersErrorEndsThatEpoch) {
  int calls = 0;
  ExampleReader read = [&calls](const std::vector<int64_t>& ex, Tensor* d, Tensor* l) -> Status {
    if (++calls == 2) return Status::DataLoss("x.idx: truncated");
    *d = Tensor::Zeros({static_cast<int64_t>(ex.size()), 2});
    *l = Tensor::Zeros({static_cast<int64_t>(ex.size())});
    return Status::OK();
  };
  IterOptions o;
  o.batch_size = 2;
  o.num_parts = 2;
  o.shuffle = true;
  auto it = std::move(NewPartIter(20, {2}, read, o)).value();
  EXPECT_EQ(Epoch(it.get()).size(), 5u);
  const Status s = it->Reset();
  EXPECT_EQ(s.message(), "x.idx: truncated");
  Batch b;
  EXPECT_FALSE(*it->Next(&b));  // the failed epoch gives no batches
  ASSERT_TRUE(it->Reset().ok());  // a later one reads again
  EXPECT_EQ(Epoch(it.get()).size(), 5u);

  ExampleReader short_read = [](const std::vector<int64_t>& ex, Tensor* d, Tensor* l) {
    *d = Tensor::Zeros({static_cast<int64_t>(ex.size()) - 1, 2});
    *l = Tensor::Zeros({static_cast<int64_t>(ex.size())});
    return Status::OK();
  };
  const Status bad = NewPartIter(20, {2}, short_read, o).status();
  EXPECT_EQ(bad.code(), Status::Code::kInternal) << bad;
  EXPECT_NE(bad.message().find("the example reader gave data (9, 2)"), std::string::npos) << bad;
}

}  // namespace
}  // namespace kvtrain

namespace kvtrain {
namespace {

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return path;
}

TEST(CsvIterTest, RowsOfTheShapeWithTheirLabels) {
  const std::string data = WriteText("d.csv", "1,2,3,4\r\n5, 6,7,8\n-1e-3,0,1.5,2\n");
  const std::string label = WriteText("l.csv", "0\n1\n2\n");
  IterOptions o;
  o.batch_size = 2;
  o.prefetch = false;
  auto it = NewCsvIter(data, Shape({2, 2}), label, o);
  ASSERT_TRUE(it.ok()) << it.status();
  EXPECT_EQ((*it)->data_shape(), Shape({2, 2, 2}));
  EXPECT_EQ((*it)->num_batches(), 2);
  Batch b;
  ASSERT_TRUE((*it)->Next(&b).value());
  EXPECT_EQ(b.data.ToVector(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(b.label.ToVector(), (std::vector<float>{0, 1}));
  ASSERT_TRUE((*it)->Next(&b).value());
  // The last batch padded from the start.
  EXPECT_EQ(b.data.ToVector(), (std::vector<float>{-1e-3f, 0, 1.5f, 2, 1, 2, 3, 4}));
  EXPECT_EQ(b.pad, 1);
  EXPECT_FALSE((*it)->Next(&b).value());
  // Without labels: zeros.
  auto unlabelled = NewCsvIter(data, Shape({4}), "", o);
  ASSERT_TRUE(unlabelled.ok()) << unlabelled.status();
  ASSERT_TRUE((*unlabelled)->Next(&b).value());
  EXPECT_EQ(b.label.ToVector(), (std::vector<float>{0, 0}));
}

TEST(CsvIterTest, BadFilesNameTheLineAndColumn) {
  IterOptions o;
  const std::string short_row = WriteText("s.csv", "1,2,3\n4,5\n");
  EXPECT_EQ(NewCsvIter(short_row, Shape({3}), "", o).status().message(),
            short_row + " line 2 has 2 values, the shape needs 3");
  const std::string word = WriteText("w.csv", "1,2\n3,x\n");
  EXPECT_EQ(NewCsvIter(word, Shape({2}), "", o).status().message(),
            word + " line 2 column 2: not a finite number");
  const std::string empty_field = WriteText("e.csv", "1,,2\n");
  EXPECT_EQ(NewCsvIter(empty_field, Shape({3}), "", o).status().message(),
            empty_field + " line 1 column 2: not a finite number");
  const std::string data = WriteText("ok.csv", "1,2\n3,4\n");
  const std::string labels = WriteText("few.csv", "1\n");
  EXPECT_EQ(NewCsvIter(data, Shape({2}), labels, o).status().message(),
            labels + " has 1 rows but " + data + " has 2");
  EXPECT_FALSE(NewCsvIter("/nonexistent/x.csv", Shape({2}), "", o).ok());
}

}  // namespace
}  // namespace kvtrain
