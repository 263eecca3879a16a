// The serving controller's decisions, pure: how a replica moves given what
// was observed of its job and its server, and what a deployment needs
// (replicas to start, to drain, the endpoints the gateway routes to).
//
// A replica's life:
//   starting --(job running, health check passes)--> ready
//   starting --(not ready within the template's readiness timeout)--> stopping
//   ready --(failure_threshold checks in a row fail)--> stopping
//   ready --(scaled down or replaced)--> draining
//   draining --(the engine runs nothing, or the drain timeout)--> stopping
//   any --(its job ended)--> ended
// Only `ready` replicas are endpoints, so a replica is routed to only once
// it answers, and leaves the list before it is stopped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/gateway_records.h"
#include "serving/serving_spec.h"

namespace atrium::serving {

enum class ReplicaState { kStarting, kReady, kDraining, kStopping, kEnded };
std::string_view ReplicaStateName(ReplicaState state);
Result<ReplicaState> ParseReplicaState(std::string_view name);

// Whether the replica's row is in `state`.
bool IsIn(const DeploymentReplicaRecord& replica, ReplicaState state);

enum class Health { kNotChecked, kOk, kFailed };

// What the controller saw of one replica this round.
struct ReplicaObservation {
  // The job's state (jobs::JobState's names); "" when the job is gone.
  std::string job_state;
  std::string job_reason;
  int64_t job_started_ms = -1;  // the current attempt's start; -1 not yet
  Health health = Health::kNotChecked;
  // Requests the engine says it runs (its metrics); -1 unknown.
  int64_t running = -1;
};

struct ReplicaTiming {
  int64_t readiness_timeout_ms = 600'000;
  int64_t drain_timeout_ms = 30'000;
  // The least a draining replica waits after leaving the endpoint list,
  // however idle its engine says it is: every gateway must have stopped
  // picking it (its policy poll).
  int64_t drain_settle_ms = 2'000;
  int failure_threshold = 2;  // failed checks in a row that end a ready replica
};

struct ReplicaStep {
  DeploymentReplicaRecord next;
  bool changed = false;     // next differs from the row: store it
  bool cancel_job = false;  // stop its model server now
  // It ended or was stopped without the controller asking (a crash, a
  // failed check, never ready; not a preemption): counts towards the
  // restart backoff and a roll back.
  bool failure = false;
};

// Whether a job state is one of the ended ones.
bool IsJobEnded(std::string_view job_state);

// One replica's next step at `now`.
ReplicaStep StepReplica(const DeploymentReplicaRecord& replica, const ReplicaObservation& seen,
                        const ReplicaTiming& timing, int64_t now);

// What the deployment needs now, given its replicas' rows (after this
// round's steps) and whether a new replica may start (the backoff).
struct DeploymentPlan {
  int64_t to_start = 0;                       // new replicas of the spec's generation
  std::vector<std::string> to_drain;          // ready replicas to drain (ids)
  std::vector<std::string> to_stop;           // starting replicas to stop at once (ids)
  std::vector<DeploymentEndpoint> endpoints;  // the ready replicas, oldest first
};
DeploymentPlan PlanDeployment(const ManagedSpec& spec, const ServingTemplate& t,
                              const std::vector<DeploymentReplicaRecord>& replicas, bool may_start);

// A version that never becomes ready is given up after this many of its
// replicas failed in a row (never ready, or crashed before), if an older
// version still serves.
inline constexpr int64_t kRollbackAfterFailures = 3;

struct Rollback {
  // What the deployment runs from now on: what the older ready replicas
  // run, at the current spec's scale, as the next generation, marked
  // rolled_back_from the generation given up.
  ManagedSpec spec;
  // The older generation whose replicas carry on, as spec.generation.
  int64_t revived_generation = 0;
};
// nullopt unless `current_failures` (failed replicas of the current
// generation in a row) reached kRollbackAfterFailures, no replica of it is
// ready, and a ready replica of an older generation has a readable spec
// (the newest such generation is the one revived).
std::optional<Rollback> PlanRollback(const ManagedSpec& current,
                                     const std::vector<DeploymentReplicaRecord>& replicas,
                                     int64_t current_failures);

// The gateway's slots for one replica: the spec's capacity, else the
// template's max batch; burst and prefill pacing follow from it so a light
// tenant's first token is not stuck behind a flood (docs/gateway.md).
DeploymentEndpoint EndpointOf(const ManagedSpec& spec, const ServingTemplate& t,
                              const std::string& url);

// The restart backoff after `failures` failures in a row: 1 s, 2 s, 4 s ...
// at most 60 s.
int64_t BackoffMs(int64_t failures);

// The value of `metric` (a gauge, summed over its label sets) in
// Prometheus text; -1 when absent or malformed.
int64_t ReadGauge(std::string_view text, std::string_view metric);

}  // namespace atrium::serving
