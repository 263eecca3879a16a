#include "gateway/slot_shares.h"

#include <algorithm>
#include <cmath>

namespace atrium::gateway {

void SlotShares::Seen(const std::string& tenant, double weight, int64_t now_ms) {
  TenantState& t = tenants_[tenant];
  t.weight = weight > 0 ? weight : 1;
  t.last_seen_ms = now_ms;
}

void SlotShares::Queued(const std::string& tenant) { ++tenants_[tenant].waiting; }

void SlotShares::Dequeued(const std::string& tenant) {
  auto it = tenants_.find(tenant);
  if (it != tenants_.end() && it->second.waiting > 0) --it->second.waiting;
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
    if (name == tenant || Present(t, now_ms)) total += t.weight;
  }
  return static_cast<double>(capacity) * self->second.weight / total;
}

bool SlotShares::Contended(const std::string& tenant, int64_t now_ms) const {
  for (const auto& [name, t] : tenants_) {
    if (name != tenant && Present(t, now_ms)) return true;
  }
  return false;
}

bool SlotShares::Shared(int64_t now_ms) const {
  int active = 0;
  for (const auto& [name, t] : tenants_) {
    if (Present(t, now_ms) && ++active >= 2) return true;
  }
  return false;
}

bool SlotShares::BelowShare(const std::string& tenant, int64_t slots, int64_t now_ms,
                            int64_t waiting) const {
  auto self = tenants_.find(tenant);
  const int64_t in_flight = self == tenants_.end() ? 0 : self->second.in_flight;
  const int64_t asked = in_flight + waiting;
  return in_flight == 0 || static_cast<double>(asked) < ShareOf(tenant, slots, now_ms);
}

bool SlotShares::MayStart(const std::string& tenant, int64_t capacity, int64_t free, int64_t now_ms,
                          const QueuedFn& queued) const {
  if (free <= 0) return false;
  auto self = tenants_.find(tenant);
  const double self_weight = self == tenants_.end() ? 1 : self->second.weight;
  const int64_t self_in_flight = self == tenants_.end() ? 0 : self->second.in_flight;
  double total = self_weight;
  for (const auto& [name, t] : tenants_) {
    if (name != tenant && Active(t)) total += t.weight;
  }
  const double per_weight = static_cast<double>(capacity) / total;
  if (static_cast<double>(self_in_flight) < self_weight * per_weight) return true;
  double reserve = 0;
  for (const auto& [name, t] : tenants_) {
    if (name == tenant || !Active(t)) continue;
    const int64_t waiting = queued ? queued(name) : 0;
    reserve += std::max(0.0, t.weight * per_weight - static_cast<double>(t.in_flight + waiting));
  }
  // Rounded up: a share of 2.5 slots keeps 3 free (the epsilon absorbs
  // floating-point noise in exact shares).
  return static_cast<double>(free - 1) >= std::ceil(reserve - 1e-9);
}

double SlotShares::DecayedServed(const TenantState& t, int64_t now_ms) const {
  if (t.served <= 0 || now_ms <= t.served_ms) return t.served;
  return t.served * std::exp2(-static_cast<double>(now_ms - t.served_ms) /
                              static_cast<double>(std::max<int64_t>(usage_half_life_ms_, 1)));
}

void SlotShares::Served(const std::string& tenant, double tokens, int64_t now_ms) {
  TenantState& t = tenants_[tenant];
  t.served = std::max(0.0, DecayedServed(t, now_ms) + tokens);
  t.served_ms = std::max(t.served_ms, now_ms);
}

bool SlotShares::Light(const std::string& tenant, int64_t now_ms) const {
  auto self = tenants_.find(tenant);
  if (self == tenants_.end()) return Contended(tenant, now_ms);
  double total_weight = 0;
  double total_served = 0;
  bool contended = false;
  for (const auto& [name, t] : tenants_) {
    if (name != tenant && !Present(t, now_ms)) continue;
    contended = contended || name != tenant;
    total_weight += t.weight;
    total_served += DecayedServed(t, now_ms);
  }
  if (!contended) return false;
  const double served = DecayedServed(self->second, now_ms);
  // served / total < weight / total_weight, without dividing: with nothing
  // served yet, nobody is behind.
  return served * total_weight < self->second.weight * total_served;
}

bool SlotShares::LeastDemand(const std::string& tenant, int64_t waiting, int64_t now_ms,
                             const QueuedFn& queued) const {
  auto self = tenants_.find(tenant);
  const double self_weight = self == tenants_.end() ? 1 : self->second.weight;
  const int64_t self_in_flight = self == tenants_.end() ? 0 : self->second.in_flight;
  const double mine = static_cast<double>(self_in_flight + waiting) / self_weight;
  for (const auto& [name, t] : tenants_) {
    if (name == tenant || !Present(t, now_ms)) continue;
    const int64_t theirs = t.in_flight + (queued ? queued(name) : 0);
    if (static_cast<double>(theirs) / t.weight < mine) return false;
  }
  return true;
}

void SlotShares::Sweep(int64_t now_ms) {
  std::erase_if(tenants_, [&](const auto& entry) { return !Present(entry.second, now_ms); });
}

}  // namespace atrium::gateway
