#include "common/clock.h"

#include <charconv>
#include <cstdio>
#include <ctime>

namespace atrium {

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
// days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int DaysInMonth(int64_t y, int64_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Reads `n` digits at text[pos] into *out.
bool Digits(std::string_view text, size_t pos, size_t n, int64_t* out) {
  if (pos + n > text.size()) return false;
  int64_t v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Result<int64_t> ParseTimestamp(std::string_view text, const std::string& what) {
  auto bad = [&] {
    return Error::InvalidArgument(
        what +
        " must be milliseconds since the epoch or an RFC 3339 time such as "
        "2026-09-21T14:00:00Z");
  };
  if (text.empty()) return bad();
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    int64_t ms = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), ms);
    if (ec != std::errc() || ptr != text.data() + text.size()) return bad();
    return ms;
  }
  // YYYY-MM-DDTHH:MM:SS
  int64_t y, mo, d, h, mi, s;
  if (text.size() < 20 || !Digits(text, 0, 4, &y) || text[4] != '-' || !Digits(text, 5, 2, &mo) ||
      text[7] != '-' || !Digits(text, 8, 2, &d) || (text[10] != 'T' && text[10] != 't') ||
      !Digits(text, 11, 2, &h) || text[13] != ':' || !Digits(text, 14, 2, &mi) || text[16] != ':' ||
      !Digits(text, 17, 2, &s)) {
    return bad();
  }
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 ||
      s > 59) {
    return bad();
  }
  size_t pos = 19;
  int64_t millis = 0;
  if (text[pos] == '.') {
    size_t start = ++pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (pos - start < 3) millis = millis * 10 + (text[pos] - '0');
      ++pos;
    }
    if (pos == start) return bad();
    for (size_t n = pos - start; n < 3; ++n) millis *= 10;
  }
  int64_t offset_min = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int64_t oh, om;
    if (!Digits(text, pos + 1, 2, &oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !Digits(text, pos + 4, 2, &om) || oh > 23 || om > 59) {
      return bad();
    }
    offset_min = (oh * 60 + om) * (text[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  int64_t seconds = DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset_min * 60;
  if (seconds < 0) return bad();
  return seconds * 1000 + millis;
}

std::string FormatTimestamp(int64_t unix_millis) {
  std::time_t secs = static_cast<std::time_t>(unix_millis / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(unix_millis % 1000));
  return buf;
}

}  // namespace atrium
