// BodyBudget: how many bytes of request bodies the gateway holds in memory.
// A request's body is read only after its headers are authenticated, and
// only within two budgets: one for the whole gateway (every body being read
// or served), and one per tenant for the bodies of its requests that wait in
// the fair queue, so that neither a flood of connections nor one tenant's
// backlog can take the gateway's memory. Pure and thread-safe: the counts,
// no I/O and no clock.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace atrium::gateway {

struct BodyBudgetOptions {
  int64_t total_bytes = int64_t{256} << 20;             // all bodies held at once
  int64_t queued_bytes_per_tenant = int64_t{64} << 20;  // one tenant's bodies waiting in the queue
};

class BodyBudget {
 public:
  explicit BodyBudget(BodyBudgetOptions options) : options_(options) {}

  // Takes `bytes` (>= 0) of the gateway's budget: false, taking nothing,
  // when that would pass it. A single body larger than the whole budget is
  // refused too.
  bool Reserve(int64_t bytes);
  void Release(int64_t bytes);  // what a Reserve() took
  // The same for the bodies of `tenant`'s queued requests.
  bool ReserveQueued(const std::string& tenant, int64_t bytes);
  void ReleaseQueued(const std::string& tenant, int64_t bytes);

  int64_t held() const;
  int64_t queued(const std::string& tenant) const;
  const BodyBudgetOptions& options() const { return options_; }

 private:
  const BodyBudgetOptions options_;
  mutable std::mutex mu_;
  int64_t held_ = 0;                                 // GUARDED_BY(mu_)
  std::unordered_map<std::string, int64_t> queued_;  // GUARDED_BY(mu_): tenants with any
};

}  // namespace atrium::gateway
