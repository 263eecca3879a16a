#include "billing/period.h"

#include <chrono>
#include <cstdio>

namespace atrium::billing {
namespace {

using std::chrono::days;
using std::chrono::sys_days;
using std::chrono::year_month_day;

int64_t MsOf(const year_month_day& ymd) {
  return static_cast<int64_t>(sys_days(ymd).time_since_epoch().count()) * 86'400'000;
}

year_month_day DayOf(int64_t ms) { return year_month_day(sys_days(days(ms / 86'400'000))); }

Period MonthFrom(std::chrono::year_month ym, int64_t anchor_day) {
  const auto day = std::chrono::day(static_cast<unsigned>(anchor_day));
  const auto next = ym + std::chrono::months(1);
  return {MsOf(ym / day), MsOf(next / day)};
}

}  // namespace

Period PeriodContaining(int64_t at_ms, int64_t anchor_day) {
  const year_month_day d = DayOf(at_ms);
  std::chrono::year_month ym = d.year() / d.month();
  if (static_cast<unsigned>(d.day()) < static_cast<unsigned>(anchor_day)) {
    ym -= std::chrono::months(1);
  }
  return MonthFrom(ym, anchor_day);
}

Period NextPeriod(const Period& p, int64_t anchor_day) {
  return PeriodContaining(p.end_ms, anchor_day);
}

std::string PeriodName(const Period& p) {
  const year_month_day d = DayOf(p.start_ms);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04d-%02u", static_cast<int>(d.year()),
                static_cast<unsigned>(d.month()));
  return buf;
}

std::string DateOf(int64_t ms) {
  const year_month_day d = DayOf(ms);
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04d-%02u-%02u", static_cast<int>(d.year()),
                static_cast<unsigned>(d.month()), static_cast<unsigned>(d.day()));
  return buf;
}

Result<Period> ParsePeriodName(std::string_view name, int64_t anchor_day) {
  auto bad = [&] {
    return Error::InvalidArgument(
        "a billing period is named YYYY-MM (the month it starts in), "
        "e.g. 2026-11");
  };
  if (name.size() != 7 || name[4] != '-') return bad();
  int year = 0;
  unsigned month = 0;
  for (size_t i = 0; i < 7; ++i) {
    if (i == 4) continue;
    if (name[i] < '0' || name[i] > '9') return bad();
    if (i < 4) {
      year = year * 10 + (name[i] - '0');
    } else {
      month = month * 10 + static_cast<unsigned>(name[i] - '0');
    }
  }
  if (year < 1970 || year > 9998 || month < 1 || month > 12) return bad();
  if (anchor_day < kMinAnchorDay || anchor_day > kMaxAnchorDay) {
    return Error::InvalidArgument("anchor day must be 1 to 28");
  }
  return MonthFrom(std::chrono::year(year) / std::chrono::month(month), anchor_day);
}

}  // namespace atrium::billing
