#include "trainer/progress.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(ProgressTest, WritesJsonLinesAndSurvivesMoves) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/m.jsonl";
  {
    StatusOr<Progress> created = Progress::Create(2, path, 1);
    ASSERT_TRUE(created.ok());
    Progress p = std::move(created).value();  // the file is owned once
    p.StartEpoch(0, 4);
    for (int b = 0; b < 4; ++b) p.Batch(b, 100, {{"accuracy", 0.5 + b / 10.0}});
    p.EndEpoch({{"accuracy", 0.8}}, {{"accuracy", 0.75}}, {{"staleness-max", 3}});
  }
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("{\"rank\":1,\"epoch\":0,\"batch\":2,\"speed\":", 0), 0u) << lines[0];
  EXPECT_NE(lines[1].find("\"train-accuracy\":0.800000"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("\"validation-accuracy\":0.750000"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("\"time\":"), std::string::npos);
  EXPECT_NE(lines[2].find("\"staleness-max\":3.000000"), std::string::npos) << lines[2];
}

TEST(ProgressTest, TimeCostStopsAtEndTraining) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/t.jsonl";
  {
    FakeClock clock;
    StatusOr<Progress> created = Progress::Create(0, path, -1, &clock);
    ASSERT_TRUE(created.ok());
    Progress p = std::move(created).value();
    p.StartEpoch(0, 1);
    clock.Advance(std::chrono::milliseconds(1500));
    p.Batch(0, 100, {});
    p.EndTraining();
    // Validation time is not training time.
    clock.Advance(std::chrono::seconds(40));
    p.EndEpoch({}, {});
  }
  std::ifstream in(path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_NE(line.find("\"time\":1.500"), std::string::npos) << line;
}

TEST(ProgressTest, UnwritableFileIsAnError) {
  StatusOr<Progress> p = Progress::Create(1, "/nonexistent/dir/m.jsonl", -1);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("cannot open --metrics-file /nonexistent/dir/m.jsonl"),
            std::string::npos);
}

}  // namespace
}  // namespace kvtrain
