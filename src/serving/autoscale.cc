#include "serving/autoscale.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace atrium::serving {
namespace {

// Replicas that serve `demand` requests at `utilization` of `slots` each.
int64_t ReplicasFor(int64_t demand, int64_t slots, double utilization) {
  if (demand <= 0) return 0;
  const double per_replica = std::max(1.0, static_cast<double>(slots) * utilization);
  const double n = std::ceil(static_cast<double>(demand) / per_replica);
  return n >= static_cast<double>(kMaxReplicas) ? kMaxReplicas : static_cast<int64_t>(n);
}

int64_t NonNegative(int64_t v) { return std::max<int64_t>(0, v); }

}  // namespace

std::optional<ScaleDecision> DecideScale(const ManagedSpec& spec, int64_t slots_per_replica,
                                         int64_t ready_replicas, const LoadSignals& load,
                                         const AutoscaleRules& rules, AutoscaleMemory& memory,
                                         int64_t now_ms) {
  if (!spec.autoscale || load.gateways <= 0) return std::nullopt;
  // The gateways' numbers are bounded here, whatever they say.
  const int64_t slots = std::max<int64_t>(1, slots_per_replica);
  const int64_t queued = NonNegative(load.queued);
  const int64_t in_flight = NonNegative(load.in_flight);
  const int64_t oldest_wait_ms = NonNegative(load.oldest_wait_ms);
  const int64_t demand = queued > std::numeric_limits<int64_t>::max() - in_flight
                             ? std::numeric_limits<int64_t>::max()
                             : queued + in_flight;
  const int64_t current = spec.replicas;
  const int64_t floor =
      rules.allow_zero && spec.min_replicas == 0 ? 0 : std::max<int64_t>(1, spec.min_replicas);
  const int64_t ceiling = std::max(spec.max_replicas, floor);

  if (demand == 0) {
    if (memory.idle_since_ms < 0) memory.idle_since_ms = now_ms;
  } else {
    memory.idle_since_ms = -1;
  }
  const int64_t needed = ReplicasFor(demand, slots, rules.target_utilization);
  auto decide = [&](int64_t to, const char* what) {
    memory.last_change_ms = now_ms;
    memory.low_since_ms = -1;
    return ScaleDecision{
        .replicas = to,
        .why = std::string(what) + ": " + std::to_string(queued) + " queued (oldest waited " +
               std::to_string(oldest_wait_ms) + " ms), " + std::to_string(in_flight) +
               " in flight on " + std::to_string(ready_replicas) + " ready of " +
               std::to_string(current) + " replicas x " + std::to_string(slots) + " slots; " +
               std::to_string(current) + " -> " + std::to_string(to) + " replicas"};
  };

  if (current < floor) return decide(floor, "raised to the least allowed");
  if (current > ceiling) return decide(ceiling, "lowered to the most allowed");

  // Up: what demand needs, or one more for a request that waited too long
  // while every replica answers.
  int64_t up = needed;
  if (queued > 0 && oldest_wait_ms >= rules.scale_up_wait_ms && ready_replicas >= current) {
    up = std::max(up, current + 1);
  }
  up = std::min(up, ceiling);
  if (up > current) {
    memory.low_since_ms = -1;
    if (current > 0 && memory.last_up_ms >= 0 &&
        now_ms - memory.last_up_ms < rules.up_cooldown_ms) {
      return std::nullopt;
    }
    memory.last_up_ms = now_ms;
    return decide(up, current == 0 ? "scaled up from zero" : "scaled up");
  }

  // Down: one at a time, once load stayed at or below what one fewer
  // serves at the low mark for the whole cooldown, and a cooldown after
  // the last change.
  const int64_t target = std::max(
      ReplicasFor(demand, slots, std::min(rules.scale_down_utilization, rules.target_utilization)),
      floor);
  if (target >= current) {
    memory.low_since_ms = -1;
    return std::nullopt;
  }
  if (memory.low_since_ms < 0) memory.low_since_ms = now_ms;
  if (now_ms - memory.low_since_ms < rules.down_cooldown_ms) return std::nullopt;
  if (memory.last_change_ms >= 0 && now_ms - memory.last_change_ms < rules.down_cooldown_ms) {
    return std::nullopt;
  }
  const int64_t to = current - 1;
  if (to == 0 &&
      (memory.idle_since_ms < 0 || now_ms - memory.idle_since_ms < rules.idle_to_zero_ms)) {
    return std::nullopt;
  }
  return decide(to, to == 0 ? "scaled to zero" : "scaled down");
}

}  // namespace atrium::serving
