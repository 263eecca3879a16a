// Budgets: the rules of what counts against a cap and when it notifies.
// Pure; the billing service computes statuses with them, the gateway and
// the job service refuse new spend on them (docs/billing.md, "Budgets").
//
// A budget caps what a tenant, one of its projects or one of its API keys
// spends per billing period (the tenant's periods, from its anchor day):
// everything spent in the current period counts, also before the budget
// was made or changed. Spend is the period's usage and adjustment charges:
// a tenant's after the plan's discount, a project's or key's its share of
// the lines before it (shares are split before the discount); commitment
// and minimum top-ups are not spend. A budget resets when its period does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "billing/invoice.h"
#include "billing/price_book.h"
#include "common/result.h"
#include "model/billing_records.h"

namespace atrium::billing {

inline constexpr size_t kMaxBudgetThresholds = 10;
inline constexpr int64_t kMaxThresholdPercent = 1000;

// Ascending, distinct, each 1..kMaxThresholdPercent, at most
// kMaxBudgetThresholds; InvalidArgument naming the fault otherwise.
Status ValidateThresholds(const std::vector<int64_t>& thresholds);

// What counts against `budget` in `invoice` (the budget's tenant's invoice
// of the current period, as it stands).
int64_t SpendOf(const Invoice& invoice, const BudgetRecord& budget);

// The highest of the budget's thresholds that `spent` reaches; 0 when none.
int64_t ReachedThreshold(const BudgetRecord& budget, int64_t spent_minor);

// Whether `spent` has used the whole budget (hard budgets then refuse new
// spend).
bool Exhausted(const BudgetRecord& budget, int64_t spent_minor);

// The most a million tokens of each kind may cost the tenant at `at`, per
// model its prices name ("*": every other model): the highest tier of the
// entry that prices them, before discounts, so a request's worst case is
// never held short. Entries selecting a deployment are not considered
// (the gateway holds the model's price; the service's spend corrects it).
std::vector<std::pair<std::string, TokenRates>> TokenRatesOf(const Pricing& pricing,
                                                             const std::string& tenant_id,
                                                             int64_t at);

}  // namespace atrium::billing
