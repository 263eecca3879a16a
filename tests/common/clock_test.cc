#include "common/clock.h"

#include <gtest/gtest.h>

namespace atrium {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ParseTimestampTest, AcceptsMillisecondsAndRfc3339) {
  struct Case {
    const char* text;
    int64_t ms;
  };
  for (const Case& c :
       {Case{"0", 0}, Case{"1790000000000", 1'790'000'000'000}, Case{"1970-01-01T00:00:00Z", 0},
        Case{"2026-09-21T14:00:00Z", 1'789'999'200'000},
        Case{"2026-09-21T14:00:00.5Z", 1'789'999'200'500},
        Case{"2026-09-21T14:00:00.123456Z", 1'789'999'200'123},
        Case{"2026-09-21T16:00:00+02:00", 1'789'999'200'000},
        Case{"2026-09-21t09:30:00-04:30", 1'789'999'200'000},
        Case{"2024-02-29T00:00:00Z", 1'709'164'800'000}}) {
    auto parsed = ParseTimestamp(c.text, "from");
    ASSERT_TRUE(parsed.has_value()) << c.text << ": " << parsed.error().message;
    EXPECT_EQ(*parsed, c.ms) << c.text;
  }
}

TEST(ParseTimestampTest, RejectsEverythingElseNamingTheField) {
  for (const char* text :
       {"", "-5", "12abc", "2026-09-21", "2026-09-21T14:00:00", "2026-13-01T00:00:00Z",
        "2023-02-29T00:00:00Z", "2026-09-21T24:00:00Z", "2026-09-21T14:00:00.Z",
        "2026-09-21T14:00:00+0200", "2026-09-21 14:00:00Z", "1969-12-31T23:59:59Z",
        "2026-09-21T14:00:00Zjunk", "99999999999999999999"}) {
    auto parsed = ParseTimestamp(text, "query parameter 'to'");
    ASSERT_FALSE(parsed.has_value()) << text;
    EXPECT_TRUE(Contains(parsed.error().message, "'to'")) << parsed.error().message;
  }
}

TEST(FormatTimestampTest, RoundTripsThroughParseTimestamp) {
  for (int64_t ms : {int64_t{0}, int64_t{1'789'999'200'123}, int64_t{1'709'164'800'000}}) {
    auto back = ParseTimestamp(FormatTimestamp(ms), "t");
    ASSERT_TRUE(back.has_value()) << FormatTimestamp(ms);
    EXPECT_EQ(*back, ms);
  }
}

}  // namespace
}  // namespace atrium
