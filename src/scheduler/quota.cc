#include "scheduler/quota.h"

#include <algorithm>

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

std::string_view SubLevelOf(const TenantPolicy& tenant, std::string_view project,
                            const ResourceClass& rc) {
  return tenant.ProjectQuotaFor(project, rc) != nullptr ? project : std::string_view();
}

bool SplitsClass(const TenantPolicy& tenant, const ResourceClass& rc) {
  for (const auto& [name, table] : tenant.projects) {
    if (table.contains(rc)) return true;
  }
  return false;
}

SubLevelQuota SubLevelFor(const TenantPolicy& tenant, const QuotaLedger& ledger,
                          std::string_view sub, const ResourceClass& rc) {
  if (!sub.empty()) {
    const Quota* pq = tenant.ProjectQuotaFor(sub, rc);
    return {pq ? pq->guarantee : 0, ledger.Project(tenant.id, sub, rc)};
  }
  const Quota* tq = tenant.QuotaFor(rc);
  SubLevelQuota rest{tq ? tq->guarantee : 0, ledger.Tenant(tenant.id, rc)};
  for (const auto& [name, table] : tenant.projects) {
    if (auto q = table.find(rc); q != table.end()) rest.guarantee -= q->second.guarantee;
  }
  rest.guarantee = std::max<int64_t>(rest.guarantee, 0);
  ledger.ForEachProject(tenant.id, rc, [&](std::string_view project, const ClassUsage& u) {
    if (tenant.ProjectQuotaFor(project, rc) == nullptr) return;
    rest.usage.used -= u.used;
    rest.usage.non_preemptible -= u.non_preemptible;
  });
  return rest;
}

namespace {

// Which rule decided a verdict, so that CheckQuota can word it and the hot
// paths (every queued request on every pass) need not build strings.
enum class Rule {
  kNoQuota,
  kAboveLimit,
  kMayNotBorrow,
  kWaitsGuarantee,
  kWaitsLimit,
  kOverLimitWithinGuarantee,
  kFits
};

struct Level {
  std::string_view kind;  // "tenant", "project" or "rest"
  Quota quota;
  ClassUsage usage;
};

struct Evaluation {
  QuotaVerdict verdict = QuotaVerdict::kWaits;
  Rule rule = Rule::kFits;
  size_t level = 0;  // the level the rule applies to
};

// levels[0] is the tenant; levels[1], when present, the request's
// sub-level when it differs from the tenant: its project (quota row), or
// the rest (its limit is the tenant's). `siblings_excess` is called only
// when the tenant's limit is what holds a request within its sub-level's
// guarantee back: the other sub-levels' use above their guarantees.
template <typename SiblingsExcess>
Evaluation Evaluate(const Level* levels, size_t count, bool preemptible, int64_t charge,
                    SiblingsExcess&& siblings_excess) {
  for (size_t k = 0; k < count; ++k) {
    const Quota& q = levels[k].quota;
    if (q.limit == 0) return {QuotaVerdict::kNeverFits, Rule::kNoQuota, k};
    if (charge > q.limit) return {QuotaVerdict::kNeverFits, Rule::kAboveLimit, k};
    if (!preemptible && charge > q.guarantee) {
      return {QuotaVerdict::kNeverFits, Rule::kMayNotBorrow, k};
    }
  }
  const size_t sub = count - 1;
  const Level& s = levels[sub];
  const bool within =
      (preemptible ? s.usage.used : s.usage.non_preemptible) + charge <= s.quota.guarantee;
  bool over_limit = false;
  for (size_t k = 0; k < count; ++k) {
    const Level& l = levels[k];
    if (!preemptible && l.usage.non_preemptible + charge > l.quota.guarantee) {
      return {QuotaVerdict::kWaits, Rule::kWaitsGuarantee, k};
    }
    if (l.kind == "rest" || l.usage.used + charge <= l.quota.limit) continue;
    // Limit headroom is taken back only for a request within its sub-level's
    // guarantee, and only from preemptible work above a guarantee: the
    // siblings', and for interactive or batch work its own sub-level's
    // (counting the request, which is within it). A project's limit is at
    // least its guarantee, so its own excess always covers that limit.
    const int64_t excess = l.usage.used + charge - l.quota.limit;
    const int64_t own =
        preemptible ? 0 : std::max<int64_t>(0, s.usage.used + charge - s.quota.guarantee);
    if (within && (k == 0 ? siblings_excess() + own >= excess : own >= excess)) {
      over_limit = true;
      continue;
    }
    return {QuotaVerdict::kWaits, Rule::kWaitsLimit, k};
  }
  if (over_limit) {
    return {QuotaVerdict::kWithinGuaranteeOverLimit, Rule::kOverLimitWithinGuarantee, sub};
  }
  return {within ? QuotaVerdict::kWithinGuarantee : QuotaVerdict::kBorrows, Rule::kFits, sub};
}

size_t GatherLevels(const TenantPolicy& tenant, const QuotaLedger& ledger,
                    const AllocationRequest& request, const ResourceClass& rc, Level (&out)[2]) {
  const Quota* tq = tenant.QuotaFor(rc);
  out[0] = {"tenant", tq ? *tq : Quota{}, ledger.Tenant(tenant.id, rc)};
  if (const Quota* pq = tenant.ProjectQuotaFor(request.project, rc)) {
    out[1] = {"project", *pq, ledger.Project(tenant.id, request.project, rc)};
    return 2;
  }
  if (tq != nullptr && SplitsClass(tenant, rc)) {
    const SubLevelQuota rest = SubLevelFor(tenant, ledger, "", rc);
    out[1] = {"rest", Quota{rest.guarantee, tq->limit}, rest.usage};
    return 2;
  }
  return 1;
}

// Preemptible use above the guarantee. (Non-preemptible use is placed
// within the guarantee; a quota lowered since may leave more of it.)
int64_t Reclaimable(const ClassUsage& u, int64_t guarantee) {
  return std::max<int64_t>(0, u.used - std::max(guarantee, u.non_preemptible));
}

// What the tenant's sub-levels other than `sub` use above their guarantees
// and could give back.
int64_t SiblingsExcess(const TenantPolicy& tenant, const QuotaLedger& ledger,
                       const ResourceClass& rc, std::string_view sub) {
  if (!SplitsClass(tenant, rc)) return 0;
  int64_t excess = 0;
  if (!sub.empty()) {
    const SubLevelQuota rest = SubLevelFor(tenant, ledger, "", rc);
    excess += Reclaimable(rest.usage, rest.guarantee);
  }
  ledger.ForEachProject(tenant.id, rc, [&](std::string_view project, const ClassUsage& u) {
    const Quota* pq = tenant.ProjectQuotaFor(project, rc);
    if (pq == nullptr || project == sub) return;
    excess += Reclaimable(u, pq->guarantee);
  });
  return excess;
}

Evaluation EvaluateRequest(const TenantPolicy& tenant, const QuotaLedger& ledger,
                           const AllocationRequest& request, const ResourceClass& rc,
                           int64_t charge, Level (&levels)[2], size_t& count) {
  count = GatherLevels(tenant, ledger, request, rc, levels);
  const std::string_view sub = SubLevelOf(tenant, request.project, rc);
  return Evaluate(levels, count, request.priority == Priority::kPreemptible, charge,
                  [&] { return SiblingsExcess(tenant, ledger, rc, sub); });
}

std::string OwnerOf(const Level& l, const TenantPolicy& tenant, const AllocationRequest& request) {
  if (l.kind == "project") return "project " + request.project + " of tenant " + tenant.id;
  if (l.kind == "rest") return "tenant " + tenant.id + " outside its projects' quotas";
  return "tenant " + tenant.id;
}

}  // namespace

QuotaVerdict CheckQuotaVerdict(const TenantPolicy& tenant, const QuotaLedger& ledger,
                               const AllocationRequest& request, const ResourceClass& rc,
                               int64_t charge) {
  Level levels[2];
  size_t count = 0;
  return EvaluateRequest(tenant, ledger, request, rc, charge, levels, count).verdict;
}

QuotaCheck CheckQuota(const TenantPolicy& tenant, const QuotaLedger& ledger,
                      const AllocationRequest& request, const ResourceClass& rc, int64_t charge) {
  Level levels[2];
  size_t count = 0;
  const Evaluation e = EvaluateRequest(tenant, ledger, request, rc, charge, levels, count);
  const Level& l = levels[e.level];
  const std::string owner = OwnerOf(l, tenant, request);
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
    case Rule::kOverLimitWithinGuarantee: {
      // The limit that holds it back: the tenant's, else the project's.
      size_t k = 0;
      while (k + 1 < count && levels[k].usage.used + charge <= levels[k].quota.limit) ++k;
      std::string out = "within the guarantee of " + owner + "; the limit of " +
                        OwnerOf(levels[k], tenant, request) +
                        " is reached by preemptible work above a guarantee, which is reclaimed "
                        "for it: " +
                        figures;
      if (k != e.level) {
        out += "; " +
               Figures(OwnerOf(levels[k], tenant, request), rc, levels[k].usage, levels[k].quota);
      }
      return {e.verdict, out + needs};
    }
    case Rule::kFits:
      break;
  }
  return {e.verdict, figures + needs};
}

}  // namespace atrium::sched
