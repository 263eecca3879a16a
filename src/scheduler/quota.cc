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

QuotaCheck CheckQuota(const TenantPolicy& tenant, const QuotaLedger& ledger,
                      const AllocationRequest& request, const ResourceClass& rc, int64_t charge) {
  const bool preemptible = request.priority == Priority::kPreemptible;
  struct Level {
    std::string owner;
    Quota quota;
    ClassUsage usage;
  };
  std::vector<Level> levels;
  const Quota* tq = tenant.QuotaFor(rc);
  levels.push_back({"tenant " + tenant.id, tq ? *tq : Quota{}, ledger.Tenant(tenant.id, rc)});
  if (const Quota* pq = tenant.ProjectQuotaFor(request.project, rc)) {
    levels.push_back({"project " + request.project + " of tenant " + tenant.id, *pq,
                      ledger.Project(tenant.id, request.project, rc)});
  }
  const std::string needs = "; this request needs " + std::to_string(charge) + " milli";
  for (const Level& l : levels) {
    const std::string figures = Figures(l.owner, rc, l.usage, l.quota);
    if (l.quota.limit == 0) {
      return {QuotaVerdict::kNeverFits, "no quota for " + rc.ToString() + " (" + figures + ")"};
    }
    if (charge > l.quota.limit) {
      return {QuotaVerdict::kNeverFits, "above the limit: " + figures + needs};
    }
    if (!preemptible && charge > l.quota.guarantee) {
      return {QuotaVerdict::kNeverFits, std::string(PriorityName(request.priority)) +
                                            " work may not borrow above the guarantee: " + figures +
                                            needs};
    }
  }
  for (const Level& l : levels) {
    const std::string figures = Figures(l.owner, rc, l.usage, l.quota);
    if (!preemptible && l.usage.non_preemptible + charge > l.quota.guarantee) {
      return {QuotaVerdict::kWaits,
              "waits for quota: " + std::string(PriorityName(request.priority)) +
                  " work may not borrow above the guarantee: " + figures + needs};
    }
    if (l.usage.used + charge > l.quota.limit) {
      return {QuotaVerdict::kWaits, "waits for quota, limit reached: " + figures + needs};
    }
  }
  bool within = true;
  for (const Level& l : levels) {
    const int64_t base = preemptible ? l.usage.used : l.usage.non_preemptible;
    if (base + charge > l.quota.guarantee) within = false;
  }
  const std::string figures =
      Figures(levels[0].owner, rc, levels[0].usage, levels[0].quota) + needs;
  return {within ? QuotaVerdict::kWithinGuarantee : QuotaVerdict::kBorrows, figures};
}

}  // namespace atrium::sched
