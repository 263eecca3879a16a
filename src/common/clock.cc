#include "common/clock.h"

#include <cstdio>
#include <ctime>

namespace atrium {

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
