#include "gateway/slot_rules.h"

namespace atrium::gateway {

bool SlotRules::MayTakeSlot(const std::string& tenant) const {
  // Only the fair discipline reserves slots for light tenants; FIFO is the
  // plain baseline.
  if (!load_.fair) return true;
  // Burst slots are for when the capacity is used up: below it, the slots
  // kept for other tenants' shares stay theirs, light or not.
  const int64_t free = load_.capacity - load_.in_flight;
  return free > 0 ? shares_.MayStart(tenant, load_.capacity, free, now_ms_, queued_)
                  : Burst(tenant);
}

bool SlotRules::Paced(const std::string& tenant, bool stream, bool waiting) const {
  if (!stream || !load_.paces) return false;
  if (!shares_.Contended(tenant, now_ms_)) return false;
  if (!load_.fair) return true;
  // The tenant's waiting requests, this one included.
  const int64_t waits = Queued(tenant) + (waiting ? 0 : 1);
  if (shares_.BelowShare(tenant, load_.capacity, now_ms_, waits)) return false;
  // A tenant that asks for least and has been served less than its share is
  // not paced: a light tenant's burst above its share. Asking for least
  // alone would not do: of two backlogged tenants, the one served faster has
  // the shorter queue, and would be served faster still.
  return !(shares_.LeastDemand(tenant, waits, now_ms_, queued_) && shares_.Light(tenant, now_ms_));
}

bool SlotRules::Burst(const std::string& tenant) const {
  if (!load_.bursts || !load_.fair) return false;
  if (!shares_.Contended(tenant, now_ms_)) return false;
  if (!shares_.BelowShare(tenant, load_.capacity, now_ms_) && !shares_.Light(tenant, now_ms_)) {
    return false;
  }
  // And it asks for least: of two backlogged tenants, the one behind would
  // otherwise keep the burst slots in use as well, and they would be
  // capacity like any other.
  return shares_.LeastDemand(tenant, Queued(tenant), now_ms_, queued_);
}

bool SlotRules::GoesFirst(const std::string& tenant) const {
  return shares_.BelowShare(tenant, load_.capacity, now_ms_);
}

bool SlotRules::BurstSlotsOpen() const {
  return load_.bursts && load_.fair && shares_.Shared(now_ms_);
}

}  // namespace atrium::gateway
