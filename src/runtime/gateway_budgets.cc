#include "runtime/gateway_budgets.h"

#include <map>
#include <utility>

#include "billing/budget.h"
#include "billing/money.h"
#include "common/clock.h"

namespace atrium {

gateway::BudgetView BuildBudgetView(const Store::BudgetSnapshot& snap,
                                    const billing::Pricing& pricing, int64_t now) {
  gateway::BudgetView view;
  std::map<std::string, const BudgetStatus*> status_of;
  for (const auto& s : snap.statuses) status_of[s.budget_id] = &s;
  for (const auto& b : snap.budgets) {
    gateway::TenantBudgets& t = view.tenants[b.tenant_id];
    if (t.rates.empty()) {
      for (auto& [model, rates] : billing::TokenRatesOf(pricing, b.tenant_id, now)) {
        t.rates[model] = rates;
      }
    }
    gateway::BudgetLimit limit;
    limit.id = b.id;
    limit.scope = b.scope;
    limit.subject = b.subject;
    limit.limit_minor = b.amount_minor;
    limit.hard = b.hard;
    auto exponent = billing::CurrencyExponent(b.currency);
    limit.limit_text = billing::FormatAmount(b.amount_minor, exponent.has_value() ? *exponent : 2) +
                       " " + b.currency;
    if (auto s = status_of.find(b.id); s != status_of.end()) {
      limit.computed_at = s->second->computed_at;
      if (now < s->second->period_end) limit.spent_minor = s->second->spent_minor;
    }
    if (auto o = snap.others.find(b.id); o != snap.others.end()) {
      limit.others_minor = o->second.amount_minor;
      limit.others_holders = o->second.holders;
    }
    t.budgets.push_back(std::move(limit));
  }
  return view;
}

GatewayBudgetSource::GatewayBudgetSource(Store& store, std::string holder, int64_t fresh_ms,
                                         int64_t pricing_ttl_ms)
    : store_(store),
      holder_(std::move(holder)),
      fresh_ms_(fresh_ms),
      pricing_ttl_ms_(pricing_ttl_ms) {}

Result<gateway::BudgetView> GatewayBudgetSource::operator()(const std::vector<BudgetHold>& holds) {
  const int64_t now = SystemClock::Instance().NowMillis();
  ATRIUM_ASSIGN_OR_RETURN(auto snap,
                          store_.SyncBudgetHoldsForGateway(holder_, holds, now, fresh_ms_));
  if (snap.budgets.empty()) return gateway::BudgetView{};
  std::shared_ptr<const billing::Pricing> pricing;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pricing_ == nullptr || now - pricing_at_ >= pricing_ttl_ms_) {
      ATRIUM_ASSIGN_OR_RETURN(PricingRows rows, store_.PricingRowsForBilling());
      ATRIUM_ASSIGN_OR_RETURN(billing::Pricing fresh, billing::PricingOfRows(rows));
      pricing_ = std::make_shared<const billing::Pricing>(std::move(fresh));
      pricing_at_ = now;
    }
    pricing = pricing_;
  }
  return BuildBudgetView(snap, *pricing, now);
}

}  // namespace atrium
