#include "gateway/body_budget.h"

namespace atrium::gateway {

bool BodyBudget::Reserve(int64_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes < 0 || bytes > options_.total_bytes - held_) return false;
  held_ += bytes;
  return true;
}

void BodyBudget::Release(int64_t bytes) {
  std::lock_guard lock(mu_);
  held_ -= bytes;
}

bool BodyBudget::ReserveQueued(const std::string& tenant, int64_t bytes) {
  std::lock_guard lock(mu_);
  auto it = queued_.find(tenant);
  const int64_t now = it == queued_.end() ? 0 : it->second;
  if (bytes < 0 || bytes > options_.queued_bytes_per_tenant - now) return false;
  if (bytes > 0) queued_[tenant] = now + bytes;
  return true;
}

void BodyBudget::ReleaseQueued(const std::string& tenant, int64_t bytes) {
  std::lock_guard lock(mu_);
  auto it = queued_.find(tenant);
  if (it == queued_.end()) return;
  it->second -= bytes;
  if (it->second <= 0) queued_.erase(it);  // the map holds only tenants with a backlog
}

int64_t BodyBudget::held() const {
  std::lock_guard lock(mu_);
  return held_;
}

int64_t BodyBudget::queued(const std::string& tenant) const {
  std::lock_guard lock(mu_);
  auto it = queued_.find(tenant);
  return it == queued_.end() ? 0 : it->second;
}

}  // namespace atrium::gateway
