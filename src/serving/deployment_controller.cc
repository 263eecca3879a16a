#include "serving/deployment_controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "crypto/ids.h"
#include "http/client.h"

namespace atrium::serving {
namespace {

Health HttpHealth(const std::string& url, const std::string& path, int64_t timeout_ms) {
  auto client = http::Client::Create(url, static_cast<int>(timeout_ms));
  if (!client.has_value()) return Health::kFailed;
  auto response = (*client)->Send("GET", path);
  return response.has_value() && response->status == 200 ? Health::kOk : Health::kFailed;
}

int64_t HttpRunning(const std::string& url, const std::string& path, const std::string& metric,
                    int64_t timeout_ms) {
  auto client = http::Client::Create(url, static_cast<int>(timeout_ms));
  if (!client.has_value()) return -1;
  auto response = (*client)->Send("GET", path);
  if (!response.has_value() || response->status != 200) return -1;
  return ReadGauge(response->body, metric);
}

RequestOrigin ServingOrigin() {
  RequestOrigin by;
  by.actor = kServingActor;
  by.source = "serving";
  return by;
}

// The audit record of a change the controller made to d's spec by itself,
// with what drove it.
AuditRecord DecisionAudit(const DeploymentRecord& d, const char* action, const std::string& why,
                          int64_t now) {
  AuditRecord audit;
  audit.time = now;
  audit.actor = kServingActor;
  audit.tenant_id = d.tenant_id;
  audit.action = action;
  audit.target = "deployment/" + d.id;
  audit.outcome = "allowed";
  audit.source = "serving";
  audit.detail = why;
  return audit;
}

}  // namespace

DeploymentController::DeploymentController(Store& store, jobs::JobService& jobs, const Clock& clock,
                                           ServingOptions options)
    : store_(store),
      jobs_(jobs),
      clock_(clock),
      options_(std::move(options)),
      timer_("serving", options_.tick_ms, [this] {
        if (Status s = Tick(); !s.has_value()) spdlog::warn("serving: {}", s.error().message);
      }) {
  const int64_t timeout = options_.probe_timeout_ms;
  if (!options_.probe_health) {
    options_.probe_health = [timeout](const std::string& url, const std::string& path) {
      return HttpHealth(url, path, timeout);
    };
  }
  if (!options_.probe_running) {
    options_.probe_running = [timeout](const std::string& url, const std::string& path,
                                       const std::string& metric) {
      return HttpRunning(url, path, metric, timeout);
    };
  }
  next_port_ = options_.port_min;
}

DeploymentController::~DeploymentController() { Stop(); }

Status DeploymentController::Start() {
  Status first = Tick();
  if (!first.has_value()) spdlog::warn("serving: first round: {}", first.error().message);
  timer_.Start();
  return OkStatus();
}

void DeploymentController::Stop() { timer_.Stop(); }

Status DeploymentController::CheckSpec(const ManagedSpec& spec,
                                       const std::string& tenant_id) const {
  ATRIUM_RETURN_IF_ERROR(FindTemplate(options_.templates, spec.template_name));
  DeploymentRecord d;
  d.tenant_id = tenant_id;
  ATRIUM_RETURN_IF_ERROR(OwnerOf(d));
  return OkStatus();
}

Result<std::string> DeploymentController::OwnerOf(const DeploymentRecord& d) const {
  if (!d.tenant_id.empty()) return d.tenant_id;
  auto tenant = options_.platform_tenant.empty()
                    ? Result<Tenant>(Error::NotFound("none is configured"))
                    : store_.GetTenantByName(options_.platform_tenant);
  if (!tenant.has_value()) {
    return Error::FailedPrecondition(
        "shared managed deployments run as the platform's serving tenant ([serving] "
        "platform_tenant '" +
        options_.platform_tenant + "'): " + tenant.error().message);
  }
  return tenant->id;
}

Result<int64_t> DeploymentController::FreePort() {
  const int64_t span = options_.port_max - options_.port_min + 1;
  for (int64_t i = 0; i < span; ++i) {
    int64_t port = options_.port_min + (next_port_ - options_.port_min + i) % span;
    if (std::find(ports_in_use_.begin(), ports_in_use_.end(), port) == ports_in_use_.end()) {
      next_port_ = port + 1;
      ports_in_use_.push_back(port);
      return port;
    }
  }
  return Error::ResourceExhausted("every serving port (" + std::to_string(options_.port_min) + "-" +
                                      std::to_string(options_.port_max) + ") is taken",
                                  5);
}

std::string DeploymentController::ReplicaUrl(const DeploymentReplicaRecord& replica,
                                             const JobRecord& job) {
  auto allocation = store_.GetAllocation(TenantScope::Of(replica.tenant_id), job.allocation_id);
  if (!allocation.has_value() || allocation->placement.size() != 1) return "";
  const std::string& node = allocation->placement.front().node;
  auto it = options_.node_addresses.find(node);
  const std::string& address =
      it == options_.node_addresses.end() ? options_.default_node_address : it->second;
  return "http://" + address + ":" + std::to_string(replica.port);
}

void DeploymentController::CancelJob(const DeploymentReplicaRecord& replica) {
  if (replica.job_id.empty()) return;
  auto cancelled = jobs_.Cancel(ServingOrigin(), replica.tenant_id, replica.job_id);
  if (!cancelled.has_value() && cancelled.error().code != ErrorCode::kFailedPrecondition &&
      cancelled.error().code != ErrorCode::kNotFound) {
    spdlog::warn("serving: stopping replica {} (job {}): {}", replica.id, replica.job_id,
                 cancelled.error().message);
  }
}

Status DeploymentController::SubmitJob(const DeploymentRecord& d, const ManagedSpec& spec,
                                       const ServingTemplate& t, DeploymentReplicaRecord& replica) {
  LaunchValues values;
  values.port = replica.port;
  values.host = options_.bind_host;
  values.model = d.model;
  values.source = spec.source;
  ATRIUM_ASSIGN_OR_RETURN(jobs::JobSpec job,
                          ReplicaJobSpec(t, spec, d.id + "-" + replica.id, values));
  ATRIUM_ASSIGN_OR_RETURN(jobs::JobService::Submitted submitted,
                          jobs_.Submit(ServingOrigin(), replica.tenant_id, "", job, replica.id));
  replica.job_id = submitted.job.id;
  replica.updated_at = clock_.NowMillis();
  return store_.UpdateReplica(replica);
}

Status DeploymentController::StartReplica(const DeploymentRecord& d, const ManagedSpec& spec,
                                          const ServingTemplate& t, int64_t now) {
  DeploymentReplicaRecord r;
  r.id = NewId("rep", clock_);
  r.deployment_id = d.id;
  ATRIUM_ASSIGN_OR_RETURN(r.tenant_id, OwnerOf(d));
  ATRIUM_ASSIGN_OR_RETURN(r.port, FreePort());
  r.state = std::string(ReplicaStateName(ReplicaState::kStarting));
  r.generation = spec.generation;
  r.reason = "started for generation " + std::to_string(spec.generation);
  r.created_at = r.updated_at = now;
  r.spec = d.serving;
  ATRIUM_RETURN_IF_ERROR(store_.CreateReplica(r));
  Status submitted = SubmitJob(d, spec, t, r);
  if (!submitted.has_value()) {
    // Refused for good (a spec its tenant's quota can never hold, an
    // unknown project): the replica ends with the words; the backoff
    // spaces the next try.
    r.state = std::string(ReplicaStateName(ReplicaState::kEnded));
    r.reason = "its job was refused: " + submitted.error().message;
    r.ended_at = r.updated_at = clock_.NowMillis();
    (void)store_.UpdateReplica(r);
    CountFailure(r, spec.generation, now);
    return submitted;
  }
  return OkStatus();
}

Status DeploymentController::StepReplicas(const DeploymentRecord* d,
                                          std::vector<DeploymentReplicaRecord>& replicas,
                                          std::vector<DeploymentReplicaRecord>& to_cancel,
                                          int64_t now) {
  Status first = OkStatus();
  auto keep_first = [&first](Status s) {
    if (first.has_value() && !s.has_value()) first = std::move(s);
  };
  std::optional<ManagedSpec> spec;
  std::optional<ServingTemplate> t;
  if (d != nullptr) {
    if (auto parsed = ParseStoredSpec(d->serving); parsed.has_value()) spec = *parsed;
    if (spec) {
      if (auto found = FindTemplate(options_.templates, spec->template_name); found.has_value()) {
        t = *found;
      }
    }
  }
  ReplicaTiming timing = options_.timing;
  if (t) timing.readiness_timeout_ms = t->readiness_timeout_s * 1000;
  if (spec) timing.drain_timeout_ms = spec->drain_timeout_s * 1000;

  for (DeploymentReplicaRecord& r : replicas) {
    // A row written before its job (a crash between): submit it again,
    // which finds the job the first try made, if any.
    if (r.job_id.empty() && IsIn(r, ReplicaState::kStarting) && d != nullptr && spec && t) {
      keep_first(SubmitJob(*d, *spec, *t, r));
    }
    ReplicaObservation seen;
    JobRecord job;
    if (!r.job_id.empty()) {
      auto found = store_.GetJob(TenantScope::Of(r.tenant_id), r.job_id);
      if (found.has_value()) {
        job = *found;
        seen.job_state = job.state;
        seen.job_reason = job.reason;
        seen.job_started_ms = job.started_ms;
      } else if (found.error().code != ErrorCode::kNotFound) {
        keep_first(std::move(found).error());
        continue;  // not seen this round
      }
    } else if (!IsIn(r, ReplicaState::kStarting)) {
      seen.job_state = "";  // never had a job: ends
    } else {
      continue;  // waiting to be submitted
    }
    if (d == nullptr && !IsIn(r, ReplicaState::kStopping) && !IsJobEnded(seen.job_state)) {
      // Its deployment was deleted: out of every list already; stop it.
      r.state = std::string(ReplicaStateName(ReplicaState::kStopping));
      r.reason = "its deployment was deleted";
      r.updated_at = now;
      keep_first(store_.UpdateReplica(r));
      to_cancel.push_back(r);
      continue;
    }
    if (r.url.empty() && (seen.job_state == "starting" || seen.job_state == "running")) {
      r.url = ReplicaUrl(r, job);
      if (!r.url.empty()) {
        r.updated_at = now;
        keep_first(store_.UpdateReplica(r));
      }
    }
    const bool probing = seen.job_state == "running" && !r.url.empty() && t &&
                         (IsIn(r, ReplicaState::kStarting) || IsIn(r, ReplicaState::kReady));
    if (probing) seen.health = options_.probe_health(r.url, t->health_path);
    if (IsIn(r, ReplicaState::kDraining) && !r.url.empty() && t && !t->metrics_path.empty()) {
      seen.running = options_.probe_running(r.url, t->metrics_path, t->running_metric);
    }
    ReplicaStep step = StepReplica(r, seen, timing, now);
    const int64_t current = spec ? spec->generation : 0;
    if (step.failure) {
      CountFailure(r, current, now);
      spdlog::info("serving: replica {} of {}: {}", r.id, r.deployment_id, step.next.reason);
    }
    if (IsIn(step.next, ReplicaState::kReady) && !IsIn(r, ReplicaState::kReady)) {
      Backoff& b = BackoffOf(r.deployment_id, current);
      b.failures = 0;
      b.next_start_ms = 0;
      if (r.generation == current) b.generation_failures = 0;
    }
    if (step.changed) {
      keep_first(store_.UpdateReplica(step.next));
      r = step.next;
    }
    if (step.cancel_job) to_cancel.push_back(r);
  }
  return first;
}

Status DeploymentController::Autoscale(DeploymentRecord& d, ManagedSpec& spec,
                                       const ServingTemplate& t,
                                       const std::vector<DeploymentReplicaRecord>& live,
                                       int64_t now) {
  ATRIUM_ASSIGN_OR_RETURN(DeploymentLoadTotals load,
                          store_.DeploymentLoadForServing(d.id, now - options_.load_fresh_ms));
  const int64_t ready = std::count_if(live.begin(), live.end(),
                                      [](const auto& r) { return IsIn(r, ReplicaState::kReady); });
  const int64_t slots = EndpointOf(spec, t, "").capacity;
  auto decision = DecideScale(spec, slots, ready, load, options_.autoscale, autoscale_[d.id], now);
  if (!decision) return OkStatus();
  ManagedSpec next = spec;
  next.replicas = decision->replicas;
  const std::string next_text = ManagedSpecJson(next).dump();
  ATRIUM_RETURN_IF_ERROR(store_.ReplaceServing(
      d.id, d.serving, next_text, now, DecisionAudit(d, "serving.autoscaled", decision->why, now)));
  spdlog::info("serving: deployment {}: {}", d.id, decision->why);
  d.serving = next_text;
  spec = next;
  return OkStatus();
}

Status DeploymentController::PlanAndApply(const DeploymentRecord& stored,
                                          std::vector<DeploymentReplicaRecord>& replicas,
                                          std::vector<DeploymentReplicaRecord>& to_cancel,
                                          int64_t now) {
  DeploymentRecord d = stored;
  ATRIUM_ASSIGN_OR_RETURN(ManagedSpec spec, ParseStoredSpec(d.serving));
  ATRIUM_ASSIGN_OR_RETURN(ServingTemplate t, FindTemplate(options_.templates, spec.template_name));
  std::vector<DeploymentReplicaRecord> live;
  for (const auto& r : replicas) {
    if (!IsIn(r, ReplicaState::kEnded)) live.push_back(r);
  }
  const Backoff& b = BackoffOf(d.id, spec.generation);
  if (auto rollback = PlanRollback(spec, live, b.generation_failures)) {
    return RollBack(d, *rollback, replicas, now);  // planned again next round
  }
  if (spec.autoscale) ATRIUM_RETURN_IF_ERROR(Autoscale(d, spec, t, live, now));
  DeploymentPlan plan = PlanDeployment(spec, t, live, now >= b.next_start_ms);
  Status first = OkStatus();
  auto keep_first = [&first](Status s) {
    if (first.has_value() && !s.has_value()) first = std::move(s);
  };
  for (DeploymentReplicaRecord& r : replicas) {
    const bool drain =
        std::find(plan.to_drain.begin(), plan.to_drain.end(), r.id) != plan.to_drain.end();
    const bool stop =
        std::find(plan.to_stop.begin(), plan.to_stop.end(), r.id) != plan.to_stop.end();
    if (!drain && !stop) continue;
    r.state =
        std::string(ReplicaStateName(drain ? ReplicaState::kDraining : ReplicaState::kStopping));
    r.reason = r.generation == spec.generation
                   ? "scaled down"
                   : "replaced by generation " + std::to_string(spec.generation);
    if (drain) r.drain_started_at = now;
    r.updated_at = now;
    keep_first(store_.UpdateReplica(r));
    if (stop) to_cancel.push_back(r);
  }
  // The endpoints first: a replica leaves the gateway's list before its
  // job is asked to stop.
  if (plan.endpoints != d.endpoints) {
    keep_first(store_.SetManagedEndpoints(d.id, plan.endpoints, now));
    if (options_.endpoints_changed) options_.endpoints_changed();
  }
  for (int64_t i = 0; i < plan.to_start; ++i) keep_first(StartReplica(d, spec, t, now));
  return first;
}

DeploymentController::Backoff& DeploymentController::BackoffOf(const std::string& deployment_id,
                                                               int64_t generation) {
  Backoff& b = backoff_[deployment_id];
  if (b.generation != generation) {
    b.generation = generation;
    b.generation_failures = 0;
  }
  return b;
}

void DeploymentController::CountFailure(const DeploymentReplicaRecord& replica,
                                        int64_t current_generation, int64_t now) {
  Backoff& b = BackoffOf(replica.deployment_id, current_generation);
  b.failures += 1;
  b.next_start_ms = now + BackoffMs(b.failures);
  if (replica.generation == current_generation) b.generation_failures += 1;
}

Status DeploymentController::RollBack(const DeploymentRecord& d, const Rollback& rollback,
                                      std::vector<DeploymentReplicaRecord>& replicas, int64_t now) {
  const std::string next = ManagedSpecJson(rollback.spec).dump();
  const std::string why = "generation " + std::to_string(rollback.spec.rolled_back_from) +
                          " never became ready (" + std::to_string(kRollbackAfterFailures) +
                          " replicas failed in a row); back to what generation " +
                          std::to_string(rollback.revived_generation) + " runs, as generation " +
                          std::to_string(rollback.spec.generation);
  ATRIUM_RETURN_IF_ERROR(store_.ReplaceServing(d.id, d.serving, next, now,
                                               DecisionAudit(d, "serving.rolled_back", why, now)));
  spdlog::warn("serving: deployment {}: rolled back: {}", d.id, why);
  BackoffOf(d.id, rollback.spec.generation);
  Status first = OkStatus();
  for (DeploymentReplicaRecord& r : replicas) {
    if (r.generation != rollback.revived_generation || IsIn(r, ReplicaState::kEnded)) continue;
    r.generation = rollback.spec.generation;
    r.spec = next;
    r.reason = "serves on: generation " + std::to_string(rollback.spec.rolled_back_from) +
               " was rolled back";
    r.updated_at = now;
    if (Status s = store_.UpdateReplica(r); !s.has_value() && first.has_value()) first = s;
  }
  if (options_.endpoints_changed) options_.endpoints_changed();
  return first;
}

Status DeploymentController::Tick() {
  std::lock_guard<std::mutex> lock(tick_mu_);
  const int64_t now = clock_.NowMillis();
  ATRIUM_ASSIGN_OR_RETURN(std::vector<DeploymentRecord> deployments,
                          store_.ListManagedDeploymentsForServing());
  ATRIUM_ASSIGN_OR_RETURN(std::vector<DeploymentReplicaRecord> live,
                          store_.ListLiveReplicasForServing());
  ports_in_use_.clear();
  std::map<std::string, std::vector<DeploymentReplicaRecord>> by_deployment;
  for (auto& r : live) {
    ports_in_use_.push_back(r.port);
    by_deployment[r.deployment_id].push_back(std::move(r));
  }
  Status first = OkStatus();
  auto keep_first = [&first](Status s) {
    if (first.has_value() && !s.has_value()) first = std::move(s);
  };
  std::vector<DeploymentReplicaRecord> to_cancel;
  std::map<std::string, const DeploymentRecord*> by_id;
  for (const DeploymentRecord& d : deployments) by_id[d.id] = &d;
  // What is kept of deleted deployments goes with them.
  for (auto it = autoscale_.begin(); it != autoscale_.end();) {
    it = by_id.count(it->first) == 0 ? autoscale_.erase(it) : std::next(it);
  }
  for (auto it = backoff_.begin(); it != backoff_.end();) {
    it = by_id.count(it->first) == 0 ? backoff_.erase(it) : std::next(it);
  }
  // Replicas of deleted deployments: stopped.
  for (auto& [id, replicas] : by_deployment) {
    if (by_id.count(id) == 0) keep_first(StepReplicas(nullptr, replicas, to_cancel, now));
  }
  for (const DeploymentRecord& d : deployments) {
    auto& replicas = by_deployment[d.id];
    keep_first(StepReplicas(&d, replicas, to_cancel, now));
    Status planned = PlanAndApply(d, replicas, to_cancel, now);
    if (!planned.has_value()) {
      spdlog::warn("serving: deployment {}: {}", d.id, planned.error().message);
      keep_first(std::move(planned));
    }
  }
  for (const auto& r : to_cancel) CancelJob(r);
  if (now - last_cleanup_ms_ >= 3'600'000) {
    last_cleanup_ms_ = now;
    keep_first(store_.DeleteEndedReplicas(now - options_.ended_retention_ms));
  }
  return first;
}

}  // namespace atrium::serving
