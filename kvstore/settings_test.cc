// StoreSettings::FromEnv: values, limits, and which values the environment
// gave (DistKVStore::Create picks the others from the job's hosts).
#include "kvstore/settings.h"

#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

namespace kvtrain {
namespace kv {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(StoreSettingsTest, DefaultsAreMarkedAsNotGiven) {
  StatusOr<StoreSettings> s = StoreSettings::FromEnv(Env({}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->server_threads, StoreSettings::kServerThreadsAcrossHosts);
  EXPECT_FALSE(s->server_threads_given);
  EXPECT_EQ(s->bucket_bytes, StoreSettings::kBucketBytesAcrossHosts);
  EXPECT_FALSE(s->bucket_bytes_given);
  EXPECT_EQ(s->piece_bytes, StoreSettings::kPieceBytesAcrossHosts);
  EXPECT_FALSE(s->piece_bytes_given);
}

// Pieces follow KVTRAIN_PS_BUCKET_BYTES where only that is given (its
// meaning before pieces had a variable of their own), and
// KVTRAIN_PS_PIECE_BYTES wins over it.
TEST(StoreSettingsTest, PiecesFollowTheBucketUnlessGivenThemselves) {
  StatusOr<StoreSettings> s =
      StoreSettings::FromEnv(Env({{"KVTRAIN_PS_BUCKET_BYTES", "4096"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->piece_bytes, 4096);
  EXPECT_FALSE(s->piece_bytes_given);
  s = StoreSettings::FromEnv(Env(
      {{"KVTRAIN_PS_BUCKET_BYTES", "4096"}, {"KVTRAIN_PS_PIECE_BYTES", "0"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->bucket_bytes, 4096);
  EXPECT_EQ(s->piece_bytes, 0);
  EXPECT_TRUE(s->piece_bytes_given);
  s = StoreSettings::FromEnv(Env({{"KVTRAIN_PS_PIECE_BYTES", "-5"}}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("KVTRAIN_PS_PIECE_BYTES"),
            std::string::npos)
      << s.status();
}

TEST(StoreSettingsTest, TheEnvironmentWins) {
  StatusOr<StoreSettings> s = StoreSettings::FromEnv(
      Env({{"KVTRAIN_SERVER_THREADS", "2"}, {"KVTRAIN_PS_BUCKET_BYTES", "1000"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->server_threads, 2);
  EXPECT_TRUE(s->server_threads_given);
  EXPECT_EQ(s->bucket_bytes, 1000);
  EXPECT_TRUE(s->bucket_bytes_given);
  s = StoreSettings::FromEnv(Env({{"KVTRAIN_SERVER_THREADS", "0"}}));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->server_threads, 0);
  EXPECT_TRUE(s->server_threads_given);
}

TEST(StoreSettingsTest, BadValuesNameTheVariable) {
  StatusOr<StoreSettings> s = StoreSettings::FromEnv(Env({{"KVTRAIN_SERVER_THREADS", "-1"}}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("KVTRAIN_SERVER_THREADS"), std::string::npos)
      << s.status();
}

}  // namespace
}  // namespace kv
}  // namespace kvtrain
