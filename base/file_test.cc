#include "base/file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

std::string Tmp(const std::string& name) {
  const char* d = std::getenv("TEST_TMPDIR");
  return std::string(d ? d : "/tmp") + "/" + name;
}

TEST(FileTest, WriteThenReadAndReplace) {
  const std::string p = Tmp("f.bin");
  const std::string data("a\0b\xff", 4);
  ASSERT_TRUE(WriteFileAtomic(p, data).ok());
  EXPECT_EQ(*ReadWholeFile(p), data);
  ASSERT_TRUE(WriteFileAtomic(p, "second").ok());
  EXPECT_EQ(*ReadWholeFile(p), "second");
  // No temp file is left beside it.
  DIR* d = opendir(Tmp("").c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    EXPECT_EQ(std::string(e->d_name).find("f.bin.tmp"), std::string::npos);
  }
  closedir(d);
}

TEST(FileTest, Errors) {
  StatusOr<std::string> missing = ReadWholeFile(Tmp("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(missing.status().message(), Tmp("missing") + " does not exist");
  Status s = WriteFileAtomic(Tmp("no/such/dir/f"), "x");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create"), std::string::npos);
}

// A symlink planted at the temporary names an attacker can guess (the old
// `path`.tmp.<pid>) must not be followed: the file it points at stays intact.
TEST(FileTest, PlantedSymlinkAtTheTemporaryNameIsNotFollowed) {
  const std::string victim = Tmp("victim");
  ASSERT_TRUE(WriteFileAtomic(victim, "precious").ok());
  const std::string p = Tmp("target.params");
  const std::string guess = p + ".tmp." + std::to_string(getpid());
  unlink(guess.c_str());
  ASSERT_EQ(symlink(victim.c_str(), guess.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomic(p, "new contents").ok());
  EXPECT_EQ(*ReadWholeFile(victim), "precious");
  EXPECT_EQ(*ReadWholeFile(p), "new contents");
  unlink(guess.c_str());
}

// A checkpoint file comes back as written; one flipped bit anywhere, a cut,
// or a file without the trailer is refused, naming the file.
TEST(FileTest, ChecksummedFilesRefuseCorruption) {
  const std::string p = Tmp("c.params");
  std::string data(5000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  ASSERT_TRUE(WriteChecksummedFile(p, data).ok());
  StatusOr<std::string> back = ReadChecksummedFile(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, data);
  const std::string raw = *ReadWholeFile(p);
  ASSERT_EQ(raw.size(), data.size() + 8);
  for (size_t byte : {size_t{0}, size_t{2500}, data.size() - 1, raw.size() - 1}) {
    std::string bad = raw;
    bad[byte] ^= 0x04;
    const Status s = StripChecksum(p, bad).status();
    EXPECT_EQ(s.code(), Status::Code::kDataLoss) << byte;
    EXPECT_EQ(s.message().rfind(p + ": checksum mismatch", 0), 0u)
        << byte << ": " << s;
  }
  for (const std::string& bad : {raw.substr(0, 3000), data, std::string()}) {
    const Status s = StripChecksum(p, bad).status();
    EXPECT_EQ(s.code(), Status::Code::kDataLoss);
    EXPECT_EQ(s.message().rfind(p + ": no checksum trailer", 0), 0u) << s;
  }
}

}  // namespace
}  // namespace kvtrain
