// Unauthenticated refusals of audited routes, counted instead of recorded
// one by one. Pure: the caller passes the time and appends what comes back.
//
// Why: every audited request used to append one record to the platform
// chain under the global audit lock, so anyone without a credential could
// grow the trail and contend the lock at will (wrong passwords, throttled
// logins, missing keys). Such a refusal names no principal, and one record
// per (action, status, reason) and minute keeps what an operator needs —
// that it happened, how often, from how many addresses, a sample request —
// at a bounded cost: the keys are bounded by the route table and the error
// codes, whatever the caller sends. Requests by an authenticated principal,
// allowed or not, and successful logins keep one record each.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/records.h"

namespace atrium::audit {

struct DenialKey {
  std::string action;
  std::string outcome;  // "denied" or "failed", as a single record would say
  int64_t status = 0;
  std::string reason;  // the error code's wire name
  auto operator<=>(const DenialKey&) const = default;
};

class DenialTally {
 public:
  // window_ms: how long one summary record covers (aligned to multiples).
  // max_sources: distinct addresses counted per window before saying "more".
  explicit DenialTally(int64_t window_ms = 60'000, size_t max_sources = 1000);

  // Counts one refusal at now_ms. Returns the summaries of every window that
  // closed by now_ms (this key's or another's), oldest first.
  std::vector<AuditRecord> Add(const DenialKey& key, const std::string& source,
                               const std::string& request_id, int64_t now_ms);
  // The summaries of windows closed by now_ms.
  std::vector<AuditRecord> Flush(int64_t now_ms);
  // Every window, closed or not (at shutdown).
  std::vector<AuditRecord> FlushAll();

  // Every refusal ever counted, flushed or not: the metric.
  int64_t total() const { return total_; }
  // Refusals counted in windows not yet flushed.
  int64_t pending() const;

 private:
  struct Window {
    int64_t start_ms = 0;
    int64_t count = 0;
    int64_t last_ms = 0;
    std::set<std::string> sources;
    bool more_sources = false;
    std::string first_source;
    std::string first_request_id;
  };
  AuditRecord Summarize(const DenialKey& key, const Window& w) const;

  const int64_t window_ms_;
  const size_t max_sources_;
  std::map<DenialKey, Window> open_;
  int64_t total_ = 0;
};

}  // namespace atrium::audit
