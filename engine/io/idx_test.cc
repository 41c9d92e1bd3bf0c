#include "engine/io/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>

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

}  // namespace
}  // namespace kvtrain
