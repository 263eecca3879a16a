// Request and token rate limits and concurrency / queue-depth limits, per
// subject (a tenant or one of its keys). Pure: the caller passes the time
// and each subject's current limits (they change with the policy snapshot;
// state adapts on the next call). Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/gateway_records.h"

namespace atrium::gateway {

struct LimitSubject {
  std::string name;      // "tenant:<id>" or "key:<id>"
  GatewayLimits limits;  // 0 = unlimited
};

struct LimitDecision {
  bool allowed = true;
  int64_t retry_after_ms = 0;  // when refused: when to retry; -1 = never (cannot fit)
  std::string reason;          // when refused, e.g. "requests per minute of key abc (limit 60)"
};

class Limiter {
 public:
  // Requests per minute and tokens per minute are token buckets (capacity the
  // per-minute limit, refilled continuously; a new subject starts full).
  // All-or-nothing across subjects: if every bucket of every subject has room,
  // takes 1 request and `tokens` (input estimate + max_tokens reservation) from
  // each; otherwise takes nothing and names the limit that waits longest.
  // A request needing more tokens than a bucket's capacity is refused with
  // retry_after_ms = -1.
  LimitDecision Admit(const std::vector<LimitSubject>& subjects, int64_t tokens, int64_t now_ms);
  // After the response: gives back reserved - actual tokens to each token
  // bucket, or takes the excess, at most the bucket's capacity (one minute
  // of its limit) per request: a bucket may go into debt, which later
  // requests wait out, but one request cannot lock a subject out for longer
  // than a minute beyond its own reservation.
  void Reconcile(const std::vector<LimitSubject>& subjects, int64_t reserved, int64_t actual,
                 int64_t now_ms);

  // In-flight < max_concurrent for every subject.
  bool CanStart(const std::vector<LimitSubject>& subjects) const;
  void Started(const std::vector<LimitSubject>& subjects);
  void Finished(const std::vector<LimitSubject>& subjects);
  // Queued < max_queued for every subject, then counts one more queued
  // request for each; refused (nothing counted) with a retry hint otherwise.
  LimitDecision TryQueue(const std::vector<LimitSubject>& subjects);
  void Unqueued(const std::vector<LimitSubject>& subjects);

  // Drops the state of subjects nothing is lost by forgetting: none in flight
  // or queued, and both buckets full again at `now_ms` (a new subject starts
  // full). Call periodically; it bounds memory with many keys.
  void Sweep(int64_t now_ms);

  size_t tracked() const { return subjects_.size(); }

 private:
  // Levels are in 1/60000 of a request or token, so a limit of L per minute
  // refills exactly L units per millisecond: integer arithmetic, no drift.
  struct Bucket {
    int64_t level = 0;  // may be negative: debt after Reconcile
    int64_t updated_ms = 0;
    bool started = false;

    // Refills up to `now_ms` at `per_minute`, never above its capacity (also
    // when the limit was lowered since).
    void Refill(int64_t per_minute, int64_t now_ms);
    bool FullAt(int64_t per_minute, int64_t now_ms) const;
  };
  struct State {
    GatewayLimits limits;  // as last seen, for Sweep
    Bucket requests;
    Bucket tokens;
    int64_t in_flight = 0;
    int64_t queued = 0;
  };

  std::unordered_map<std::string, State> subjects_;
};

}  // namespace atrium::gateway
