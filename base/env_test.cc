#include "base/env.h"

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(EnvTest, MapEnvTreatsEmptyAsUnset) {
  EnvLookup env = MapEnv({{"A", "1"}, {"B", ""}});
  EXPECT_EQ(env("A").value_or("?"), "1");
  EXPECT_FALSE(env("B").has_value());
  EXPECT_FALSE(env("C").has_value());
}

TEST(EnvTest, ProcessEnvReadsTheEnvironment) {
  setenv("KVTRAIN_ENV_TEST_VAR", "42", 1);
  EXPECT_EQ(ProcessEnv()("KVTRAIN_ENV_TEST_VAR").value_or(""), "42");
  unsetenv("KVTRAIN_ENV_TEST_VAR");
  EXPECT_FALSE(ProcessEnv()("KVTRAIN_ENV_TEST_VAR").has_value());
}

TEST(EnvTest, ParseIntVar) {
  EXPECT_EQ(*ParseIntVar("N", "7", 1, 10), 7);
  EXPECT_EQ(*ParseIntVar("N", "-3", -5, 10), -3);
  for (const char* bad : {"two", "", "7x", "1.5", " ", "99999999999999999999"}) {
    StatusOr<int64_t> r = ParseIntVar("DMLC_NUM_WORKER", bad, 1, 65535);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(),
              std::string("DMLC_NUM_WORKER=\"") + bad +
                  "\": expected an integer in [1, 65535]");
  }
  StatusOr<int64_t> out_of_range = ParseIntVar("P", "0", 1, 65535);
  EXPECT_EQ(out_of_range.status().message(),
            "P=\"0\": expected an integer in [1, 65535]");
}

TEST(EnvTest, ParseSecondsVar) {
  EXPECT_DOUBLE_EQ(*ParseSecondsVar("T", "2.5", 0, 10), 2.5);
  EXPECT_DOUBLE_EQ(*ParseSecondsVar("T", "0", 0, 10), 0);
  for (const char* bad : {"-1", "abc", "11", "nan", "inf", "1s"}) {
    StatusOr<double> r = ParseSecondsVar("T", bad, 0, 10);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("T=\""), std::string::npos);
    EXPECT_NE(r.status().message().find("expected a number of seconds"),
              std::string::npos);
  }
}

TEST(EnvTest, ParseBoolVar) {
  EXPECT_TRUE(*ParseBoolVar("B", "1"));
  EXPECT_TRUE(*ParseBoolVar("B", "true"));
  EXPECT_FALSE(*ParseBoolVar("B", "0"));
  EXPECT_FALSE(*ParseBoolVar("B", "off"));
  StatusOr<bool> r = ParseBoolVar("KVTRAIN_CHECK_NAN", "maybe");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "KVTRAIN_CHECK_NAN=\"maybe\": expected 0 or 1 (or true/false)");
}

TEST(EnvTest, GettersFallBackWhenUnset) {
  EnvLookup env = MapEnv({{"X", "5"}, {"Y", "bad"}});
  EXPECT_EQ(*GetIntVar(env, "X", 1, 0, 10), 5);
  EXPECT_EQ(*GetIntVar(env, "Z", 3, 0, 10), 3);
  EXPECT_FALSE(GetIntVar(env, "Y", 3, 0, 10).ok());
  EXPECT_DOUBLE_EQ(*GetSecondsVar(env, "Z", 1.5, 0, 10), 1.5);
  EXPECT_TRUE(*GetBoolVar(env, "Z", true));
  StatusOr<std::string> missing = RequireVar(env, "Z", "needed because");
  EXPECT_EQ(missing.status().message(), "Z is not set: needed because");
}

// base/env.cc's table (EnvVarDocs) is the source of truth and
// docs/environment.md mirrors it, checked in one direction, code -> doc:
// every variable of the table must have a row in the doc with the same
// default, and the doc may list no DMLC_/PS_/KVTRAIN_ variable the table lacks.
// The doc's rows are parsed as `| `NAME` | default | meaning |`.
TEST(EnvTest, DocsEnvironmentTableMatchesTheContract) {
  const std::string kDoc = "docs/environment.md";
  std::ifstream in(kDoc);
  ASSERT_TRUE(in) << kDoc << " is not in the test's runfiles";
  std::map<std::string, std::string> doc_defaults;  // name -> default cell
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    if (end == std::string::npos) continue;
    const std::string name = line.substr(3, end - 3);
    std::string default_cell;
    const size_t open = line.find('|', end);
    const size_t close =
        open == std::string::npos ? open : line.find('|', open + 1);
    if (close != std::string::npos) {
      default_cell = line.substr(open + 1, close - open - 1);
      const size_t first = default_cell.find_first_not_of(' ');
      const size_t last = default_cell.find_last_not_of(' ');
      default_cell = first == std::string::npos
                         ? ""
                         : default_cell.substr(first, last - first + 1);
    }
    EXPECT_TRUE(doc_defaults.emplace(name, default_cell).second)
        << kDoc << " lists " << name << " twice";
  }
  std::set<std::string> table;
  for (const EnvVarDoc& doc : EnvVarDocs()) {
    EXPECT_TRUE(table.insert(doc.name).second) << "listed twice: " << doc.name;
    auto it = doc_defaults.find(doc.name);
    if (it == doc_defaults.end()) {
      ADD_FAILURE() << doc.name << " (base/env.cc) is missing from " << kDoc
                    << "'s environment table";
      continue;
    }
    EXPECT_EQ(it->second, doc.default_value)
        << kDoc << " gives " << doc.name << " the default \"" << it->second
        << "\" but base/env.cc says \"" << doc.default_value << "\"";
  }
  for (const auto& entry : doc_defaults) {
    const std::string& row = entry.first;
    const bool ours = row.rfind("DMLC_", 0) == 0 || row.rfind("PS_", 0) == 0 ||
                      row.rfind("KVTRAIN_", 0) == 0;
    if (ours) {
      EXPECT_TRUE(table.count(row))
          << kDoc << " documents " << row << " but base/env.cc does not";
    }
  }
}

}  // namespace
}  // namespace kvtrain
