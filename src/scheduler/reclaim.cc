#include "scheduler/reclaim.h"

#include <algorithm>

namespace atrium::sched {

namespace {

// Which allocations are borrowed, as victims are taken one by one: a
// victim taken no longer counts toward its tenant's and sub-level's use.
class Borrowing {
 public:
  explicit Borrowing(const ReclaimInput& in)
      : in_(in), taken_(in.already_marked), taken_sub_(in.already_marked_sub_levels) {
    const auto requester = in.tenants.find(in.request.tenant);
    if (requester != in.tenants.end()) {
      request_sub_ =
          std::string(SubLevelOf(requester->second, in.request.project, in.request_class));
    }
  }

  bool SameClass(const Allocation& a) const {
    return a.request.tenant == in_.request.tenant &&
           ResourceClass{a.request.model, a.request.kind} == in_.request_class;
  }

  bool Borrowed(const Allocation& a) {
    const ResourceClass rc{a.request.model, a.request.kind};
    const auto t = in_.tenants.find(a.request.tenant);
    const Quota* q = t == in_.tenants.end() ? nullptr : t->second.QuotaFor(rc);
    const int64_t guarantee = q ? q->guarantee : 0;
    int64_t used = in_.ledger.Tenant(a.request.tenant, rc).used - taken_[{a.request.tenant, rc}];
    if (SameClass(a)) used += in_.request_charge;
    if (used <= guarantee) return false;
    if (t == in_.tenants.end()) return true;
    const SubLevelState& s = SubLevel(a, t->second, rc);
    if (!s.split) return true;  // one sub-level: the tenant's
    int64_t sub_used = s.quota.usage.used - taken_sub_[{a.request.tenant, rc, s.sub}];
    if (SameClass(a) && s.sub == request_sub_) sub_used += in_.request_sub_level_charge;
    return sub_used > s.quota.guarantee;
  }

  void Take(const Allocation& a) {
    const ResourceClass rc{a.request.model, a.request.kind};
    taken_[{a.request.tenant, rc}] += a.charge_milli;
    if (auto t = in_.tenants.find(a.request.tenant); t != in_.tenants.end()) {
      const SubLevelState& s = SubLevel(a, t->second, rc);
      if (s.split) taken_sub_[{a.request.tenant, rc, s.sub}] += a.charge_milli;
    }
  }

 private:
  struct SubLevelState {
    bool split = false;
    std::string sub;
    SubLevelQuota quota;
  };
  const SubLevelState& SubLevel(const Allocation& a, const TenantPolicy& t,
                                const ResourceClass& rc) {
    auto [it, inserted] = sub_cache_.try_emplace({a.request.tenant + '\0' + a.request.project, rc});
    if (inserted) {
      it->second.split = SplitsClass(t, rc);
      it->second.sub = std::string(SubLevelOf(t, a.request.project, rc));
      if (it->second.split) it->second.quota = SubLevelFor(t, in_.ledger, it->second.sub, rc);
    }
    return it->second;
  }

  const ReclaimInput& in_;
  std::map<TenantClassKey, int64_t> taken_;
  std::map<SubLevelKey, int64_t> taken_sub_;
  std::string request_sub_;
  // By (tenant NUL project, class).
  std::map<std::pair<std::string, ResourceClass>, SubLevelState> sub_cache_;
};

// Lowest priority first, newest first: the order victims are taken in.
void SortVictimOrder(std::vector<const Allocation*>& order) {
  std::stable_sort(order.begin(), order.end(), [](const Allocation* a, const Allocation* b) {
    if (a->request.priority != b->request.priority)
      return a->request.priority > b->request.priority;
    if (a->placed_ms != b->placed_ms) return a->placed_ms > b->placed_ms;
    return a->seq > b->seq;
  });
}

}  // namespace

bool StillBorrowed(const ReclaimInput& in, std::vector<const Allocation*> victims) {
  SortVictimOrder(victims);
  Borrowing borrowing(in);
  for (const Allocation* v : victims) {
    if (!borrowing.Borrowed(*v)) return false;
    borrowing.Take(*v);
  }
  return true;
}

std::vector<const Allocation*> ChooseVictims(const ReclaimInput& in) {
  std::vector<const Allocation*> order;
  for (const Allocation* a : in.running) {
    if (a->request.priority == Priority::kPreemptible &&
        a->request.model == in.request_class.model) {
      order.push_back(a);
    }
  }
  SortVictimOrder(order);

  Borrowing borrowing(in);
  auto same_class = [&](const Allocation& a) { return borrowing.SameClass(a); };
  auto borrowed = [&](const Allocation& a) { return borrowing.Borrowed(a); };
  // Victims of the requesting tenant's class give back limit headroom, to
  // the project's limit too when of the request's project.
  auto gives_back = [&](const Allocation& a) { return same_class(a) ? a.charge_milli : 0; };
  auto gives_back_project = [&](const Allocation& a) {
    return same_class(a) && a.request.project == in.request.project ? a.charge_milli : 0;
  };

  ClusterState trial = in.state;
  std::vector<const Allocation*> victims;
  int64_t deficit = in.limit_deficit;
  int64_t project_deficit = in.project_limit_deficit;
  // With a deficit to cover, the request may fit already; then only victims
  // that give back headroom help. (Without one, as before, the first
  // borrowed victim is taken before the fit is tried.)
  bool fits = (deficit > 0 || project_deficit > 0) && in.fits(trial);
  bool done = false;
  for (const Allocation* a : order) {
    if (!borrowed(*a)) continue;
    if (fits && (deficit <= 0 || gives_back(*a) == 0) &&
        (project_deficit <= 0 || gives_back_project(*a) == 0)) {
      continue;
    }
    victims.push_back(a);
    borrowing.Take(*a);
    deficit -= gives_back(*a);
    project_deficit -= gives_back_project(*a);
    trial.Remove(*a);
    if (!fits) fits = in.fits(trial);
    if (fits && deficit <= 0 && project_deficit <= 0) {
      done = true;
      break;
    }
  }
  if (!done) return {};
  // Drop victims neither the fit nor the deficit needs (the last one always
  // is needed).
  for (size_t k = 0; k + 1 < victims.size();) {
    ClusterState without = in.state;
    int64_t left = in.limit_deficit;
    int64_t project_left = in.project_limit_deficit;
    for (size_t j = 0; j < victims.size(); ++j) {
      if (j == k) continue;
      without.Remove(*victims[j]);
      left -= gives_back(*victims[j]);
      project_left -= gives_back_project(*victims[j]);
    }
    if (left <= 0 && project_left <= 0 && in.fits(without)) {
      victims.erase(victims.begin() + std::ptrdiff_t(k));
    } else {
      ++k;
    }
  }
  return victims;
}

}  // namespace atrium::sched
