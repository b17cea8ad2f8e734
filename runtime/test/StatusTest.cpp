#include "llcdist/runtime/Status.h"

#include <gtest/gtest.h>

namespace llcdist::rt {
namespace {

StatusOr<int> parsePositive(int x) {
  if (x <= 0) return Status::invalidArgument("not positive: " + std::to_string(x));
  return x;
}

Status twice(int x, int* out) {
  LLCDIST_ASSIGN_OR_RETURN(int v, parsePositive(x));
  *out = 2 * v;
  return Status::ok();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(Status::ok().isOk());
  EXPECT_EQ(Status::ok().toString(), "OK");
  Status s = Status::dataLoss("truncated").withContext("tensor 'a'").withContext("file 'x.bin'");
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "file 'x.bin': tensor 'a': truncated");
  EXPECT_EQ(Status(s).withRank(3).message(), "rank 3: file 'x.bin': tensor 'a': truncated");
  EXPECT_EQ(s.toString(), "DataLoss: file 'x.bin': tensor 'a': truncated");
  EXPECT_TRUE(Status::ok().withContext("ignored").isOk());
  EXPECT_EQ(Status::ok().withContext("ignored").message(), "");
}

TEST(StatusTest, StatusOrAndMacros) {
  int out = 0;
  EXPECT_TRUE(twice(4, &out).isOk());
  EXPECT_EQ(out, 8);
  Status err = twice(-1, &out);
  EXPECT_EQ(err.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(err.message(), "not positive: -1");
  StatusOr<std::string> s = std::string("hello");
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->size(), 5u);
}

}  // namespace
}  // namespace llcdist::rt
