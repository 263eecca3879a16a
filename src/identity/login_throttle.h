// Counts failed logins per account and per source address in a sliding
// window and refuses further attempts once either passes its limit. Pure and
// in memory; the clock is injected. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/result.h"

namespace atrium {

struct LoginThrottleOptions {
  int max_failures_per_account = 5;
  int max_failures_per_source = 20;
  int64_t window_ms = int64_t{15} * 60 * 1000;
  size_t max_tracked = 100'000;  // bound on memory under a spraying attack
};

class LoginThrottle {
 public:
  LoginThrottle(const Clock& clock, LoginThrottleOptions options = {});

  // kResourceExhausted with retry_after_s when either limit is reached.
  Status Check(const std::string& account, const std::string& source);
  void RecordFailure(const std::string& account, const std::string& source);
  // A successful login clears the account's failures (not the source's).
  void RecordSuccess(const std::string& account);

 private:
  using Window = std::deque<int64_t>;
  int64_t RetryAfterMs(Window& w, int limit, int64_t now);
  void Prune(Window& w, int64_t now);
  void Bound(std::unordered_map<std::string, Window>& m);

  const Clock& clock_;
  LoginThrottleOptions options_;
  std::mutex mu_;
  std::unordered_map<std::string, Window> by_account_;  // GUARDED_BY(mu_)
  std::unordered_map<std::string, Window> by_source_;   // GUARDED_BY(mu_)
};

}  // namespace atrium
