#include "billing/budget.h"

#include <algorithm>
#include <set>

namespace atrium::billing {
namespace {

bool CountsAsSpend(const InvoiceLine& line) {
  return line.kind == "usage" || line.kind == "adjustment";
}

int64_t HighestTier(const PriceEntry* entry) {
  if (entry == nullptr) return 0;
  int64_t most = 0;
  for (const auto& t : entry->tiers) most = std::max(most, t.price_micro);
  return most;
}

}  // namespace

Status ValidateThresholds(const std::vector<int64_t>& thresholds) {
  if (thresholds.size() > kMaxBudgetThresholds) {
    return Error::InvalidArgument("thresholds: at most " + std::to_string(kMaxBudgetThresholds) +
                                  " percentages");
  }
  int64_t last = 0;
  for (int64_t t : thresholds) {
    if (t < 1 || t > kMaxThresholdPercent) {
      return Error::InvalidArgument("thresholds: each a percentage from 1 to " +
                                    std::to_string(kMaxThresholdPercent) + ", got " +
                                    std::to_string(t));
    }
    if (t <= last) {
      return Error::InvalidArgument("thresholds: ascending and distinct, got " + std::to_string(t) +
                                    " after " + std::to_string(last));
    }
    last = t;
  }
  return OkStatus();
}

int64_t SpendOf(const Invoice& invoice, const BudgetRecord& budget) {
  if (budget.scope == "tenant" || budget.scope == "prepaid") {
    return invoice.usage_minor + invoice.adjustments_minor + invoice.discount_minor;
  }
  int64_t spent = 0;
  for (const auto& line : invoice.lines) {
    if (!CountsAsSpend(line)) continue;
    const auto& shares = budget.scope == "project" ? line.by_project : line.by_key;
    for (const auto& s : shares) {
      if (s.name == budget.subject) spent += s.amount_minor;
    }
  }
  return spent;
}

int64_t ReachedThreshold(const BudgetRecord& budget, int64_t spent_minor) {
  int64_t reached = 0;
  for (int64_t t : budget.thresholds) {
    // spent / amount >= t / 100, in 128 bits (amounts up to 10^15).
    if (static_cast<__int128>(spent_minor) * 100 >=
        static_cast<__int128>(budget.amount_minor) * t) {
      reached = t;
    }
  }
  return reached;
}

bool Exhausted(const BudgetRecord& budget, int64_t spent_minor) {
  return spent_minor >= budget.amount_minor;
}

std::vector<std::pair<std::string, TokenRates>> TokenRatesOf(const Pricing& pricing,
                                                             const std::string& tenant_id,
                                                             int64_t at) {
  std::set<std::string> models = {"*"};
  auto collect = [&](const std::vector<PriceEntry>& entries) {
    for (const auto& e : entries) {
      if (e.meter.rfind("tokens.", 0) == 0) models.insert(e.model);
    }
  };
  const BillingPlan* plan = pricing.PlanAt(tenant_id, at);
  if (plan == nullptr) return {};
  collect(plan->entries);
  if (const PriceBookVersion* v = pricing.BookVersionAt(plan->price_book_id, at)) {
    collect(v->entries);
  }
  std::vector<std::pair<std::string, TokenRates>> out;
  out.reserve(models.size());
  for (const auto& model : models) {
    TokenRates r;
    r.input_micro = HighestTier(pricing.Find(tenant_id, "tokens.input", model, "*", "", at).entry);
    r.output_micro =
        HighestTier(pricing.Find(tenant_id, "tokens.output", model, "*", "", at).entry);
    const PriceEntry* cached = pricing.Find(tenant_id, "tokens.cached", model, "*", "", at).entry;
    r.cached_micro = cached != nullptr ? HighestTier(cached) : r.input_micro;
    out.emplace_back(model, r);
  }
  return out;
}

}  // namespace atrium::billing
