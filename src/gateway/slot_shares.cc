#include "gateway/slot_shares.h"

#include <algorithm>
#include <cmath>

namespace atrium::gateway {

void SlotShares::Seen(const std::string& tenant, double weight, int64_t now_ms) {
  TenantState& t = tenants_[tenant];
  t.weight = weight > 0 ? weight : 1;
  t.last_seen_ms = now_ms;
}

void SlotShares::Started(const std::string& tenant) { ++tenants_[tenant].in_flight; }

void SlotShares::Finished(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end() && it->second.in_flight > 0) --it->second.in_flight;
}

double SlotShares::ShareOf(const std::string& tenant, int64_t capacity, int64_t now_ms) const {
  auto self = tenants_.find(tenant);
  if (self == tenants_.end()) return static_cast<double>(capacity);
  double total = 0;
  for (const auto& [name, t] : tenants_) {
    if (name == tenant || Active(t, now_ms)) total += t.weight;
  }
  return static_cast<double>(capacity) * self->second.weight / total;
}

bool SlotShares::Contended(const std::string& tenant, int64_t now_ms) const {
  for (const auto& [name, t] : tenants_) {
    if (name != tenant && Active(t, now_ms)) return true;
  }
  return false;
}

bool SlotShares::BelowShare(const std::string& tenant, int64_t slots, int64_t now_ms) const {
  auto self = tenants_.find(tenant);
  const int64_t in_flight = self == tenants_.end() ? 0 : self->second.in_flight;
  return in_flight == 0 || static_cast<double>(in_flight) < ShareOf(tenant, slots, now_ms);
}

bool SlotShares::MayStart(const std::string& tenant, int64_t capacity, int64_t free, int64_t now_ms,
                          const QueuedFn& queued) const {
  if (free <= 0) return false;
  auto self = tenants_.find(tenant);
  const double self_weight = self == tenants_.end() ? 1 : self->second.weight;
  const int64_t self_in_flight = self == tenants_.end() ? 0 : self->second.in_flight;
  double total = self_weight;
  for (const auto& [name, t] : tenants_) {
    if (name != tenant && Active(t, now_ms)) total += t.weight;
  }
  const double per_weight = static_cast<double>(capacity) / total;
  if (static_cast<double>(self_in_flight) < self_weight * per_weight) return true;
  double reserve = 0;
  for (const auto& [name, t] : tenants_) {
    if (name == tenant || !Active(t, now_ms)) continue;
    const int64_t waiting = queued ? queued(name) : 0;
    reserve += std::max(0.0, t.weight * per_weight - static_cast<double>(t.in_flight + waiting));
  }
  // Rounded up: a share of 2.5 slots keeps 3 free (the epsilon absorbs
  // floating-point noise in exact shares).
  return static_cast<double>(free - 1) >= std::ceil(reserve - 1e-9);
}

void SlotShares::Sweep(int64_t now_ms) {
  std::erase_if(tenants_, [&](const auto& entry) { return !Active(entry.second, now_ms); });
}

}  // namespace atrium::gateway
