#include "gateway/budget_ledger.h"

#include <algorithm>
#include <utility>

namespace atrium::gateway {
namespace {

constexpr __int128 kMicroMinorPerMillion = __int128{1'000'000} * 1'000'000;

bool Applies(const BudgetLimit& b, const std::string& key_id) {
  if (b.scope == "tenant" || b.scope == "prepaid") return true;
  return b.scope == "key" && b.subject == key_id;
}

}  // namespace

int64_t BudgetLedger::CostOf(const TokenRates& rates, int64_t input_tokens, int64_t output_tokens,
                             int64_t cached_tokens) {
  const int64_t input = std::max<int64_t>(input_tokens, 0);
  const int64_t cached = std::clamp<int64_t>(cached_tokens, 0, input);
  const __int128 micro =
      static_cast<__int128>(input - cached) * rates.input_micro +
      static_cast<__int128>(cached) * rates.cached_micro +
      static_cast<__int128>(std::max<int64_t>(output_tokens, 0)) * rates.output_micro;
  const __int128 minor = (micro + kMicroMinorPerMillion - 1) / kMicroMinorPerMillion;
  return minor > INT64_MAX / 4 ? INT64_MAX / 4 : static_cast<int64_t>(minor);
}

void BudgetLedger::Update(BudgetView view, int64_t now) {
  view_ = std::move(view);
  by_id_.clear();
  for (const auto& [tenant, t] : view_.tenants) {
    for (const auto& b : t.budgets) by_id_[b.id] = &b;
  }
  // Records the store never took (refused) are let go after kForgetMs.
  for (auto it = unshipped_.begin(); it != unshipped_.end();) {
    if (now - it->second.settled_at >= kForgetMs) {
      Add(it->second.budget_ids, -it->second.amount_minor);
      it = unshipped_.erase(it);
    } else {
      ++it;
    }
  }
  DropConfirmed(now);
}

BudgetLedger::Decision BudgetLedger::Reserve(const std::string& tenant_id,
                                             const std::string& key_id, const std::string& model,
                                             int64_t input_tokens, int64_t output_tokens) {
  Decision d;
  auto t = view_.tenants.find(tenant_id);
  if (t == view_.tenants.end()) return d;
  auto rates = t->second.rates.find(model);
  if (rates == t->second.rates.end()) rates = t->second.rates.find("*");
  if (rates != t->second.rates.end()) d.hold.rates = rates->second;
  const int64_t cost = CostOf(d.hold.rates, input_tokens, output_tokens, 0);
  for (const auto& b : t->second.budgets) {
    if (!Applies(b, key_id)) continue;
    if (b.hard && cost > 0) {
      const __int128 headroom =
          static_cast<__int128>(b.limit_minor) - b.spent_minor - b.others_minor;
      const __int128 share = headroom / (1 + std::max<int64_t>(b.others_holders, 0));
      auto held = held_.find(b.id);
      const int64_t mine = held == held_.end() ? 0 : held->second;
      if (static_cast<__int128>(mine) + cost > share) {
        d.allowed = false;
        d.reason = "the " +
                   (b.scope == "key" ? std::string("API key's") : std::string("tenant's")) +
                   " budget " + b.id + " (" + b.limit_text +
                   " this period) has no room for this request's worst case: raise it or wait "
                   "for the next period";
        d.hold = {};
        return d;
      }
    }
    d.hold.budget_ids.push_back(b.id);
  }
  d.hold.amount_minor = cost;
  Add(d.hold.budget_ids, cost);
  return d;
}

int64_t BudgetLedger::Settle(const Hold& hold, const std::string& record_id, int64_t input_tokens,
                             int64_t output_tokens, int64_t cached_tokens, int64_t now) {
  if (hold.empty()) return 0;
  const int64_t cost = CostOf(hold.rates, input_tokens, output_tokens, cached_tokens);
  Add(hold.budget_ids, cost - hold.amount_minor);
  if (cost > 0) {
    Pending& p = unshipped_[record_id];
    if (p.amount_minor > 0) Add(p.budget_ids, -p.amount_minor);  // one record id, one cost
    p = {hold.budget_ids, cost, now, -1};
  }
  return cost;
}

void BudgetLedger::Release(const Hold& hold) {
  if (!hold.empty()) Add(hold.budget_ids, -hold.amount_minor);
}

void BudgetLedger::Shipped(const std::vector<std::string>& record_ids, int64_t now) {
  for (const auto& id : record_ids) {
    auto it = unshipped_.find(id);
    if (it == unshipped_.end()) continue;
    it->second.shipped_at = now;
    shipped_.push_back(std::move(it->second));
    unshipped_.erase(it);
  }
  DropConfirmed(now);
}

std::vector<BudgetHold> BudgetLedger::Holds() const {
  std::vector<BudgetHold> out;
  out.reserve(held_.size());
  for (const auto& [id, amount] : held_) {
    if (amount > 0) out.push_back({"", id, amount, 0});
  }
  std::sort(out.begin(), out.end(),
            [](const BudgetHold& a, const BudgetHold& b) { return a.budget_id < b.budget_id; });
  return out;
}

void BudgetLedger::Add(const std::vector<std::string>& budget_ids, int64_t amount) {
  for (const auto& id : budget_ids) {
    int64_t& h = held_[id];
    h += amount;
    if (h <= 0) held_.erase(id);
  }
}

bool BudgetLedger::Counted(const Pending& p) const {
  for (const auto& id : p.budget_ids) {
    auto b = by_id_.find(id);
    // A budget gone from the view holds nothing any more.
    if (b != by_id_.end() && b->second->computed_at < p.shipped_at + kSkewMarginMs) return false;
  }
  return true;
}

void BudgetLedger::DropConfirmed(int64_t now) {
  while (!shipped_.empty() &&
         (Counted(shipped_.front()) || now - shipped_.front().settled_at >= kForgetMs)) {
    Add(shipped_.front().budget_ids, -shipped_.front().amount_minor);
    shipped_.pop_front();
  }
}

}  // namespace atrium::gateway
