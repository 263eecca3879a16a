// Billing periods: a month from a tenant's anchor day (1..28) at 00:00 UTC
// to the same day of the next month. A period is named by the year and
// month it starts in: "2026-11" with anchor day 15 is 2026-11-15 to
// 2026-12-15.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::billing {

struct Period {
  int64_t start_ms = 0;
  int64_t end_ms = 0;  // exclusive
  bool operator==(const Period&) const = default;
};

inline constexpr int64_t kMinAnchorDay = 1;
inline constexpr int64_t kMaxAnchorDay = 28;

// The period holding `at_ms` (>= 0) for an anchor day in 1..28.
Period PeriodContaining(int64_t at_ms, int64_t anchor_day);
// The period after `p` (same anchor day).
Period NextPeriod(const Period& p, int64_t anchor_day);
// "YYYY-MM" of the period's start.
std::string PeriodName(const Period& p);
// The period a name names; InvalidArgument for anything but "YYYY-MM"
// with a year 1970..9999.
Result<Period> ParsePeriodName(std::string_view name, int64_t anchor_day);
// "YYYY-MM-DD" of a day boundary (UTC).
std::string DateOf(int64_t ms);

}  // namespace atrium::billing
