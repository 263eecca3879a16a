// Time is injected: cores take a Clock so tests can move time by hand.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch.
  virtual int64_t NowMillis() const = 0;
  int64_t NowSeconds() const { return NowMillis() / 1000; }
};

class SystemClock final : public Clock {
 public:
  int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  static SystemClock& Instance() {
    static SystemClock clock;
    return clock;
  }
};

// A clock that only moves when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_millis = 1'790'000'000'000) : now_(start_millis) {}
  int64_t NowMillis() const override { return now_.load(); }
  void AdvanceMillis(int64_t ms) { now_ += ms; }
  void AdvanceSeconds(int64_t s) { now_ += s * 1000; }

 private:
  std::atomic<int64_t> now_;
};

// RFC 3339 UTC with milliseconds, e.g. 2026-11-29T20:19:13.123Z.
std::string FormatTimestamp(int64_t unix_millis);

// A point in time as the API and CLI accept it: milliseconds since the epoch
// ("1790000000000") or RFC 3339 ("2026-09-21T14:00:00Z", with an optional
// fraction, of which milliseconds count, and Z or a ±HH:MM offset). Errors:
// kInvalidArgument naming `what`.
Result<int64_t> ParseTimestamp(std::string_view text, const std::string& what);

}  // namespace atrium
