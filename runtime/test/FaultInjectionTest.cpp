// LLCDIST_FAULT's parser (FaultInjection.h): what a test asks for, and a clear error for anything else.
#include "llcdist/runtime/FaultInjection.h"

#include <gtest/gtest.h>

namespace llcdist::rt {
namespace {

TEST(FaultSpec, ParsesEveryField) {
  auto f = parseFaultSpec("rank:3,step:2,op:5,kind:delay,seconds:0.25");
  ASSERT_TRUE(f.isOk()) << f.status().toString();
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->step, 2);
  EXPECT_EQ(f->op, 5);
  EXPECT_EQ(f->kind, FaultSpec::Kind::kDelay);
  EXPECT_EQ(f->seconds, 0.25);
  auto g = parseFaultSpec("kind:stall,step:0,rank:1");  // any order; op defaults to 0
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  EXPECT_EQ(g->op, 0);
  EXPECT_EQ(g->kind, FaultSpec::Kind::kStall);
}

TEST(FaultSpec, RejectsWhatItDoesNotKnow) {
  const std::pair<const char*, const char*> cases[] = {
      {"rank:1,step:2", "missing field 'kind'"},
      {"rank:1,step:2,kind:crash", "kind must be exit, stall or delay, got 'crash'"},
      {"rank:-1,step:2,kind:exit", "rank must be an integer >= 0, got '-1'"},
      {"rank:1,step:x,kind:exit", "step must be an integer >= 0, got 'x'"},
      {"rank:1,step:1,kind:exit,when:now", "unknown field 'when'"},
      {"rank:1,rank:2,step:1,kind:exit", "field 'rank' given twice"},
      {"rank:1,step:1,kind:exit,seconds:2", "seconds is for kind:delay"},
      {"rank:1,step:1,kind:delay,seconds:nan", "seconds must be a number in [0, 86400], got 'nan'"},
      {"rank1,step:1,kind:exit", "'rank1' is not key:value"},
      {"rank:99999999999999999999,step:1,kind:exit", "rank must be an integer >= 0"},
  };
  for (const auto& [text, want] : cases) {
    auto f = parseFaultSpec(text);
    ASSERT_FALSE(f.isOk()) << text;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(f.status().message().find(std::string("LLCDIST_FAULT: ") + want), std::string::npos)
        << text << ": " << f.status().message();
  }
}

}  // namespace
}  // namespace llcdist::rt
