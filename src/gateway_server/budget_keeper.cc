#include "gateway_server/budget_keeper.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace atrium::gateway_server {

BudgetKeeper::BudgetKeeper(BudgetSource source, const Clock& clock, int sync_ms)
    : source_(std::move(source)),
      clock_(clock),
      timer_("gw-budgets", sync_ms, [this] { (void)Sync(); }) {}

BudgetKeeper::~BudgetKeeper() { Stop(); }

void BudgetKeeper::Start() {
  (void)Sync();
  timer_.Start();
}

void BudgetKeeper::Stop() { timer_.Stop(); }

Status BudgetKeeper::Sync() {
  std::lock_guard<std::mutex> sync(sync_mu_);
  auto view = source_(Holds());
  if (!view.has_value()) {
    failures_.fetch_add(1);
    if (!was_failing_) {
      spdlog::warn("gateway budgets: cannot sync with the store ({}); the last view stays in force",
                   view.error().message);
    }
    was_failing_ = true;
    return std::move(view).error();
  }
  if (was_failing_) spdlog::info("gateway budgets: synced with the store again");
  was_failing_ = false;
  std::lock_guard<std::mutex> lock(mu_);
  ledger_.Update(std::move(*view), clock_.NowMillis());
  return OkStatus();
}

gateway::BudgetLedger::Decision BudgetKeeper::Reserve(const std::string& tenant_id,
                                                      const std::string& key_id,
                                                      const std::string& model,
                                                      int64_t input_tokens, int64_t output_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.Reserve(tenant_id, key_id, model, input_tokens, output_tokens);
}

int64_t BudgetKeeper::Settle(const gateway::BudgetLedger::Hold& hold, const UsageRecord& record) {
  if (hold.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.Settle(hold, record.id, record.input_tokens, record.output_tokens,
                        record.cached_tokens, clock_.NowMillis());
}

void BudgetKeeper::Release(const gateway::BudgetLedger::Hold& hold) {
  if (hold.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ledger_.Release(hold);
}

void BudgetKeeper::Shipped(const std::vector<UsageRecord>& records) {
  std::vector<std::string> ids;
  ids.reserve(records.size());
  for (const auto& r : records) ids.push_back(r.id);
  std::lock_guard<std::mutex> lock(mu_);
  ledger_.Shipped(ids, clock_.NowMillis());
}

std::vector<BudgetHold> BudgetKeeper::Holds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ledger_.Holds();
}

}  // namespace atrium::gateway_server
