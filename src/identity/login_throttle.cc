#include "identity/login_throttle.h"

namespace atrium {

LoginThrottle::LoginThrottle(const Clock& clock, LoginThrottleOptions options)
    : clock_(clock), options_(options) {}

void LoginThrottle::Prune(Window& w, int64_t now) {
  while (!w.empty() && w.front() <= now - options_.window_ms) w.pop_front();
}

int64_t LoginThrottle::RetryAfterMs(Window& w, int limit, int64_t now) {
  Prune(w, now);
  if (static_cast<int>(w.size()) < limit) return 0;
  // The oldest failure that still counts must leave the window first.
  return w[w.size() - limit] + options_.window_ms - now;
}

Status LoginThrottle::Check(const std::string& account, const std::string& source) {
  std::lock_guard lock(mu_);
  int64_t now = clock_.NowMillis();
  int64_t wait = 0;
  if (auto it = by_account_.find(account); it != by_account_.end()) {
    wait = std::max(wait, RetryAfterMs(it->second, options_.max_failures_per_account, now));
  }
  if (auto it = by_source_.find(source); it != by_source_.end()) {
    wait = std::max(wait, RetryAfterMs(it->second, options_.max_failures_per_source, now));
  }
  if (wait > 0) {
    return Error::ResourceExhausted("too many failed logins; try again later",
                                    static_cast<int>((wait + 999) / 1000));
  }
  return OkStatus();
}

void LoginThrottle::Bound(std::unordered_map<std::string, Window>& m) {
  if (m.size() < options_.max_tracked) return;
  int64_t now = clock_.NowMillis();
  for (auto it = m.begin(); it != m.end();) {
    Prune(it->second, now);
    it = it->second.empty() ? m.erase(it) : std::next(it);
  }
  if (m.size() >= options_.max_tracked) m.erase(m.begin());
}

void LoginThrottle::RecordFailure(const std::string& account, const std::string& source) {
  std::lock_guard lock(mu_);
  int64_t now = clock_.NowMillis();
  Bound(by_account_);
  Bound(by_source_);
  by_account_[account].push_back(now);
  by_source_[source].push_back(now);
}

void LoginThrottle::RecordSuccess(const std::string& account) {
  std::lock_guard lock(mu_);
  by_account_.erase(account);
}

}  // namespace atrium
