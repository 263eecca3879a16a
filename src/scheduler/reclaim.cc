#include "scheduler/reclaim.h"

#include <algorithm>

namespace atrium::sched {

std::vector<const Allocation*> ChooseVictims(const ReclaimInput& in) {
  std::vector<const Allocation*> order;
  for (const Allocation* a : in.running) {
    if (a->request.priority == Priority::kPreemptible &&
        a->request.model == in.request_class.model) {
      order.push_back(a);
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const Allocation* a, const Allocation* b) {
    if (a->request.priority != b->request.priority)
      return a->request.priority > b->request.priority;
    if (a->placed_ms != b->placed_ms) return a->placed_ms > b->placed_ms;
    return a->seq > b->seq;
  });

  std::map<TenantClassKey, int64_t> taken = in.already_marked;
  auto borrowed = [&](const Allocation& a) {
    const ResourceClass rc{a.request.model, a.request.kind};
    const auto t = in.tenants.find(a.request.tenant);
    const Quota* q = t == in.tenants.end() ? nullptr : t->second.QuotaFor(rc);
    const int64_t guarantee = q ? q->guarantee : 0;
    int64_t used = in.ledger.Tenant(a.request.tenant, rc).used - taken[{a.request.tenant, rc}];
    if (a.request.tenant == in.request.tenant && rc == in.request_class) used += in.request_charge;
    return used > guarantee;
  };

  ClusterState trial = in.state;
  std::vector<const Allocation*> victims;
  bool fits = false;
  for (const Allocation* a : order) {
    if (!borrowed(*a)) continue;
    victims.push_back(a);
    taken[{a->request.tenant, ResourceClass{a->request.model, a->request.kind}}] += a->charge_milli;
    trial.Remove(*a);
    if (in.fits(trial)) {
      fits = true;
      break;
    }
  }
  if (!fits) return {};
  // Drop victims the fit does not need (the last one always is needed).
  for (size_t k = 0; k + 1 < victims.size();) {
    ClusterState without = in.state;
    for (size_t j = 0; j < victims.size(); ++j) {
      if (j != k) without.Remove(*victims[j]);
    }
    if (in.fits(without)) {
      victims.erase(victims.begin() + std::ptrdiff_t(k));
    } else {
      ++k;
    }
  }
  return victims;
}

}  // namespace atrium::sched
