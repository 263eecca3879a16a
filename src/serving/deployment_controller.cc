#include "serving/deployment_controller.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/remove_tree.h"
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

Result<std::set<std::string>> HttpListModels(const std::string& url, int64_t timeout_ms) {
  ATRIUM_ASSIGN_OR_RETURN(auto client, http::Client::Create(url, static_cast<int>(timeout_ms)));
  ATRIUM_ASSIGN_OR_RETURN(http::ClientResponse response, client->Send("GET", "/v1/models"));
  if (response.status != 200) {
    return Error::Unavailable("GET /v1/models answered " + std::to_string(response.status));
  }
  return ListedModels(response.body);
}

Status HttpPostJson(const std::string& url, const std::string& path, const std::string& body,
                    int64_t timeout_ms) {
  ATRIUM_ASSIGN_OR_RETURN(auto client, http::Client::Create(url, static_cast<int>(timeout_ms)));
  ATRIUM_ASSIGN_OR_RETURN(http::ClientResponse response,
                          client->Send("POST", path, body, {{"Content-Type", "application/json"}}));
  if (response.status / 100 != 2) {
    return Error::FailedPrecondition("the engine answered " + std::to_string(response.status) +
                                     ": " + response.body.substr(0, 300));
  }
  return OkStatus();
}

bool IsLoopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
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

bool CanBindHere(const std::string& host, int64_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) return true;  // not ours to say
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  const int on = 1;
  (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

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
  if (!options_.list_models) {
    options_.list_models = [timeout](const std::string& url) {
      return HttpListModels(url, timeout);
    };
  }
  if (!options_.post_json) {
    // Loading an adapter reads its weights: more time than a probe.
    options_.post_json = [timeout](const std::string& url, const std::string& path,
                                   const std::string& body) {
      return HttpPostJson(url, path, body, std::max<int64_t>(timeout, 30'000));
    };
  }
  if (!options_.port_free) {
    bool this_host = IsLoopback(options_.default_node_address);
    for (const auto& [node, address] : options_.node_addresses) {
      this_host = this_host && IsLoopback(address);
    }
    if (this_host) {
      options_.port_free = [host = options_.bind_host](int64_t port) {
        return CanBindHere(host, port);
      };
    }
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
  ATRIUM_ASSIGN_OR_RETURN(ServingTemplate t, FindTemplate(options_.templates, spec.template_name));
  if (spec.max_adapters > 0 && !AllowsAdapters(spec, t)) {
    return Error::InvalidArgument(
        t.loads_adapters()
            ? "serving.max_adapters: this platform keeps no adapters ([serving] adapter_dir)"
            : "serving.max_adapters: template " + t.name + " cannot load adapters while it runs");
  }
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
    if (std::find(ports_in_use_.begin(), ports_in_use_.end(), port) == ports_in_use_.end() &&
        (!options_.port_free || options_.port_free(port))) {
      next_port_ = port + 1;
      ports_in_use_.push_back(port);
      return port;
    }
  }
  return Error::ResourceExhausted("every serving port (" + std::to_string(options_.port_min) + "-" +
                                      std::to_string(options_.port_max) +
                                      ") is taken by a replica or another program",
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
  values.adapter_dir = AdapterFolderOf(d.id);
  values.adapter_dir_inside = options_.adapter_dir_inside;
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
                                          int64_t now, AdapterRound* adapters) {
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
    std::optional<std::set<std::string>> listed;
    if (adapters != nullptr && seen.health == Health::kOk) {
      listed = SyncAdapters(r, *t, *adapters);
      // Ready only with every adapter the gateway may route loaded.
      const bool complete =
          listed && PlanAdapterSync(adapters->adapters, adapters->on_disk, *listed).load.empty();
      if (IsIn(r, ReplicaState::kStarting) && !complete) seen.health = Health::kNotChecked;
    }
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
    if (listed && IsIn(r, ReplicaState::kReady)) {
      adapters->ready_replicas += 1;
      for (const std::string& id : *listed) adapters->ready_with[id] += 1;
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

bool DeploymentController::AllowsAdapters(const ManagedSpec& spec, const ServingTemplate& t) const {
  return spec.max_adapters > 0 && t.loads_adapters() && !options_.adapter_root.empty();
}

std::string DeploymentController::AdapterFolderOf(const std::string& deployment_id) const {
  return options_.adapter_root + "/" + deployment_id;
}

Result<DeploymentController::AdapterRound> DeploymentController::PrepareAdapters(
    const DeploymentRecord& d) {
  AdapterRound round;
  const std::string folder = AdapterFolderOf(d.id);
  round.engine_dir = options_.adapter_dir_inside.empty() ? folder : options_.adapter_dir_inside;
  ATRIUM_ASSIGN_OR_RETURN(round.adapters, store_.ListAdaptersForServing(d.id));
  // The root lists nothing to anyone else; each folder is the engines' to
  // read. Without its folder no adapter is unpacked: none is routed, and
  // no replica waits for one.
  std::error_code made;
  std::filesystem::create_directories(options_.adapter_root, made);
  if (made || ::chmod(options_.adapter_root.c_str(), 0711) != 0 ||
      (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST)) {
    const std::string why = "cannot make " + folder + ": " +
                            (made ? made.message() : std::string(std::strerror(errno)));
    spdlog::warn("serving: deployment {}: {}", d.id, why);
    for (const AdapterRecord& a : round.adapters) round.failures.emplace(a.id, "");
    return round;
  }
  std::set<std::string> registered;
  for (const AdapterRecord& a : round.adapters) {
    registered.insert(a.id);
    if (a.status == "failed") continue;
    const std::string dest = folder + "/" + a.id;
    struct stat st {};
    if (::lstat(dest.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      round.on_disk.insert(a.id);
      continue;
    }
    auto archive = ArchiveOfArtifact(a.artifact);
    Status unpacked = !archive.has_value() ? Status(std::move(archive).error())
                      : !options_.unpack_adapter
                          ? Status(Error::Unavailable("adapters cannot be unpacked here"))
                          : options_.unpack_adapter(a.tenant_id, *archive, a.sha256, dest);
    if (unpacked.has_value()) {
      round.on_disk.insert(a.id);
    } else {
      round.failures[a.id] = "its artifact could not be unpacked: " + unpacked.error().message;
      spdlog::warn("serving: adapter {} of {}: {}", a.id, d.id, round.failures[a.id]);
    }
  }
  // What is not a registered adapter's goes: deleted ones, a crash's
  // half-unpacked ".part-" folders.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (registered.count(name) == 0) (void)RemoveTreeNoFollow(entry.path().string());
  }
  return round;
}

std::optional<std::set<std::string>> DeploymentController::SyncAdapters(
    const DeploymentReplicaRecord& replica, const ServingTemplate& t, AdapterRound& round) {
  auto listed = options_.list_models(replica.url);
  if (!listed.has_value()) return std::nullopt;
  std::vector<AdapterRecord> usable;
  for (const AdapterRecord& a : round.adapters) {
    if (round.failures.count(a.id) == 0) usable.push_back(a);
  }
  AdapterSync sync = PlanAdapterSync(usable, round.on_disk, *listed);
  for (const std::string& name : sync.unload) {
    Status s =
        options_.post_json(replica.url, t.adapter_unload_path, Json{{"lora_name", name}}.dump());
    if (s.has_value()) {
      listed->erase(name);
    } else {
      spdlog::warn("serving: replica {}: unloading adapter {}: {}", replica.id, name,
                   s.error().message);
    }
  }
  for (const std::string& id : sync.load) {
    Status s = options_.post_json(
        replica.url, t.adapter_load_path,
        Json{{"lora_name", id}, {"lora_path", round.engine_dir + "/" + id}}.dump());
    if (s.has_value()) {
      listed->insert(id);
    } else {
      // The engine refuses it (bad weights, say): it fails for good, so that
      // no replica waits on it.
      round.failures[id] = "the engine would not load it: " + s.error().message;
      spdlog::warn("serving: replica {}: adapter {}: {}", replica.id, id, round.failures[id]);
    }
  }
  return std::move(*listed);
}

Status DeploymentController::SettleAdapters(const AdapterRound& round, int64_t now) {
  Status first = OkStatus();
  for (const AdapterRecord& a : round.adapters) {
    if (a.status == "failed") continue;
    auto failure = round.failures.find(a.id);
    auto with = round.ready_with.find(a.id);
    AdapterStatus next = AdapterStatusAfter(
        round.on_disk.count(a.id) != 0, failure == round.failures.end() ? "" : failure->second,
        round.ready_replicas, with == round.ready_with.end() ? 0 : with->second);
    if (next.status == a.status && next.detail == a.detail) continue;
    Status s = store_.SetAdapterStatusForServing(a.id, next.status, next.detail, now);
    if (!s.has_value() && s.error().code != ErrorCode::kNotFound && first.has_value()) first = s;
  }
  return first;
}

void DeploymentController::RemoveUnusedAdapterFolders(const std::set<std::string>& in_use) {
  if (options_.adapter_root.empty()) return;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.adapter_root, ec)) {
    if (in_use.count(entry.path().filename().string()) == 0) {
      (void)RemoveTreeNoFollow(entry.path().string());
    }
  }
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
    if (by_id.count(id) == 0) keep_first(StepReplicas(nullptr, replicas, to_cancel, now, nullptr));
  }
  std::set<std::string> adapter_folders;  // of deployments that allow adapters or still run
  for (const auto& [id, replicas] : by_deployment) adapter_folders.insert(id);
  for (const DeploymentRecord& d : deployments) {
    auto& replicas = by_deployment[d.id];
    std::optional<AdapterRound> adapters;
    auto spec = ParseStoredSpec(d.serving);
    auto t = spec.has_value() ? FindTemplate(options_.templates, spec->template_name)
                              : Result<ServingTemplate>(spec.error());
    if (t.has_value() && AllowsAdapters(*spec, *t)) {
      adapter_folders.insert(d.id);
      auto prepared = PrepareAdapters(d);
      if (prepared.has_value()) {
        adapters = std::move(*prepared);
      } else {
        keep_first(std::move(prepared).error());
      }
    }
    keep_first(StepReplicas(&d, replicas, to_cancel, now, adapters ? &*adapters : nullptr));
    if (adapters) keep_first(SettleAdapters(*adapters, now));
    Status planned = PlanAndApply(d, replicas, to_cancel, now);
    if (!planned.has_value()) {
      spdlog::warn("serving: deployment {}: {}", d.id, planned.error().message);
      keep_first(std::move(planned));
    }
  }
  for (const auto& r : to_cancel) CancelJob(r);
  RemoveUnusedAdapterFolders(adapter_folders);
  if (now - last_cleanup_ms_ >= 3'600'000) {
    last_cleanup_ms_ = now;
    keep_first(store_.DeleteEndedReplicas(now - options_.ended_retention_ms));
  }
  return first;
}

}  // namespace atrium::serving
