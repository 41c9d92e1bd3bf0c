#include "engine/io/libsvm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>

#include "base/file.h"

namespace kvtrain {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `rows` lines; row r has label r and features r:1 ... (r % 3 of them).
std::string NumberedRows(int rows) {
  std::string text;
  for (int r = 0; r < rows; ++r) {
    text += std::to_string(r);
    for (int k = 0; k < r % 3; ++k) text += " " + std::to_string(r) + ":1";
    text += "\n";
  }
  return text;
}

std::unique_ptr<LibSvmReader> OpenOrDie(const std::string& path,
                                        const LibSvmOptions& opts) {
  StatusOr<std::unique_ptr<LibSvmReader>> r = LibSvmReader::Open(path, opts);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(r).value() : nullptr;
}

// Every batch of one epoch.
std::vector<SparseBatch> Epoch(LibSvmReader* reader) {
  std::vector<SparseBatch> out;
  SparseBatch b;
  while (true) {
    StatusOr<bool> more = reader->Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back(b);
  }
  EXPECT_EQ(b.rows(), 0);
  EXPECT_EQ(b.offsets, std::vector<int64_t>({0}));
  return out;
}

std::vector<float> Labels(const std::vector<SparseBatch>& batches) {
  std::vector<float> out;
  for (const SparseBatch& b : batches)
    out.insert(out.end(), b.labels.begin(), b.labels.end());
  return out;
}

void ExpectSameBatch(const SparseBatch& a, const SparseBatch& b) {
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.values, b.values);
}

constexpr int64_t kTwo32 = int64_t{1} << 32;
constexpr int64_t kTwo40 = int64_t{1} << 40;

TEST(LibSvmTest, ParsesEveryField) {
  const std::string path =
      WriteText("fields.txt",
                "1 3:1 1099511627776:0.5\n"
                "0\n"
                "   \t\n"
                "-1 7:2.5e-1\t9:-3\r\n"
                "+1\n"
                "0.5 4294967296:1 9223372036854775807:1");  // no final newline
  for (const std::string& file : {path, path + ".bin"}) {
    if (file != path) {
      ASSERT_TRUE(ConvertLibSvmToBinary(path, file).ok());
    }
    StatusOr<SparseBatch> b = ReadLibSvmFile(file);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->rows(), 5);
    EXPECT_EQ(b->labels, std::vector<float>({1, 0, -1, 1, 0.5f}));
    EXPECT_EQ(b->offsets, std::vector<int64_t>({0, 2, 2, 4, 4, 6}));
    EXPECT_EQ(b->ids,
              std::vector<int64_t>({3, kTwo40, 7, 9, kTwo32,
                                    std::numeric_limits<int64_t>::max()}));
    EXPECT_EQ(b->values, std::vector<float>({1, 0.5f, 0.25f, -3, 1, 1}));
  }
}

TEST(LibSvmTest, BinaryLayout) {
  const std::string text = WriteText("layout.txt", "1 5:2\n0\n");
  const std::string bin = TempPath("layout.bin");
  ASSERT_TRUE(ConvertLibSvmToBinary(text, bin).ok());
  const std::string bytes = ReadBytes(bin);
  // Header 32, labels 2 * 4, offsets 3 * 8, ids 8, values 4, trailer 8.
  EXPECT_EQ(bytes.size(), 32u + 8 + 24 + 8 + 4 + 8);
  EXPECT_EQ(bytes.substr(0, 8), "KVLIBSVM");
  EXPECT_EQ(bytes.substr(8, 8), std::string("\x01\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(bytes.substr(16, 8), std::string("\x02\0\0\0\0\0\0\0", 8));  // rows
  EXPECT_EQ(bytes.substr(24, 8), std::string("\x01\0\0\0\0\0\0\0", 8));  // ids
}

TEST(LibSvmTest, BatchesShortLastBatchAndReset) {
  const std::string path = WriteText("seven.txt", NumberedRows(7));
  LibSvmOptions opts;
  opts.batch_size = 3;
  std::unique_ptr<LibSvmReader> reader = OpenOrDie(path, opts);
  ASSERT_NE(reader, nullptr);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::vector<SparseBatch> batches = Epoch(reader.get());
    ASSERT_EQ(batches.size(), 3u) << "epoch " << epoch;
    EXPECT_EQ(batches[0].labels, std::vector<float>({0, 1, 2}));
    EXPECT_EQ(batches[1].labels, std::vector<float>({3, 4, 5}));
    EXPECT_EQ(batches[2].labels, std::vector<float>({6}));
    // Rows 3, 4, 5 have 0, 1, 2 features; offsets start at 0 in every batch.
    EXPECT_EQ(batches[1].offsets, std::vector<int64_t>({0, 0, 1, 3}));
    EXPECT_EQ(batches[1].ids, std::vector<int64_t>({4, 5, 5}));
    EXPECT_EQ(batches[2].offsets, std::vector<int64_t>({0, 0}));
    SparseBatch after;
    EXPECT_FALSE(*reader->Next(&after));  // still the end
    ASSERT_TRUE(reader->Reset().ok());
  }
  opts.drop_last = true;
  reader = OpenOrDie(path, opts);
  EXPECT_EQ(Labels(Epoch(reader.get())),
            std::vector<float>({0, 1, 2, 3, 4, 5}));
}

TEST(LibSvmTest, PartsCoverEveryRowOnce) {
  const int kRows = 23, kBatch = 3, kParts = 3;
  const std::string text = WriteText("parts.txt", NumberedRows(kRows));
  const std::string bin = TempPath("parts.bin");
  ASSERT_TRUE(ConvertLibSvmToBinary(text, bin).ok());
  for (const std::string& path : {text, bin}) {
    for (bool drop_last : {false, true}) {
      std::vector<int> seen(kRows, 0);
      for (int part = 0; part < kParts; ++part) {
        LibSvmOptions opts;
        opts.batch_size = kBatch;
        opts.num_parts = kParts;
        opts.part_index = part;
        opts.drop_last = drop_last;
        std::unique_ptr<LibSvmReader> reader = OpenOrDie(path, opts);
        ASSERT_NE(reader, nullptr);
        const std::vector<SparseBatch> batches = Epoch(reader.get());
        for (size_t t = 0; t < batches.size(); ++t) {
          // Part i's batch t is chunk i + t * parts of the file.
          const int64_t first = (part + t * kParts) * kBatch;
          for (int64_t r = 0; r < batches[t].rows(); ++r) {
            EXPECT_EQ(batches[t].labels[r], first + r)
                << path << " part " << part;
          }
        }
        for (float label : Labels(batches)) ++seen[static_cast<int>(label)];
      }
      // Rows 21 and 22 are the short chunk 7 (part 1's), dropped with
      // drop_last.
      for (int r = 0; r < kRows; ++r) {
        EXPECT_EQ(seen[r], drop_last && r >= 21 ? 0 : 1)
            << path << " row " << r;
      }
    }
  }
}

TEST(LibSvmTest, TextAndBinaryGiveTheSameBatches) {
  std::string rows;
  for (int r = 0; r < 50; ++r) {
    rows += std::to_string(r % 2) + " " + std::to_string(r) + ":" +
            std::to_string(r * 0.25) + " " +
            std::to_string(kTwo40 * 3 + r * 7919) + ":1\n";
  }
  const std::string text = WriteText("same.txt", rows);
  const std::string bin = TempPath("same.bin");
  ASSERT_TRUE(ConvertLibSvmToBinary(text, bin).ok());
  for (int batch_size : {1, 7, 50, 64}) {
    for (int parts : {1, 2, 3}) {
      for (int part = 0; part < parts; ++part) {
        LibSvmOptions opts;
        opts.batch_size = batch_size;
        opts.num_parts = parts;
        opts.part_index = part;
        std::unique_ptr<LibSvmReader> a = OpenOrDie(text, opts);
        std::unique_ptr<LibSvmReader> b = OpenOrDie(bin, opts);
        ASSERT_TRUE(a && b);
        const std::vector<SparseBatch> from_text = Epoch(a.get());
        const std::vector<SparseBatch> from_binary = Epoch(b.get());
        ASSERT_EQ(from_text.size(), from_binary.size());
        for (size_t t = 0; t < from_text.size(); ++t) {
          ExpectSameBatch(from_text[t], from_binary[t]);
        }
      }
    }
  }
  StatusOr<SparseBatch> all = ReadLibSvmFile(bin);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->ids[99], kTwo40 * 3 + 49 * 7919);  // above 2^32, exact
  // Counted without parsing, alike in both forms; blank lines are not rows.
  EXPECT_EQ(CountLibSvmRows(text).value(), 50);
  EXPECT_EQ(CountLibSvmRows(bin).value(), 50);
  EXPECT_EQ(CountLibSvmRows(WriteText("blank.txt", "1 3:1\n\n  \n0 4:1")).value(), 2);
  EXPECT_FALSE(CountLibSvmRows(TempPath("missing.txt")).ok());
}

TEST(LibSvmTest, BadLinesNameFileLineAndToken) {
  struct Case {
    std::string line;
    std::string message;  // after "path:3: "
  };
  const Case cases[] = {
      {"abc 1:1", "label \"abc\" is not a number"},
      {"1:1 2:1", "label \"1:1\" is not a number"},
      {"nan 1:1", "label \"nan\" is not a finite float"},
      {"1 2:1 5", "feature \"5\" is not id:value"},
      {"1 -3:1", "feature \"-3:1\": id \"-3\" is negative"},
      {"1 99999999999999999999:1",
       "feature \"99999999999999999999:1\": id \"99999999999999999999\" is not "
       "a "
       "64-bit integer"},
      {"1 x7:1", "feature \"x7:1\": id \"x7\" is not a 64-bit integer"},
      {"1 :1", "feature \":1\": id \"\" is not a 64-bit integer"},
      {"1 2:abc", "feature \"2:abc\": value \"abc\" is not a number"},
      {"1 2:", "feature \"2:\": value \"\" is not a number"},
      {"1 2:inf", "feature \"2:inf\": value \"inf\" is not a finite float"},
      {"1 2:1e300",
       "feature \"2:1e300\": value \"1e300\" is not a finite float"},
  };
  for (const Case& c : cases) {
    // The bad line is line 3: blank lines count.
    const std::string path =
        WriteText("bad.txt", "1 1:1\n\n" + c.line + "\n0 4:1\n");
    const std::string want = path + ":3: " + c.message;
    StatusOr<SparseBatch> all = ReadLibSvmFile(path);
    ASSERT_FALSE(all.ok()) << c.line;
    EXPECT_EQ(all.status().code(), Status::Code::kDataLoss);
    EXPECT_EQ(all.status().message(), want);
    EXPECT_EQ(ConvertLibSvmToBinary(path, TempPath("bad.bin")).message(), want);

    // A reader reports it from Next, then reads on after the bad line.
    LibSvmOptions opts;
    opts.batch_size = 1;
    std::unique_ptr<LibSvmReader> reader = OpenOrDie(path, opts);
    ASSERT_NE(reader, nullptr);
    SparseBatch b;
    ASSERT_TRUE(*reader->Next(&b));
    EXPECT_EQ(reader->Next(&b).status().message(), want);
    ASSERT_TRUE(*reader->Next(&b));
    EXPECT_EQ(b.labels, std::vector<float>({0}));
    EXPECT_EQ(b.ids, std::vector<int64_t>({4}));
  }
}

TEST(LibSvmTest, APartParsesOnlyItsRows) {
  const std::string path = WriteText("half_bad.txt", "1 1:1\n1 oops\n0 3:1\n");
  LibSvmOptions opts;
  opts.batch_size = 1;
  opts.num_parts = 2;
  opts.part_index = 0;
  std::unique_ptr<LibSvmReader> part0 = OpenOrDie(path, opts);
  EXPECT_EQ(Labels(Epoch(part0.get())), std::vector<float>({1, 0}));
  opts.part_index = 1;
  std::unique_ptr<LibSvmReader> part1 = OpenOrDie(path, opts);
  SparseBatch b;
  EXPECT_EQ(part1->Next(&b).status().message(),
            path + ":2: feature \"oops\" is not id:value");
}

TEST(LibSvmTest, FileAndOptionErrors) {
  const std::string missing = TempPath("no-such.txt");
  StatusOr<std::unique_ptr<LibSvmReader>> r = LibSvmReader::Open(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(r.status().message(), missing + " does not exist");
  EXPECT_EQ(ReadLibSvmFile(missing).status().code(), Status::Code::kNotFound);

  const std::string path = WriteText("ok.txt", "1 1:1\n");
  LibSvmOptions opts;
  opts.batch_size = 0;
  EXPECT_EQ(LibSvmReader::Open(path, opts).status().message(),
            path + ": batch size must be at least 1, got 0");
  opts.batch_size = 1;
  opts.num_parts = 3;
  opts.part_index = 3;
  EXPECT_EQ(LibSvmReader::Open(path, opts).status().code(),
            Status::Code::kInvalidArgument);

  // An empty file has no rows.
  StatusOr<SparseBatch> empty = ReadLibSvmFile(WriteText("empty.txt", ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->rows(), 0);
}

TEST(LibSvmTest, CorruptBinaryFilesAreCaught) {
  const std::string text = WriteText("crc.txt", NumberedRows(20));
  const std::string bin = TempPath("crc.bin");
  ASSERT_TRUE(ConvertLibSvmToBinary(text, bin).ok());
  const std::string good = ReadBytes(bin);

  // One flipped bit anywhere after the magic: the checksum names the file.
  for (size_t at : {size_t{12}, size_t{40}, good.size() / 2, good.size() - 9}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    const std::string path = WriteText("flipped.bin", bad);
    StatusOr<std::unique_ptr<LibSvmReader>> r = LibSvmReader::Open(path);
    ASSERT_FALSE(r.ok()) << "byte " << at;
    EXPECT_EQ(r.status().code(), Status::Code::kDataLoss);
    EXPECT_EQ(r.status().message().rfind(path + ": checksum mismatch", 0), 0u)
        << r.status();
  }
  // Cut short: the trailer is gone.
  const std::string cut =
      WriteText("cut.bin", good.substr(0, good.size() - 20));
  EXPECT_EQ(ReadLibSvmFile(cut).status().message().rfind(
                cut + ": no checksum trailer", 0),
            0u);

  // A checksum over a header that does not match the arrays.
  std::string payload = good.substr(0, good.size() - 8);
  payload[16] = 21;  // 21 rows, 20 present (with 19 ids)
  const std::string lying = TempPath("lying.bin");
  ASSERT_TRUE(WriteChecksummedFile(lying, payload).ok());
  EXPECT_EQ(ReadLibSvmFile(lying).status().message(),
            lying +
                ": header says 21 rows and 19 ids, which is not what the "
                "file's " +
                std::to_string(payload.size()) + " bytes hold");

  // Offsets that decrease, checksum intact.
  payload = good.substr(0, good.size() - 8);
  const size_t offsets_at = 32 + 20 * 4;
  payload[offsets_at + 8 * 2] = 5;  // row 1 ends at 5, after row 2's end (3)
  ASSERT_TRUE(WriteChecksummedFile(lying, payload).ok());
  EXPECT_EQ(ReadLibSvmFile(lying).status().message(),
            lying + ": row 2's offsets decrease");
}

}  // namespace
}  // namespace kvtrain
