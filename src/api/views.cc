#include "api/views.h"

#include <set>

#include "audit/chain.h"
#include "common/clock.h"
#include "scheduling/codec.h"

namespace atrium::api {

Json TenantView(const Tenant& t) {
  return {{"id", t.id},
          {"name", t.name},
          {"display_name", t.display_name},
          {"tier", t.tier},
          {"regions", t.regions},
          {"weight", t.weight},
          {"labels", t.labels},
          {"state", t.state},
          {"created_at", FormatTimestamp(t.created_at)},
          {"updated_at", FormatTimestamp(t.updated_at)}};
}

Json UserView(const User& u) {
  return {{"id", u.id},
          {"tenant_id", u.tenant_id.empty() ? Json(nullptr) : Json(u.tenant_id)},
          {"username", u.username},
          {"display_name", u.display_name},
          {"email", u.email},
          {"role", u.role},
          {"kind", u.kind},
          {"state", u.state},
          {"created_at", FormatTimestamp(u.created_at)},
          {"updated_at", FormatTimestamp(u.updated_at)}};
}

Json ApiKeyView(const ApiKey& k, int64_t now_ms) {
  std::string state = "active";
  if (k.revoked_at != 0) {
    state = "revoked";
  } else if (k.expires_at != 0 && now_ms >= k.expires_at) {
    state = "expired";
  }
  return {{"id", k.id},
          {"tenant_id", k.tenant_id.empty() ? Json(nullptr) : Json(k.tenant_id)},
          {"owner_user_id", k.owner_user_id},
          {"name", k.name},
          {"role", k.role},
          {"scopes", k.scopes},
          {"prefix", "atr_" + k.id},
          {"state", state},
          {"created_at", FormatTimestamp(k.created_at)},
          {"expires_at", k.expires_at ? Json(FormatTimestamp(k.expires_at)) : Json(nullptr)},
          {"revoked_at", k.revoked_at ? Json(FormatTimestamp(k.revoked_at)) : Json(nullptr)}};
}

Json AuditView(const AuditRecord& a) {
  Json j = audit::ToJson(a);
  j["detail"] = a.detail.empty() ? Json(nullptr) : Json(a.detail);
  j["time_text"] = FormatTimestamp(a.time);
  return j;
}

namespace {
Json OrNull(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }
Json TimeOrNull(int64_t ms) { return ms < 0 ? Json(nullptr) : Json(FormatTimestamp(ms)); }
}  // namespace

Json AllocationView(const AllocationRecord& a) {
  Json placement = Json::array();
  for (const auto& p : a.placement) placement.push_back({{"node", p.node}, {"gpus", p.gpus}});
  const std::string kind = scheduling::ApiKindOf(a);
  const bool gpus = a.kind == "gpu";
  return {{"id", a.id},
          {"tenant_id", a.tenant_id},
          {"project", OrNull(a.project)},
          {"kind", kind},
          {"priority", a.priority},
          {"model", a.model},
          {"gpus", gpus ? Json(a.gpus) : Json(nullptr)},
          {"nodes", gpus ? Json(a.nodes) : Json(nullptr)},
          {"mig_profile", OrNull(a.mig_profile)},
          {"milli", a.kind == "share" ? Json(a.milli) : Json(nullptr)},
          {"gpu_memory_mib", a.kind == "share" ? Json(a.gpu_memory_mib) : Json(nullptr)},
          {"cpu_milli", a.cpu_milli},
          {"memory_mib", a.memory_mib},
          {"pool", OrNull(a.pool)},
          {"region", OrNull(a.region)},
          {"state", a.state},
          {"placement", placement},
          {"mig_start", a.mig_start < 0 ? Json(nullptr) : Json(a.mig_start)},
          {"charge_milli", a.charge_milli},
          {"submitted_at", FormatTimestamp(a.submitted_ms)},
          {"placed_at", TimeOrNull(a.placed_ms)},
          {"preempt_at", TimeOrNull(a.preempt_at_ms)},
          {"preempted_for", OrNull(a.preempted_for)},
          {"move_requested",
           a.move_requested.empty()
               ? Json(nullptr)
               : Json{{"reason", a.move_requested}, {"at", FormatTimestamp(a.move_requested_ms)}}},
          {"node_requirements", a.min_driver_version.empty() && a.min_cuda_version.empty() &&
                                        a.required_gpu_models.empty()
                                    ? Json(nullptr)
                                    : Json{{"min_driver_version", OrNull(a.min_driver_version)},
                                           {"min_cuda_version", OrNull(a.min_cuda_version)},
                                           {"gpu_models", a.required_gpu_models}}},
          {"ended_at", TimeOrNull(a.ended_ms)},
          {"reason", a.reason},
          {"created_by", OrNull(a.created_by)}};
}

Json JobView(const JobRecord& j, bool with_env_values) {
  Json spec = Json::parse(j.spec, nullptr, false);
  if (!spec.is_object()) spec = Json::object();
  if (!with_env_values && spec.contains("env") && spec["env"].is_object()) {
    Json names = Json::array();
    for (auto it = spec["env"].begin(); it != spec["env"].end(); ++it) names.push_back(it.key());
    spec.erase("env");
    spec["env_names"] = names;
  }
  return {{"id", j.id},
          {"tenant_id", j.tenant_id},
          {"project", OrNull(j.project)},
          {"name", j.name},
          {"state", j.state},
          {"attempt", j.attempt},
          {"restarts", j.restarts},
          {"allocation_id", j.allocation_id},
          {"workload_id", j.workload_id()},
          {"exit_code", j.exit_code < 0 ? Json(nullptr) : Json(j.exit_code)},
          {"signal", j.signal == 0 ? Json(nullptr) : Json(j.signal)},
          {"reason", j.reason},
          {"stopping", j.stop_cause.empty() ? Json(nullptr)
                                            : Json{{"cause", j.stop_cause},
                                                   {"kill_at", TimeOrNull(j.stop_deadline_ms)}}},
          {"created_at", FormatTimestamp(j.created_at)},
          {"started_at", TimeOrNull(j.started_ms)},
          {"ended_at", TimeOrNull(j.ended_ms)},
          {"created_by", OrNull(j.created_by)},
          {"spec", spec}};
}

Json JobEventView(const JobEventRecord& e) {
  return {{"seq", e.seq},         {"time", FormatTimestamp(e.time)},
          {"attempt", e.attempt}, {"from", OrNull(e.from_state)},
          {"to", e.to_state},     {"reason", e.reason},
          {"actor", e.actor}};
}

Json QuotaView(const scheduling::EffectiveQuota& e, int64_t used_milli) {
  const QuotaRecord& q = e.row;
  Json v = {{"model", q.model},
            {"kind", q.kind},
            {"resource_class", q.model + "/" + q.kind},
            {"guarantee_milli", q.guarantee_milli},
            {"limit_milli", q.limit_milli},
            {"used_milli", used_milli},
            {"updated_at", FormatTimestamp(q.updated_at)}};
  if (q.project.empty()) {
    v["clamped_projects"] = e.clamped_projects;
  } else {
    v["over_committed"] = e.over_committed;
    if (e.over_committed) {
      v["requested"] = {{"guarantee_milli", e.requested_guarantee_milli},
                        {"limit_milli", e.requested_limit_milli}};
    }
  }
  return v;
}

Json ProjectView(const ProjectRecord& p, const std::vector<scheduling::EffectiveQuota>& quotas,
                 const std::vector<int64_t>& used) {
  Json items = Json::array();
  for (size_t i = 0; i < quotas.size(); ++i) {
    if (quotas[i].row.project != p.name) continue;
    items.push_back(QuotaView(quotas[i], i < used.size() ? used[i] : 0));
  }
  return {{"tenant_id", p.tenant_id},
          {"name", p.name},
          {"quotas", items},
          {"created_at", FormatTimestamp(p.created_at)}};
}

Json GpuView(const scheduling::GpuInfo& g) {
  Json uses = Json::array();
  for (const auto& u : g.uses) {
    uses.push_back({{"id", u.allocation_id},
                    {"tenant_id", u.tenant_id},
                    {"kind", u.kind},
                    {"milli", u.milli},
                    {"memory_mib", u.memory_mib},
                    {"mig_profile", OrNull(u.mig_profile)},
                    {"mig_start", u.mig_start < 0 ? Json(nullptr) : Json(u.mig_start)}});
  }
  return {{"node", g.node},
          {"index", g.index},
          {"model", g.model},
          {"memory_mib", g.memory_mib},
          {"healthy", g.healthy},
          {"cordoned", g.cordoned},
          {"mig_mode", g.mig_mode},
          {"used_milli", g.used_milli},
          {"used_memory_mib", g.used_memory_mib},
          {"free", g.free},
          {"state", g.state},
          {"scrubbing", g.scrubbing},
          {"health_reason", OrNull(g.health_reason)},
          {"scrubbing_for", g.scrubbing_for},
          {"allocations", uses}};
}

Json NodeView(const scheduling::NodeInfo& n, bool with_gpus) {
  std::string state = n.draining ? "draining" : n.cordoned ? "cordoned" : "ready";
  Json j = {{"name", n.name},
            {"pool", n.pool},
            {"rack", n.rack},
            {"site", n.site},
            {"region", n.region},
            {"gpu_model", OrNull(n.gpu_model)},
            {"gpu_count", n.gpus.size()},
            {"gpus_free", n.gpus_free},
            {"cpu_milli", n.cpu_milli},
            {"memory_mib", n.memory_mib},
            {"cpu_used_milli", n.cpu_used_milli},
            {"memory_used_mib", n.memory_used_mib},
            {"nvlink_groups", n.nvlink_groups},
            {"driver_version", OrNull(n.driver_version)},
            {"cuda_version", OrNull(n.cuda_version)},
            {"state", state},
            {"cordoned", n.cordoned},
            {"draining", n.draining}};
  if (with_gpus) {
    Json gpus = Json::array();
    for (const auto& g : n.gpus) gpus.push_back(GpuView(g));
    j["gpus"] = gpus;
  } else {
    std::set<std::string> ids;
    for (const auto& g : n.gpus) {
      for (const auto& u : g.uses) ids.insert(u.allocation_id);
    }
    j["allocations"] = ids;
  }
  return j;
}

Json CapacityView(const scheduling::CapacityRow& c) {
  Json mig = Json::array();
  for (const auto& m : c.mig) {
    mig.push_back({{"profile", m.profile}, {"free_instances", m.free_instances}});
  }
  return {{"pool", c.pool},
          {"region", c.region},
          {"model", c.model},
          {"nodes", c.nodes},
          {"nodes_schedulable", c.nodes_schedulable},
          {"gpus", c.gpus},
          {"gpus_usable", c.gpus_usable},
          {"gpus_free", c.gpus_free},
          {"free_share_milli", c.free_share_milli},
          {"mig", mig}};
}

Json DeploymentView(const DeploymentRecord& d, bool with_endpoints) {
  Json endpoints = Json::array();
  int64_t capacity = 0;
  for (const auto& e : d.endpoints) {
    endpoints.push_back({{"url", e.url},
                         {"capacity", e.capacity},
                         {"max_prefill", e.max_prefill},
                         {"burst", e.burst}});
    capacity += e.capacity;
  }
  return {{"id", d.id},
          {"model", d.model},
          {"version", d.version},
          {"visibility", d.visibility},
          {"tenant_id", OrNull(d.tenant_id)},
          {"region", d.region},
          {"latency_tier", d.latency_tier},
          {"endpoints", with_endpoints ? endpoints : Json(nullptr)},
          {"endpoint_count", d.endpoints.size()},
          {"capacity", capacity},
          {"created_at", FormatTimestamp(d.created_at)},
          {"updated_at", FormatTimestamp(d.updated_at)}};
}

Json DeploymentReplicaView(const DeploymentReplicaRecord& r) {
  auto time_or_null = [](int64_t ms) { return ms < 0 ? Json(nullptr) : Json(FormatTimestamp(ms)); };
  return {{"id", r.id},
          {"deployment_id", r.deployment_id},
          {"tenant_id", r.tenant_id},
          {"job_id", OrNull(r.job_id)},
          {"state", r.state},
          {"url", OrNull(r.url)},
          {"port", r.port},
          {"generation", r.generation},
          {"health_failures", r.health_failures},
          {"reason", r.reason},
          {"created_at", FormatTimestamp(r.created_at)},
          {"ready_at", time_or_null(r.ready_at)},
          {"drain_started_at", time_or_null(r.drain_started_at)},
          {"ended_at", time_or_null(r.ended_at)},
          {"updated_at", FormatTimestamp(r.updated_at)}};
}

Json EntitlementView(const EntitlementRecord& e) {
  return {{"tenant_id", e.tenant_id},
          {"model", e.model},
          {"created_at", FormatTimestamp(e.created_at)}};
}

Json GatewayLimitView(const GatewayLimitRecord& l) {
  return {{"key_id", OrNull(l.key_id)},
          {"requests_per_minute", l.limits.requests_per_minute},
          {"tokens_per_minute", l.limits.tokens_per_minute},
          {"max_concurrent", l.limits.max_concurrent},
          {"max_queued", l.limits.max_queued},
          {"priority", OrNull(l.priority)},
          {"updated_at", l.updated_at > 0 ? Json(FormatTimestamp(l.updated_at)) : Json(nullptr)}};
}

Json UsageView(const UsageRecord& u, bool with_endpoint) {
  return {{"id", u.id},
          {"tenant_id", u.tenant_id},
          {"key_id", OrNull(u.key_id)},
          {"model", u.model},
          {"deployment_id", OrNull(u.deployment_id)},
          {"endpoint", with_endpoint ? OrNull(u.endpoint) : Json(nullptr)},
          {"api", u.api},
          {"stream", u.stream},
          {"input_tokens", u.input_tokens},
          {"output_tokens", u.output_tokens},
          {"cached_tokens", u.cached_tokens},
          {"queue_ms", u.queue_ms},
          {"ttft_ms", u.ttft_ms},
          {"total_ms", u.total_ms},
          {"status", u.status},
          {"http_status", u.http_status},
          {"created_at", FormatTimestamp(u.created_at)},
          {"flag", OrNull(u.flag)}};
}

Json RefusalTotalsView(const RefusalTotals& t) {
  return {{"key_id", OrNull(t.key_id)},
          {"reason", t.reason},
          {"count", t.count},
          {"first_minute_at", FormatTimestamp(t.first_minute_at)},
          {"last_minute_at", FormatTimestamp(t.last_minute_at)}};
}

Json UsageTotalsView(const UsageTotals& t) {
  return {{"group", OrNull(t.group)},
          {"requests", t.requests},
          {"input_tokens", t.input_tokens},
          {"output_tokens", t.output_tokens},
          {"cached_tokens", t.cached_tokens}};
}

}  // namespace atrium::api
