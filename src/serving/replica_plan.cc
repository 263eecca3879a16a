#include "serving/replica_plan.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "jobs/job_state.h"

namespace atrium::serving {
namespace {

constexpr std::array<std::string_view, 5> kStateNames = {"starting", "ready", "draining",
                                                         "stopping", "ended"};

}  // namespace

std::string_view ReplicaStateName(ReplicaState state) {
  return kStateNames[static_cast<size_t>(state)];
}

Result<ReplicaState> ParseReplicaState(std::string_view name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (kStateNames[i] == name) return static_cast<ReplicaState>(i);
  }
  return Error::InvalidArgument("unknown replica state '" + std::string(name.substr(0, 32)) + "'");
}

bool IsIn(const DeploymentReplicaRecord& replica, ReplicaState state) {
  return replica.state == ReplicaStateName(state);
}

bool IsJobEnded(std::string_view job_state) {
  if (job_state.empty()) return true;  // the job is gone
  auto state = jobs::ParseState(job_state);
  return state.has_value() && !jobs::IsLive(*state);
}

ReplicaStep StepReplica(const DeploymentReplicaRecord& replica, const ReplicaObservation& seen,
                        const ReplicaTiming& timing, int64_t now) {
  ReplicaStep step;
  step.next = replica;
  DeploymentReplicaRecord& n = step.next;
  auto move_to = [&](ReplicaState s, std::string reason) {
    n.state = std::string(ReplicaStateName(s));
    n.reason = std::move(reason);
    n.updated_at = now;
    step.changed = true;
  };
  if (IsIn(replica, ReplicaState::kEnded)) return step;

  if (IsJobEnded(seen.job_state)) {
    const bool asked =
        IsIn(replica, ReplicaState::kDraining) || IsIn(replica, ReplicaState::kStopping);
    std::string why = seen.job_state.empty()
                          ? "its job is gone"
                          : "its job ended " + seen.job_state +
                                (seen.job_reason.empty() ? "" : ": ") + seen.job_reason;
    const bool reclaimed = seen.job_state == "preempted";
    move_to(ReplicaState::kEnded, asked       ? replica.reason
                                  : reclaimed ? "its GPUs were reclaimed: " + why
                                              : "the model server ended: " + why);
    n.ended_at = now;
    // A reclaim is the scheduler's, not the version's: the deployment
    // shrinks until a new replica is placed, with no backoff.
    step.failure = !asked && !reclaimed;
    return step;
  }
  const bool running = seen.job_state == "running";

  if (IsIn(replica, ReplicaState::kStarting)) {
    if (running && seen.health == Health::kOk) {
      move_to(ReplicaState::kReady, "answered its health check");
      n.ready_at = now;
      n.health_failures = 0;
    } else if (running && seen.job_started_ms >= 0 &&
               now - seen.job_started_ms >= timing.readiness_timeout_ms) {
      move_to(ReplicaState::kStopping, "not ready within " +
                                           std::to_string(timing.readiness_timeout_ms / 1000) +
                                           " s of starting");
      step.cancel_job = true;
      step.failure = true;
    }
    return step;
  }
  if (IsIn(replica, ReplicaState::kReady)) {
    if (seen.health == Health::kOk) {
      if (n.health_failures != 0) {
        n.health_failures = 0;
        n.updated_at = now;
        step.changed = true;
      }
    } else if (seen.health == Health::kFailed || !running) {
      n.health_failures += 1;
      n.updated_at = now;
      step.changed = true;
      if (n.health_failures >= timing.failure_threshold) {
        move_to(ReplicaState::kStopping,
                std::to_string(n.health_failures) + " health checks in a row failed");
        step.cancel_job = true;
        step.failure = true;
      }
    }
    return step;
  }
  if (IsIn(replica, ReplicaState::kDraining)) {
    const int64_t since = now - replica.drain_started_at;
    const bool idle = seen.running == 0 && since >= timing.drain_settle_ms;
    if (idle || since >= timing.drain_timeout_ms) {
      // Why it drains stays first: the replica's end names it.
      move_to(ReplicaState::kStopping,
              replica.reason + (idle ? " (drained: no request in flight)"
                                     : " (drain timeout: stopped with requests in flight)"));
      step.cancel_job = true;
    }
    return step;
  }
  // Stopping: asked again each round until the job ends (a cancel that
  // failed for a moment is retried).
  step.cancel_job = true;
  return step;
}

DeploymentEndpoint EndpointOf(const ManagedSpec& spec, const ServingTemplate& t,
                              const std::string& url) {
  DeploymentEndpoint e;
  e.url = url;
  // Half the engine's batch as fair slots, an eighth of it as burst slots
  // for a light tenant and at most two prefills at once: the settings under
  // which a light tenant's p99 first token stays within 1.5x of its alone
  // figure while another floods (BENCHMARKS.md section 6.3).
  if (spec.capacity > 0) {
    e.capacity = spec.capacity;
    e.burst = std::max<int64_t>(1, spec.capacity / 4);
  } else {
    e.capacity = std::max<int64_t>(1, t.max_batch / 2);
    e.burst = std::max<int64_t>(1, t.max_batch / 8);
  }
  e.max_prefill = 2;
  return e;
}

DeploymentPlan PlanDeployment(const ManagedSpec& spec, const ServingTemplate& t,
                              const std::vector<DeploymentReplicaRecord>& replicas,
                              bool may_start) {
  DeploymentPlan plan;
  std::vector<const DeploymentReplicaRecord*> ready_current, ready_old, starting;
  for (const DeploymentReplicaRecord& r : replicas) {
    if (IsIn(r, ReplicaState::kReady)) {
      (r.generation == spec.generation ? ready_current : ready_old).push_back(&r);
    } else if (IsIn(r, ReplicaState::kStarting)) {
      if (r.generation == spec.generation) {
        starting.push_back(&r);
      } else {
        plan.to_stop.push_back(r.id);  // an older version that never became ready
      }
    }
  }
  const auto older_first = [](const DeploymentReplicaRecord* a, const DeploymentReplicaRecord* b) {
    return a->created_at != b->created_at ? a->created_at < b->created_at : a->id < b->id;
  };
  std::sort(ready_current.begin(), ready_current.end(), older_first);
  std::sort(ready_old.begin(), ready_old.end(), older_first);
  std::sort(starting.begin(), starting.end(), older_first);

  const auto want = static_cast<size_t>(spec.replicas);
  // The current generation: too many → drain the newest (the not yet
  // ready first); too few → start more.
  const size_t current = ready_current.size() + starting.size();
  if (current > want) {
    size_t extra = current - want;
    while (extra > 0 && !starting.empty()) {
      plan.to_stop.push_back(starting.back()->id);
      starting.pop_back();
      --extra;
    }
    while (extra > 0 && !ready_current.empty()) {
      plan.to_drain.push_back(ready_current.back()->id);
      ready_current.pop_back();
      --extra;
    }
  } else if (current < want && may_start) {
    plan.to_start = static_cast<int64_t>(want - current);
  }
  // A rolling update: an older replica is drained only as the new ones are
  // ready, so the deployment never has fewer ready replicas than it wants
  // while the old version was healthy.
  const size_t ready_total = ready_current.size() + ready_old.size();
  size_t surplus = ready_total > want ? ready_total - want : 0;
  if (ready_current.size() >= want) surplus = ready_old.size();
  for (size_t i = 0; i < surplus && i < ready_old.size(); ++i) {
    plan.to_drain.push_back(ready_old[i]->id);
  }
  std::vector<const DeploymentReplicaRecord*> routed;
  for (const auto* r : ready_old) {
    if (std::find(plan.to_drain.begin(), plan.to_drain.end(), r->id) == plan.to_drain.end()) {
      routed.push_back(r);
    }
  }
  routed.insert(routed.end(), ready_current.begin(), ready_current.end());
  std::sort(routed.begin(), routed.end(), older_first);
  for (const auto* r : routed) plan.endpoints.push_back(EndpointOf(spec, t, r->url));
  return plan;
}

std::optional<Rollback> PlanRollback(const ManagedSpec& current,
                                     const std::vector<DeploymentReplicaRecord>& replicas,
                                     int64_t current_failures) {
  if (current_failures < kRollbackAfterFailures) return std::nullopt;
  const DeploymentReplicaRecord* newest_old = nullptr;
  std::optional<ManagedSpec> old_spec;
  for (const DeploymentReplicaRecord& r : replicas) {
    if (!IsIn(r, ReplicaState::kReady)) continue;
    if (r.generation == current.generation) return std::nullopt;  // the new version serves
    if (newest_old != nullptr && r.generation <= newest_old->generation) continue;
    auto parsed = ParseStoredSpec(r.spec);
    if (!parsed.has_value()) continue;
    newest_old = &r;
    old_spec = *parsed;
  }
  if (newest_old == nullptr) return std::nullopt;
  Rollback rb;
  rb.revived_generation = newest_old->generation;
  rb.spec = current;
  rb.spec.template_name = old_spec->template_name;
  rb.spec.source = old_spec->source;
  rb.spec.extra_args = old_spec->extra_args;
  rb.spec.resources = old_spec->resources;
  rb.spec.generation = current.generation + 1;
  rb.spec.rolled_back_from = current.generation;
  return rb;
}

int64_t BackoffMs(int64_t failures) {
  if (failures <= 0) return 0;
  const int64_t shift = std::min<int64_t>(failures - 1, 6);
  return std::min<int64_t>(int64_t{1000} << shift, 60'000);
}

int64_t ReadGauge(std::string_view text, std::string_view metric) {
  int64_t total = 0;
  bool found = false;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line.front() == '#' || !line.starts_with(metric)) continue;
    std::string_view rest = line.substr(metric.size());
    if (!rest.empty() && rest.front() == '{') {
      const size_t close = rest.find('}');
      if (close == std::string_view::npos) return -1;
      rest = rest.substr(close + 1);
    } else if (rest.empty() || rest.front() != ' ') {
      continue;  // another metric whose name starts with this one
    }
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const size_t space = rest.find(' ');
    std::string_view number = rest.substr(0, space);
    // Gauges are written as floats ("3.0"); requests are whole.
    const size_t dot = number.find('.');
    std::string_view whole = number.substr(0, dot);
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(whole.data(), whole.data() + whole.size(), value);
    if (ec != std::errc() || ptr != whole.data() + whole.size() || value < 0 ||
        value > (int64_t{1} << 40)) {
      return -1;
    }
    total += value;
    found = true;
  }
  return found ? total : -1;
}

}  // namespace atrium::serving
