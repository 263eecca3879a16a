#include "billing/period.h"

#include <gtest/gtest.h>

namespace atrium::billing {
namespace {

constexpr int64_t kDay = 86'400'000;
// 2026-11-01T00:00:00Z.
constexpr int64_t kNov1 = 1'793'491'200'000;

TEST(Period, MonthlyFromTheAnchorDay) {
  Period p = PeriodContaining(kNov1 + 3 * kDay, 1);
  EXPECT_EQ(p.start_ms, kNov1);
  EXPECT_EQ(p.end_ms, kNov1 + 30 * kDay);
  EXPECT_EQ(PeriodName(p), "2026-11");
  EXPECT_EQ(DateOf(p.end_ms), "2026-12-01");
  // Anchor 15: the 3rd of November is in October's period.
  Period q = PeriodContaining(kNov1 + 2 * kDay, 15);
  EXPECT_EQ(PeriodName(q), "2026-10");
  EXPECT_EQ(DateOf(q.start_ms), "2026-10-15");
  EXPECT_EQ(DateOf(q.end_ms), "2026-11-15");
  // Boundaries: the start belongs to the period, the end to the next.
  EXPECT_EQ(PeriodContaining(q.end_ms, 15).start_ms, q.end_ms);
  EXPECT_EQ(PeriodContaining(q.end_ms - 1, 15), q);
  EXPECT_EQ(NextPeriod(q, 15).start_ms, q.end_ms);
}

TEST(Period, FebruaryAndLeapYears) {
  auto p = *ParsePeriodName("2028-02", 28);
  EXPECT_EQ(DateOf(p.start_ms), "2028-02-28");
  EXPECT_EQ(DateOf(p.end_ms), "2028-03-28");
  auto f = *ParsePeriodName("2028-02", 1);
  EXPECT_EQ((f.end_ms - f.start_ms) / kDay, 29);
  auto d = *ParsePeriodName("2026-12", 1);
  EXPECT_EQ(DateOf(d.end_ms), "2027-01-01");
}

TEST(Period, NamesAreChecked) {
  for (const char* bad : {"", "2026-13", "2026-00", "2026-1", "26-11", "2026/11", "1969-12",
                          "2026-11-01", "abcd-ef"}) {
    EXPECT_FALSE(ParsePeriodName(bad, 1).has_value()) << bad;
  }
  EXPECT_FALSE(ParsePeriodName("2026-11", 29).has_value());
  EXPECT_FALSE(ParsePeriodName("2026-11", 0).has_value());
}

}  // namespace
}  // namespace atrium::billing
