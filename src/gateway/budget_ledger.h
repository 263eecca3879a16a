// The gateway's side of budgets: a request holds its worst-case cost
// against its tenant's and key's budgets before it is forwarded, and its
// real cost after, until the billing service's spend counts it. Pure and
// not thread-safe: the server holds a lock around it and feeds it the
// budget view (spend, limits, other gateways' holds) every sync.
//
// Admission, per hard budget: with H = limit - spent - others' holds, as of
// the last sync, and N = 1 + the number of other gateways holding against
// the budget, this gateway admits a request when what it holds itself plus
// the request's worst case stays within H / N. So gateways that sync at
// different moments never hand out more than the headroom between them;
// one gateway alone uses all of it. A request whose worst case costs
// nothing (a model priced at zero) is never refused by a money budget.
// docs/billing.md, "Budgets", states how far a limit can be overshot.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/billing_records.h"

namespace atrium::gateway {

struct BudgetLimit {
  std::string id;
  std::string scope;    // tenant | key | project (never matched here: keys have no project)
  std::string subject;  // the key id of a key budget
  int64_t limit_minor = 0;
  int64_t spent_minor = 0;   // the billing service's count
  int64_t computed_at = -1;  // when it counted (its clock); -1 never yet
  int64_t others_minor = 0;  // other gateways' fresh holds
  int64_t others_holders = 0;
  bool hard = true;
  std::string limit_text;  // "10.00 USD", for the refusal's message
};

struct TenantBudgets {
  std::vector<BudgetLimit> budgets;
  std::unordered_map<std::string, TokenRates> rates;  // by model; "*" every other
};

struct BudgetView {
  std::unordered_map<std::string, TenantBudgets> tenants;
};

class BudgetLedger {
 public:
  // How much later than a record's shipping the billing service's count
  // must be before the record's cost is left to it: room for clocks of
  // two hosts that differ (NTP keeps them within milliseconds).
  static constexpr int64_t kSkewMarginMs = 1000;
  static constexpr int64_t kForgetMs = 600'000;

  // What one request holds; empty when its tenant has no budget.
  struct Hold {
    std::vector<std::string> budget_ids;
    int64_t amount_minor = 0;
    TokenRates rates;
    bool empty() const { return budget_ids.empty(); }
  };
  struct Decision {
    bool allowed = true;
    std::string reason;  // when refused
    Hold hold;
  };

  void Update(BudgetView view, int64_t now);

  // Holds the request's worst case (estimated input, reserved output)
  // against every budget of its tenant and key, all or none.
  Decision Reserve(const std::string& tenant_id, const std::string& key_id,
                   const std::string& model, int64_t input_tokens, int64_t output_tokens);
  // The request ended with a usage record: its real cost replaces its
  // worst case, held until Shipped(record) and a view counted after that.
  // Returns the real cost.
  int64_t Settle(const Hold& hold, const std::string& record_id, int64_t input_tokens,
                 int64_t output_tokens, int64_t cached_tokens, int64_t now);
  // The request ended without a record: nothing was spent.
  void Release(const Hold& hold);
  // Records the store holds now (the journal shipped them at `now`). A
  // record never shipped (the store refused it) is let go kForgetMs after
  // it settled.
  void Shipped(const std::vector<std::string>& record_ids, int64_t now);

  // What this gateway holds per budget (holder left empty), for the sync.
  std::vector<BudgetHold> Holds() const;
  size_t pending() const { return unshipped_.size() + shipped_.size(); }

  // The cost in minor units, rounded up, of tokens at `rates`.
  static int64_t CostOf(const TokenRates& rates, int64_t input_tokens, int64_t output_tokens,
                        int64_t cached_tokens);

 private:
  struct Pending {
    std::vector<std::string> budget_ids;
    int64_t amount_minor = 0;
    int64_t settled_at = 0;
    int64_t shipped_at = -1;
  };
  void Add(const std::vector<std::string>& budget_ids, int64_t amount);
  // Lets go of shipped costs billing has counted, oldest shipped first (a
  // cost waits behind an older one not counted yet: never too early), and
  // of costs held past kForgetMs. Costs only at the front are looked at,
  // so it is cheap to call under the lock every request takes.
  void DropConfirmed(int64_t now);
  bool Counted(const Pending& p) const;

  BudgetView view_;
  std::unordered_map<std::string, const BudgetLimit*> by_id_;  // into view_
  std::unordered_map<std::string, int64_t> held_;              // per budget id
  std::unordered_map<std::string, Pending> unshipped_;         // by record id
  std::deque<Pending> shipped_;                                // in shipping order
};

}  // namespace atrium::gateway
