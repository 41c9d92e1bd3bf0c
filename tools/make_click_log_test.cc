// tools/make_click_log.py end to end: small click logs written by the script
// and read back with engine/io/libsvm.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>

#include "engine/io/libsvm.h"
#include "tests/util/process.h"

namespace kvtrain {
namespace {

constexpr int kRows = 2000;
constexpr int kFields = 8;
constexpr int64_t kVocab = 100000;

struct ScriptRun {
  testutil::ExitInfo exit;
  std::string output;  // stdout and stderr
};

ScriptRun MakeClickLog(const std::vector<std::string>& args) {
  static int runs = 0;
  testutil::ProcessOptions opts;
  opts.argv = {"/usr/bin/python3",
               testutil::RunfilePath("tools/make_click_log.py")};
  opts.argv.insert(opts.argv.end(), args.begin(), args.end());
  opts.log_path = testutil::NewTempDir("log") + "/run" + std::to_string(runs++);
  ScriptRun run;
  StatusOr<std::unique_ptr<testutil::Process>> p =
      testutil::Process::Spawn(opts);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return run;
  StatusOr<testutil::ExitInfo> exit = (*p)->Wait(std::chrono::seconds(60));
  EXPECT_TRUE(exit.ok()) << exit.status();
  if (exit.ok()) run.exit = *exit;
  run.output = (*p)->ReadLog();
  return run;
}

// Writes a training and a test file with `seed` into a new directory;
// returns the directory.
std::string Generate(int seed, ScriptRun* run) {
  const std::string dir = testutil::NewTempDir("click");
  *run =
      MakeClickLog({"--rows", std::to_string(kRows), "--seed",
                    std::to_string(seed), "--out", dir + "/train.libsvm",
                    "--test-rows", "500", "--test-out", dir + "/test.libsvm"});
  EXPECT_TRUE(run->exit.ok()) << run->exit.ToString() << "\n" << run->output;
  return dir;
}

TEST(MakeClickLogTest, SameSeedSameFiles) {
  ScriptRun a, b, c;
  const std::string one = Generate(5, &a), two = Generate(5, &b),
                    other = Generate(6, &c);
  for (const char* name : {"/train.libsvm", "/test.libsvm"}) {
    const std::string first = testutil::ReadFile(one + name);
    ASSERT_FALSE(first.empty()) << name;
    EXPECT_EQ(first, testutil::ReadFile(two + name)) << name;
    EXPECT_NE(first, testutil::ReadFile(other + name)) << name;
  }
  EXPECT_NE(testutil::ReadFile(one + "/train.libsvm").substr(0, 1000),
            testutil::ReadFile(one + "/test.libsvm").substr(0, 1000));
  // A shorter file is the start of a longer one.
  const std::string head = testutil::NewTempDir("head") + "/train.libsvm";
  ASSERT_TRUE(
      MakeClickLog({"--rows", "300", "--seed", "5", "--out", head}).exit.ok());
  const std::string short_file = testutil::ReadFile(head);
  EXPECT_EQ(std::count(short_file.begin(), short_file.end(), '\n'), 300);
  EXPECT_EQ(
      testutil::ReadFile(one + "/train.libsvm").substr(0, short_file.size()),
      short_file);
}

TEST(MakeClickLogTest, TheReaderReadsWhatItWrites) {
  ScriptRun run;
  const std::string dir = Generate(11, &run);
  StatusOr<SparseBatch> all = ReadLibSvmFile(dir + "/train.libsvm");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->rows(), kRows);
  int64_t positives = 0;
  std::map<int64_t, int> field0_counts;
  for (int64_t r = 0; r < kRows; ++r) {
    const float label = all->labels[r];
    ASSERT_TRUE(label == 0 || label == 1) << "row " << r << ": " << label;
    positives += label == 1;
    ASSERT_EQ(all->offsets[r + 1] - all->offsets[r], kFields) << "row " << r;
    for (int f = 0; f < kFields; ++f) {
      const int64_t id = all->ids[all->offsets[r] + f];
      // id = field * 2^40 + local id.
      EXPECT_EQ(id >> 40, f) << "row " << r;
      EXPECT_LT(id & ((int64_t{1} << 40) - 1), kVocab) << "row " << r;
      EXPECT_EQ(all->values[all->offsets[r] + f], 1.0f);
      if (f == 0) ++field0_counts[id];
    }
  }
  const double rate = static_cast<double>(positives) / kRows;
  EXPECT_GT(rate, 0.05);
  EXPECT_LT(rate, 0.95);
  // Zipf: field 0's most frequent id is in several percent of the rows (about
  // 10% at the default exponent 1.1); uniform over 100000 ids it would be in
  // one or two.
  int top = 0;
  for (const auto& [id, count] : field0_counts) top = std::max(top, count);
  EXPECT_GT(top, kRows * 3 / 100);

  // The summary on stderr agrees with the file.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      run.output, m,
      std::regex(
          "train.libsvm: 2000 rows in [0-9.]+ s, positive rate ([0-9.]+); "
          "hidden model \\(the best a model can expect\\): AUC ([0-9.]+), "
          "log-loss ([0-9.]+)")))
      << run.output;
  EXPECT_NEAR(std::stod(m[1]), rate, 1e-4);
  EXPECT_GT(std::stod(m[2]), 0.6);  // the hidden model knows a lot
  EXPECT_LT(std::stod(m[2]), 1.0);
  EXPECT_NE(run.output.find("test.libsvm: 500 rows"), std::string::npos)
      << run.output;

  // Its binary form holds the same rows.
  ASSERT_TRUE(
      ConvertLibSvmToBinary(dir + "/train.libsvm", dir + "/train.bin").ok());
  StatusOr<SparseBatch> binary = ReadLibSvmFile(dir + "/train.bin");
  ASSERT_TRUE(binary.ok()) << binary.status();
  EXPECT_EQ(binary->ids, all->ids);
  EXPECT_EQ(binary->labels, all->labels);
}

TEST(MakeClickLogTest, HelpAndBadOptions) {
  const ScriptRun help = MakeClickLog({"--help"});
  EXPECT_TRUE(help.exit.ok()) << help.exit.ToString();
  EXPECT_NE(help.output.find("id = f * 2**40 + local"), std::string::npos)
      << help.output;
  const ScriptRun bad =
      MakeClickLog({"--rows", "10", "--out", "/dev/null", "--vocab", "0"});
  EXPECT_TRUE(bad.exit.exited);
  EXPECT_EQ(bad.exit.code, 2);
  EXPECT_NE(bad.output.find("--vocab must be in [1, 2**40], got 0"),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace kvtrain
