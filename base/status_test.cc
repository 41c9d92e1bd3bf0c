#include "base/status.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, EveryFactoryKeepsCodeAndMessage) {
  struct Case {
    Status status;
    Status::Code code;
    const char* prefix;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m"), Status::Code::kInvalidArgument,
       "Invalid argument: m"},
      {Status::NotFound("m"), Status::Code::kNotFound, "Not found: m"},
      {Status::Unavailable("m"), Status::Code::kUnavailable, "Unavailable: m"},
      {Status::DeadlineExceeded("m"), Status::Code::kDeadlineExceeded,
       "Deadline exceeded: m"},
      {Status::Internal("m"), Status::Code::kInternal, "Internal: m"},
      {Status::AlreadyExists("m"), Status::Code::kAlreadyExists,
       "Already exists: m"},
      {Status::FailedPrecondition("m"), Status::Code::kFailedPrecondition,
       "Failed precondition: m"},
      {Status::DataLoss("m"), Status::Code::kDataLoss, "Data loss: m"},
      {Status::Aborted("m"), Status::Code::kAborted, "Aborted: m"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(c.status.ToString(), c.prefix);
  }
}

TEST(StatusTest, AnnotatePrefixesErrorsOnly) {
  EXPECT_TRUE(Status::OK().Annotate("ctx").ok());
  Status s = Status::NotFound("no file").Annotate("loading x.params");
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_EQ(s.message(), "loading x.params: no file");
}

TEST(StatusTest, Equality) {
  EXPECT_EQ(Status::NotFound("a"), Status::NotFound("a"));
  EXPECT_NE(Status::NotFound("a"), Status::NotFound("b"));
  EXPECT_NE(Status::NotFound("a"), Status::Internal("a"));
}

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Status Quarter(int x, int* out) {
  KV_ASSIGN_OR_RETURN(int h, Half(x));
  KV_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::OK();
}

Status FailIfNegative(int x) {
  if (x < 0) return Status::InvalidArgument("negative");
  return Status::OK();
}

Status Both(int a, int b) {
  KV_RETURN_IF_ERROR(FailIfNegative(a));
  KV_RETURN_IF_ERROR(FailIfNegative(b));
  return Status::OK();
}

TEST(StatusOrTest, ValueAndError) {
  StatusOr<int> v = Half(8);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 4);
  StatusOr<int> e = Half(3);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "3 is odd");
}

TEST(StatusOrTest, Macros) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.message(), "3 is odd");
  EXPECT_TRUE(Both(1, 2).ok());
  EXPECT_EQ(Both(1, -2).message(), "negative");
}

TEST(StatusOrDeathTest, ValueOfErrorIsAProgrammerBug) {
  StatusOr<int> e = Half(3);
  EXPECT_DEATH((void)e.value(), "3 is odd");
}

}  // namespace
}  // namespace kvtrain
