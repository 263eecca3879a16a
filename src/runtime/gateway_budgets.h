// The gateway's budget view, from the store's budget rows and the billing
// rules: what each budget allows, what billing counted against it this
// period, what other gateways hold, and what a model's tokens cost at
// most (gateway::BudgetLedger decides with it).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "billing/price_book.h"
#include "gateway/budget_ledger.h"
#include "store/store.h"

namespace atrium {

// Pure: the view of `snap` at `now`. A status of an earlier period counts
// nothing (the budget reset when its period did).
gateway::BudgetView BuildBudgetView(const Store::BudgetSnapshot& snap,
                                    const billing::Pricing& pricing, int64_t now);

// The gateway's BudgetSource over a store: publishes the holds, reads the
// snapshot, prices with price books read at most every pricing_ttl_ms.
class GatewayBudgetSource {
 public:
  GatewayBudgetSource(Store& store, std::string holder, int64_t fresh_ms = 3'000,
                      int64_t pricing_ttl_ms = 5'000);
  Result<gateway::BudgetView> operator()(const std::vector<BudgetHold>& holds);

 private:
  Store& store_;
  const std::string holder_;
  const int64_t fresh_ms_;
  const int64_t pricing_ttl_ms_;
  std::mutex mu_;
  std::shared_ptr<const billing::Pricing> pricing_;  // under mu_
  int64_t pricing_at_ = -1;
};

}  // namespace atrium
