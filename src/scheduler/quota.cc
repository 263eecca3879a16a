#include "scheduler/quota.h"

namespace atrium::sched {

int64_t ChargeMilli(const AllocationRequest& request, const capacity::GpuModel& model) {
  switch (request.kind) {
    case AllocationKind::kGpu:
      return int64_t{request.gpus} * request.nodes * 1000;
    case AllocationKind::kNode:
      return int64_t{request.gpus} * 1000;
    case AllocationKind::kShare:
      return request.milli;
    case AllocationKind::kMig: {
      const capacity::MigProfile* p = model.FindMigProfile(request.mig_profile);
      return p == nullptr ? 0 : MigMilli(p->compute_slices);
    }
  }
  return 0;
}

namespace {

ResourceClass ClassOf(const Allocation& a) { return {a.request.model, a.request.kind}; }

void Apply(ClassUsage& u, const Allocation& a, int64_t sign) {
  u.used += sign * a.charge_milli;
  if (a.request.priority != Priority::kPreemptible) u.non_preemptible += sign * a.charge_milli;
}

std::string Figures(std::string_view owner, const ResourceClass& rc, const ClassUsage& u,
                    const Quota& q) {
  return "quota " + rc.ToString() + " of " + std::string(owner) + ": used " +
         std::to_string(u.used) + " (non-preemptible " + std::to_string(u.non_preemptible) +
         "), guarantee " + std::to_string(q.guarantee) + ", limit " + std::to_string(q.limit) +
         " milli";
}

}  // namespace

void QuotaLedger::Add(const Allocation& a) {
  Apply(tenants_[a.request.tenant][ClassOf(a)], a, 1);
  if (!a.request.project.empty()) {
    Apply(projects_[{a.request.tenant, a.request.project}][ClassOf(a)], a, 1);
  }
}

void QuotaLedger::Remove(const Allocation& a) {
  auto erase_if_zero = [](Table& t, const ResourceClass& rc) {
    auto it = t.find(rc);
    if (it != t.end() && it->second.used == 0 && it->second.non_preemptible == 0) t.erase(it);
  };
  auto t = tenants_.find(a.request.tenant);
  if (t != tenants_.end()) {
    Apply(t->second[ClassOf(a)], a, -1);
    erase_if_zero(t->second, ClassOf(a));
    if (t->second.empty()) tenants_.erase(t);
  }
  if (!a.request.project.empty()) {
    auto p = projects_.find({a.request.tenant, a.request.project});
    if (p != projects_.end()) {
      Apply(p->second[ClassOf(a)], a, -1);
      erase_if_zero(p->second, ClassOf(a));
      if (p->second.empty()) projects_.erase(p);
    }
  }
}

ClassUsage QuotaLedger::Tenant(std::string_view tenant, const ResourceClass& rc) const {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return {};
  auto it = t->second.find(rc);
  return it == t->second.end() ? ClassUsage{} : it->second;
}

ClassUsage QuotaLedger::Project(std::string_view tenant, std::string_view project,
                                const ResourceClass& rc) const {
  auto p = projects_.find({std::string(tenant), std::string(project)});
  if (p == projects_.end()) return {};
  auto it = p->second.find(rc);
  return it == p->second.end() ? ClassUsage{} : it->second;
}

std::map<std::string, int64_t> QuotaLedger::ModelUsage(std::string_view tenant) const {
  std::map<std::string, int64_t> out;
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return out;
  for (const auto& [rc, u] : t->second) out[rc.model] += u.used;
  return out;
}

namespace {

// Which rule decided a verdict, so that CheckQuota can word it and the hot
// paths (every queued request on every pass) need not build strings.
enum class Rule { kNoQuota, kAboveLimit, kMayNotBorrow, kWaitsGuarantee, kWaitsLimit, kFits };

struct Level {
  std::string_view kind;  // "tenant" or "project"
  Quota quota;
  ClassUsage usage;
};

struct Evaluation {
  QuotaVerdict verdict = QuotaVerdict::kWaits;
  Rule rule = Rule::kFits;
  size_t level = 0;  // the level the rule applies to
};

// levels[0] is the tenant; levels[1], when present, the request's project.
Evaluation Evaluate(const Level* levels, size_t count, bool preemptible, int64_t charge) {
  for (size_t k = 0; k < count; ++k) {
    const Quota& q = levels[k].quota;
    if (q.limit == 0) return {QuotaVerdict::kNeverFits, Rule::kNoQuota, k};
    if (charge > q.limit) return {QuotaVerdict::kNeverFits, Rule::kAboveLimit, k};
    if (!preemptible && charge > q.guarantee) {
      return {QuotaVerdict::kNeverFits, Rule::kMayNotBorrow, k};
    }
  }
  for (size_t k = 0; k < count; ++k) {
    const Level& l = levels[k];
    if (!preemptible && l.usage.non_preemptible + charge > l.quota.guarantee) {
      return {QuotaVerdict::kWaits, Rule::kWaitsGuarantee, k};
    }
    if (l.usage.used + charge > l.quota.limit) return {QuotaVerdict::kWaits, Rule::kWaitsLimit, k};
  }
  bool within = true;
  for (size_t k = 0; k < count; ++k) {
    const int64_t base = preemptible ? levels[k].usage.used : levels[k].usage.non_preemptible;
    if (base + charge > levels[k].quota.guarantee) within = false;
  }
  return {within ? QuotaVerdict::kWithinGuarantee : QuotaVerdict::kBorrows, Rule::kFits, 0};
}

size_t GatherLevels(const TenantPolicy& tenant, const QuotaLedger& ledger,
                    const AllocationRequest& request, const ResourceClass& rc, Level (&out)[2]) {
  const Quota* tq = tenant.QuotaFor(rc);
  out[0] = {"tenant", tq ? *tq : Quota{}, ledger.Tenant(tenant.id, rc)};
  if (const Quota* pq = tenant.ProjectQuotaFor(request.project, rc)) {
    out[1] = {"project", *pq, ledger.Project(tenant.id, request.project, rc)};
    return 2;
  }
  return 1;
}

}  // namespace

QuotaVerdict CheckQuotaVerdict(const TenantPolicy& tenant, const QuotaLedger& ledger,
                               const AllocationRequest& request, const ResourceClass& rc,
                               int64_t charge) {
  Level levels[2];
  const size_t count = GatherLevels(tenant, ledger, request, rc, levels);
  return Evaluate(levels, count, request.priority == Priority::kPreemptible, charge).verdict;
}

QuotaCheck CheckQuota(const TenantPolicy& tenant, const QuotaLedger& ledger,
                      const AllocationRequest& request, const ResourceClass& rc, int64_t charge) {
  Level levels[2];
  const size_t count = GatherLevels(tenant, ledger, request, rc, levels);
  const Evaluation e = Evaluate(levels, count, request.priority == Priority::kPreemptible, charge);
  const Level& l = levels[e.level];
  const std::string owner = l.kind == "tenant"
                                ? "tenant " + tenant.id
                                : "project " + request.project + " of tenant " + tenant.id;
  const std::string figures = Figures(owner, rc, l.usage, l.quota);
  const std::string needs = "; this request needs " + std::to_string(charge) + " milli";
  const std::string priority(PriorityName(request.priority));
  switch (e.rule) {
    case Rule::kNoQuota:
      return {e.verdict, "no quota for " + rc.ToString() + " (" + figures + ")"};
    case Rule::kAboveLimit:
      return {e.verdict, "above the limit: " + figures + needs};
    case Rule::kMayNotBorrow:
      return {e.verdict, priority + " work may not borrow above the guarantee: " + figures + needs};
    case Rule::kWaitsGuarantee:
      return {e.verdict, "waits for quota: " + priority +
                             " work may not borrow above the guarantee: " + figures + needs};
    case Rule::kWaitsLimit:
      return {e.verdict, "waits for quota, limit reached: " + figures + needs};
    case Rule::kFits:
      break;
  }
  return {e.verdict, figures + needs};
}

}  // namespace atrium::sched
