// BudgetKeeper: the gateway's budgets, kept current. A thread publishes
// what this gateway holds against each budget and reads back every
// budget's spend and the other gateways' holds every sync_ms
// (gateway::BudgetLedger has the rule), so a budget spent through any
// gateway stops the others within about sync_ms plus the billing
// service's count. When the store cannot be read the last view stays in
// force and this gateway's own holds keep counting against it: a tenant is
// never let through unlimited because the store is down (a gateway started
// while it is down knows no budgets until it can read them).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "gateway/budget_ledger.h"
#include "model/gateway_records.h"
#include "threads/periodic_thread.h"

namespace atrium::gateway_server {

// Publishes this gateway's holds and returns the view (the runtime binds
// it to Store::SyncBudgetHoldsForGateway and the billing rules).
using BudgetSource =
    std::function<Result<gateway::BudgetView>(const std::vector<BudgetHold>& holds)>;

class BudgetKeeper {
 public:
  BudgetKeeper(BudgetSource source, const Clock& clock, int sync_ms = 250);
  ~BudgetKeeper();  // Stop()s
  BudgetKeeper(const BudgetKeeper&) = delete;
  BudgetKeeper& operator=(const BudgetKeeper&) = delete;

  // A first sync (its failure is logged, not fatal), then the thread.
  void Start();
  void Stop();
  // One sync now (tests; the thread does this by itself).
  Status Sync();

  gateway::BudgetLedger::Decision Reserve(const std::string& tenant_id, const std::string& key_id,
                                          const std::string& model, int64_t input_tokens,
                                          int64_t output_tokens);
  int64_t Settle(const gateway::BudgetLedger::Hold& hold, const UsageRecord& record);
  void Release(const gateway::BudgetLedger::Hold& hold);
  // The usage journal stored these records.
  void Shipped(const std::vector<UsageRecord>& records);

  std::vector<BudgetHold> Holds() const;
  int64_t failures() const { return failures_.load(); }

 private:
  const BudgetSource source_;
  const Clock& clock_;
  mutable std::mutex mu_;
  gateway::BudgetLedger ledger_;  // under mu_
  std::mutex sync_mu_;            // one sync at a time
  std::atomic<int64_t> failures_{0};
  bool was_failing_ = false;  // under sync_mu_
  PeriodicThread timer_;      // last: stopped before the rest goes
};

}  // namespace atrium::gateway_server
