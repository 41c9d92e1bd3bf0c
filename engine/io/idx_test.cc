#include "engine/io/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

std::string Header(unsigned char type, std::vector<uint32_t> dims) {
  std::string h = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<char>(d >> s));
  }
  return h;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

void WriteFile(const std::string& path, const std::string& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), bytes.size()), static_cast<int>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << bytes;
  }
}

TEST(IdxTest, ParsesUbyte) {
  const std::string bytes = Header(0x08, {2, 3}) + std::string("\x01\x02\x03\x04\x05\xff", 6);
  StatusOr<Tensor> t = ParseIdx(bytes, "x.idx");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->dtype(), DType::kUInt8);
  EXPECT_EQ(t->shape(), Shape({2, 3}));
  EXPECT_EQ(t->ToVector(), std::vector<float>({1, 2, 3, 4, 5, 255}));
}

TEST(IdxTest, ParsesBigEndianIntFloatDouble) {
  const std::string ints = Header(0x0C, {2}) + std::string("\x00\x00\x01\x00\xff\xff\xff\xfe", 8);
  EXPECT_EQ(ParseIdx(ints, "i")->ToVector(), std::vector<float>({256, -2}));
  // 1.5f = 0x3FC00000; -2.0 = 0xC000000000000000.
  const std::string floats = Header(0x0D, {1}) + std::string("\x3f\xc0\x00\x00", 4);
  EXPECT_EQ(ParseIdx(floats, "f")->ToVector(), std::vector<float>({1.5f}));
  const std::string doubles = Header(0x0E, {1}) + std::string("\xc0\x00\x00\x00\x00\x00\x00\x00", 8);
  StatusOr<Tensor> d = ParseIdx(doubles, "d");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->dtype(), DType::kFloat64);
  EXPECT_EQ(d->ToVector(), std::vector<float>({-2.0f}));
}

TEST(IdxTest, MalformedInputNamesTheFileAndProblem) {
  struct Case {
    std::string bytes;
    std::string message;
  };
  const Case cases[] = {
      {std::string("\x00\x00", 2), "f.idx: truncated: 2 bytes, an IDX header needs at least 4"},
      {std::string("\x1f\x8b\x08\x01", 4),
       "f.idx: bad magic 0x1F 0x8B: an IDX file starts with two zero bytes (is "
       "it an IDX file?)"},
      {Header(0x0B, {1}) + "ab",
       "f.idx: unsupported IDX element type 0x0B (supported: 0x08 ubyte, 0x0C "
       "int, 0x0D float, 0x0E double)"},
      {std::string("\x00\x00\x08\x00", 4),
       "f.idx: 0 dimensions in the header; expected 1 to 8"},
      {Header(0x08, {3, 3}).substr(0, 9),
       "f.idx: truncated header: 2 dimensions need 12 bytes, file has 9"},
      {Header(0x08, {10, 5}) + "abc",
       "f.idx: truncated: header says (10, 5) uint8 (50 bytes of data) but only "
       "3 follow"},
      {Header(0x08, {2}) + "abcd",
       "f.idx: 2 unexpected bytes after the data (header says (2) uint8 (2 "
       "bytes of data))"},
      {Header(0x08, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFF}),
       "f.idx: header dimensions (4294967295, 4294967295) are too large"},
  };
  for (const Case& c : cases) {
    StatusOr<Tensor> t = ParseIdx(c.bytes, "f.idx");
    ASSERT_FALSE(t.ok()) << c.message;
    EXPECT_EQ(t.status().code(), Status::Code::kDataLoss);
    EXPECT_EQ(t.status().message(), c.message);
  }
}

TEST(IdxTest, ReadsPlainAndGzippedFiles) {
  const std::string bytes = Header(0x08, {2, 2}) + "\x01\x02\x03\x04";
  for (bool gz : {false, true}) {
    const std::string path = TempPath(gz ? "a.idx.gz" : "a.idx");
    WriteFile(path, bytes, gz);
    StatusOr<Tensor> t = ReadIdxFile(path);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->ToVector(), std::vector<float>({1, 2, 3, 4}));
  }
}

TEST(IdxTest, FileErrors) {
  StatusOr<Tensor> missing = ReadIdxFile(TempPath("no-such.idx"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such.idx: cannot open"), std::string::npos);

  const std::string path = TempPath("short.idx.gz");
  WriteFile(path, Header(0x08, {100, 28, 28}) + std::string(1000, 'x'), true);
  StatusOr<Tensor> t = ReadIdxFile(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            path + ": truncated: header says (100, 28, 28) uint8 (78400 bytes of "
                   "data) but only 1000 follow");

  const std::string trailing = TempPath("long.idx");
  WriteFile(trailing, Header(0x08, {1}) + "ab", false);
  EXPECT_NE(ReadIdxFile(trailing).status().message().find("unexpected bytes after the data"),
            std::string::npos);

  // A gzip stream cut in the middle.
  const std::string cut = TempPath("cut.idx.gz");
  WriteFile(cut, Header(0x08, {64, 64}) + std::string(4096, 'q'), true);
  std::string gz;
  {
    std::ifstream in(cut, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  WriteFile(cut, gz.substr(0, gz.size() / 2), false);
  StatusOr<Tensor> broken = ReadIdxFile(cut);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), Status::Code::kDataLoss) << broken.status();
}

// Rows `rows` of `whole`, as ReadIdxRows should give them.
std::vector<float> RowsOf(const Tensor& whole, const std::vector<int64_t>& rows) {
  const std::vector<float> all = whole.ToVector();
  const int64_t width = whole.dim(0) == 0 ? 0 : whole.size() / whole.dim(0);
  std::vector<float> out;
  for (int64_t r : rows) {
    out.insert(out.end(), all.begin() + r * width, all.begin() + (r + 1) * width);
  }
  return out;
}

std::string BigEndian(const void* value, size_t bytes) {
  std::string out(static_cast<const char*>(value), bytes);
  return std::string(out.rbegin(), out.rend());
}

// Sets of rows of an n-row file: none, all, ends, runs, strides, random.
std::vector<std::vector<int64_t>> RowSets(int64_t n, uint64_t seed) {
  std::vector<std::vector<int64_t>> sets = {{}, {0}, {n - 1}, {0, n - 1}};
  std::vector<int64_t> all, even, runs, some;
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    all.push_back(i);
    if (i % 2 == 0) even.push_back(i);
    if (i % 7 < 3) runs.push_back(i);
    if (rng() % 5 == 0) some.push_back(i);
  }
  sets.insert(sets.end(), {all, even, runs, some});
  return sets;
}

TEST(IdxRowsTest, RowsAreThoseOfTheWholeFile) {
  std::mt19937_64 rng(1);
  std::string ubyte = Header(0x08, {53, 7, 5});
  for (int i = 0; i < 53 * 35; ++i) ubyte.push_back(static_cast<char>(rng()));
  std::string ints = Header(0x0C, {41, 3});
  for (int i = 0; i < 41 * 3; ++i) {
    const int32_t v = static_cast<int32_t>(rng());
    ints += BigEndian(&v, 4);
  }
  std::string doubles = Header(0x0E, {37});
  for (int i = 0; i < 37; ++i) {
    const double v = static_cast<double>(static_cast<int32_t>(rng())) / 7;
    doubles += BigEndian(&v, 8);
  }
  // 3 MB: rows of 1000 bytes straddle the reader's 1 MB chunks.
  std::string big = Header(0x08, {3000, 1000});
  for (int i = 0; i < 3000 * 1000; ++i) big.push_back(static_cast<char>(rng()));
  int file = 0;
  for (const std::string& bytes : {ubyte, ints, doubles, big}) {
    for (bool gz : {false, true}) {
      const std::string path = TempPath("rows" + std::to_string(file++) + (gz ? ".gz" : ""));
      WriteFile(path, bytes, gz);
      StatusOr<Tensor> whole = ReadIdxFile(path);
      ASSERT_TRUE(whole.ok()) << whole.status();
      StatusOr<IdxInfo> info = ReadIdxInfo(path);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->shape, whole->shape());
      EXPECT_EQ(info->dtype, whole->dtype());
      for (const std::vector<int64_t>& rows : RowSets(whole->dim(0), file)) {
        SCOPED_TRACE(path + ", " + std::to_string(rows.size()) + " rows");
        StatusOr<Tensor> got = ReadIdxRows(path, rows);
        ASSERT_TRUE(got.ok()) << got.status();
        std::vector<int64_t> dims = whole->shape().dims();
        dims[0] = rows.size();
        EXPECT_EQ(got->shape(), Shape(dims));
        EXPECT_EQ(got->dtype(), whole->dtype());
        EXPECT_EQ(got->ToVector(), RowsOf(*whole, rows));
      }
    }
  }
}

TEST(IdxRowsTest, RowsMustAscendWithinTheFile) {
  const std::string path = TempPath("order.idx");
  WriteFile(path, Header(0x08, {4, 2}) + "abcdefgh", false);
  for (const std::vector<int64_t>& rows :
       std::vector<std::vector<int64_t>>{{4}, {-1}, {2, 1}, {1, 1}}) {
    StatusOr<Tensor> t = ReadIdxRows(path, rows);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(t.status().message().rfind(path + ": rows to read must ascend within the 4", 0), 0u)
        << t.status();
  }
}

// The errors of ReadIdxFile, named by the file, for a part of it too.
TEST(IdxRowsTest, MalformedFilesNameTheFile) {
  struct Case {
    std::string name, bytes, message;
  };
  const std::string data(300, 'p');
  const Case cases[] = {
      {"truncated", Header(0x08, {100, 3}) + data.substr(0, 299),
       ": truncated: header says (100, 3) uint8 (300 bytes of data) but only 299 follow"},
      {"trailing", Header(0x08, {100, 3}) + data + "x",
       ": unexpected bytes after the data (header says (100, 3) uint8 (300 bytes of data))"},
      {"magic", "\x01\x02" + Header(0x08, {100, 3}).substr(2) + data,
       ": bad magic 0x01 0x02: an IDX file starts with two zero bytes (is it an IDX file?)"},
      {"header", Header(0x08, {100, 3}).substr(0, 10),
       ": truncated header: 2 dimensions need 12 bytes, file has 10"},
      {"huge", Header(0x08, {2048, 2048, 2048}),
       ": truncated: header says (2048, 2048, 2048) uint8 (8589934592 bytes of data) but "
       "only 0 follow"},
  };
  for (const Case& c : cases) {
    for (bool gz : {false, true}) {
      const std::string path = TempPath("bad-" + c.name + (gz ? ".idx.gz" : ".idx"));
      WriteFile(path, c.bytes, gz);
      for (bool part : {false, true}) {
        SCOPED_TRACE(path + (part ? ", rows 1 and 5" : ", whole"));
        const Status s = part ? ReadIdxRows(path, {1, 5}).status() : ReadIdxFile(path).status();
        EXPECT_EQ(s.code(), Status::Code::kDataLoss) << s;
        EXPECT_EQ(s.message(), path + c.message);
      }
    }
  }
  // A gzip stream cut in the middle, the rows wanted before the cut.
  const std::string cut = TempPath("cut-rows.idx.gz");
  std::mt19937_64 rng(2);
  std::string bytes = Header(0x08, {256, 256});
  for (int i = 0; i < 256 * 256; ++i) bytes.push_back(static_cast<char>(rng() % 4));
  WriteFile(cut, bytes, true);
  std::string gz;
  {
    std::ifstream in(cut, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  WriteFile(cut, gz.substr(0, gz.size() / 2), false);
  const Status s = ReadIdxRows(cut, {0, 1}).status();
  EXPECT_EQ(s.code(), Status::Code::kDataLoss) << s;
  EXPECT_EQ(s.message().rfind(cut + ": ", 0), 0u) << s;
  const Status missing = ReadIdxRows(TempPath("no-such-rows.idx"), {0}).status();
  EXPECT_EQ(missing.code(), Status::Code::kNotFound) << missing;
  EXPECT_NE(missing.message().find("no-such-rows.idx: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace kvtrain
