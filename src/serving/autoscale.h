// Autoscaling, pure: how many replicas a deployment that autoscales wants,
// from what the gateways saw of it (requests waiting for a slot, how long
// the oldest has waited, requests holding a slot) and what the controller
// remembers of it (its last change, since when load has been low, since
// when it has been idle).
//
// Up at once when demand needs more replicas than it has (its slots at the
// target utilization) or a request has waited longer than scale_up_wait_ms,
// at most once per up cooldown (counted from the last scale-up: a step
// down does not hold the next step up); from zero at the first request,
// without cooldown. Down one replica at a time, only after load stayed below what
// one replica fewer serves for the whole down cooldown; to zero only where
// the operator allows it, the spec's min_replicas is 0, and nothing came
// for idle_to_zero_ms. Without a fresh signal nothing changes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/gateway_records.h"
#include "serving/serving_spec.h"

namespace atrium::serving {

// What the gateways that reported recently saw of one deployment, summed.
using LoadSignals = DeploymentLoadTotals;

struct AutoscaleRules {
  // In-flight requests per replica slot the deployment aims at: above it,
  // up. Down only once one replica fewer would still be at or below
  // `scale_down_utilization`: between the two nothing moves, so a load near
  // the target does not make replicas come and go.
  double target_utilization = 0.75;
  double scale_down_utilization = 0.5;
  // A request waiting longer than this asks for a replica more.
  int64_t scale_up_wait_ms = 1'000;
  int64_t up_cooldown_ms = 15'000;
  int64_t down_cooldown_ms = 120'000;
  // Whether any deployment may scale to zero (the operator's), and after
  // how long without a request.
  bool allow_zero = false;
  int64_t idle_to_zero_ms = 300'000;
};

// What the controller remembers of one deployment between rounds (in
// memory: after a restart it is conservative, i.e. nothing scales down for
// a cooldown).
struct AutoscaleMemory {
  int64_t last_change_ms = -1;  // -1: none seen
  int64_t last_up_ms = -1;      // the last scale-up; -1: none seen
  int64_t low_since_ms = -1;    // -1: load is not low
  int64_t idle_since_ms = -1;   // -1: a request waits or runs
};

struct ScaleDecision {
  int64_t replicas = 0;
  // The numbers that drove it, for the audit trail and the log.
  std::string why;
};

// The replicas `spec` should have now, or nullopt to keep spec.replicas.
// `slots_per_replica`: the gateway's slots of one replica (>= 1);
// `ready_replicas`: how many answer now (while fewer than spec.replicas
// do, a long wait asks for none more: those starting will take it).
// Updates `memory` (a decision is its last change).
std::optional<ScaleDecision> DecideScale(const ManagedSpec& spec, int64_t slots_per_replica,
                                         int64_t ready_replicas, const LoadSignals& load,
                                         const AutoscaleRules& rules, AutoscaleMemory& memory,
                                         int64_t now_ms);

}  // namespace atrium::serving
