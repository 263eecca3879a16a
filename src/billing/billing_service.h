// The billing service: the shell that rates usage as it arrives, keeps
// drafts current, finalises invoices when their periods end, and proves the
// books (`atrium billing verify`). The rules are the pure ones of this
// folder; every fact is a store row, so a service started after a crash
// resumes where the rows say and rates nothing twice.
//
// Rating. Each round reads usage records not rated yet (token records from
// the gateway, GPU records from the GPU meter), at most `batch` of each at
// a time, rates those older than `rating_lag_ms` with every price book
// version and plan, and stores their rows and their "rated" marks in one
// transaction. Prices are chosen by the record's own time, and a price or
// plan version never takes effect before it is stored; the lag (longer
// than a write takes) makes sure no record is rated before a version that
// covers it is stored.
//
// Finalising. A tenant's period is finalised `finalize_after_ms` after it
// ends (room for usage recorded late, such as a gateway's journal shipped
// after a restart), periods in order. Usage of a finalised period rated
// later counts in the next invoice as an adjustment; a finalised invoice
// never changes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "billing/invoice.h"
#include "billing/period.h"
#include "billing/price_book.h"
#include "common/clock.h"
#include "common/json_reader.h"
#include "common/result.h"
#include "store/store.h"
#include "threads/periodic_thread.h"

namespace atrium::billing {

struct BillingOptions {
  // How often the timer runs a round. 0: no timer (tests call the rounds).
  int64_t interval_ms = 5'000;
  // Records younger than this (by their own time) wait for a later round.
  int64_t rating_lag_ms = 10'000;
  // Records read per source and batch; a round runs batches until none is
  // left (at most max_batches).
  size_t batch = 5'000;
  int64_t max_batches = 100;
  // A period is finalised this long after its end; 0: only when asked.
  int64_t finalize_after_ms = 3'600'000;
  // Called on the timer thread after each of its rounds (tests wait on it).
  std::function<void()> on_round;
  // How often budgets' spend is counted (RefreshBudgets); 0: only when
  // asked.
  int64_t budget_interval_ms = 1'000;
};

struct RatingRound {
  int64_t token_records = 0;
  int64_t gpu_records = 0;
  int64_t rows = 0;
};

// What `atrium billing verify` found for one tenant and period.
struct VerifyReport {
  std::string tenant_id;
  Period period;
  int64_t records = 0;     // usage records of the period (billed sources)
  int64_t rated_rows = 0;  // rated rows of the period's usage
  int64_t pending = 0;     // records too young to be rated yet
  bool invoice_final = false;
  std::string invoice_number;         // when final
  std::vector<std::string> problems;  // empty: proved
  bool ok() const { return problems.empty(); }
};

class BillingService {
 public:
  BillingService(Store& store, const Clock& clock, BillingOptions options = {});
  ~BillingService();
  BillingService(const BillingService&) = delete;
  BillingService& operator=(const BillingService&) = delete;

  Status Start();
  void Stop();  // idempotent; before the store closes

  // One round of rating (what the timer does, with finalising after it).
  Result<RatingRound> RateDue();
  // Finalises every period that ended finalize_after_ms ago or more;
  // returns how many invoices it made. Errors of one tenant are logged and
  // skipped.
  Result<int64_t> FinalizeDue();

  // Budgets. Counts every budget's spend in its current period from usage
  // rated and not rated yet (rated here, in memory, as it will be), stores
  // each status and an audit record ("billing.budget_threshold") per
  // threshold newly reached, in one transaction. Returns how many budgets
  // it counted. Runs under the rating round's lock, so no record is rated
  // between its two reads (counted twice or not at all).
  Result<int64_t> RefreshBudgets();
  // Whether new spend of the tenant (and project, "" none) may start:
  // ResourceExhausted (429) naming the budget when a hard budget of the tenant
  // or the project is spent, by the last count. The job service and the
  // allocation API ask before they place new work.
  Status CheckSpend(const std::string& tenant_id, const std::string& project) const;

  // The currency the tenant is billed in now (its plan's book's, else the
  // default book's); FailedPrecondition when it has no price book.
  Result<std::string> CurrencyNow(const std::string& tenant_id);

  // Every book, version and plan, read now.
  Result<Pricing> LoadPricing();
  // The day of the month a tenant's periods start (its first plan's; 1).
  static int64_t AnchorDayOf(const PricingRows& rows, const std::string& tenant_id);

  // The tenant's invoice for a period ("YYYY-MM"; nullopt: the current
  // one): the finalised one's document when final, else a draft computed
  // now from what is rated ("status": "draft").
  Result<Json> Invoice(const std::string& tenant_id, const std::optional<std::string>& period);
  // Finalises the tenant's invoice for a period that has ended.
  Result<InvoiceRecord> Finalize(const std::string& tenant_id, const std::string& period);
  // Re-rates every record of the tenant's period from the raw usage and
  // checks it against the stored rows (each record rated exactly once, to
  // the same quantities and prices), and a final invoice against its rows.
  Result<VerifyReport> Verify(const std::string& tenant_id, const std::string& period);

 private:
  struct Context;  // pricing and plans read once
  Result<Context> LoadContext();
  Result<InvoiceTerms> TermsAt(const Context& ctx, const std::string& tenant_id,
                               const Period& period);
  // Rates the records, each row's usage period cut with its tenant's
  // anchor day; `used` (when given) gets the anchor day used per tenant.
  Result<std::vector<RatedUsage>> RateAll(const Context& ctx,
                                          const std::vector<UsageRecord>& tokens,
                                          const std::vector<GpuUsageRecord>& gpu,
                                          std::map<std::string, int64_t>* used = nullptr);
  void Round();
  void BudgetRound();
  // Keeps the budget of each tenant whose plan in force is prepaid at its
  // live credit balance, and removes it from tenants whose plan is not.
  Status KeepPrepaidBudgets(const Context& ctx, int64_t now);

  Store& store_;
  const Clock& clock_;
  const BillingOptions options_;
  std::mutex round_mu_;  // one rating round (or budget count) at a time
  // The last count's exhausted hard budgets: (tenant, scope subject) →
  // the refusal's words; subject "" the tenant's own.
  mutable std::mutex spend_mu_;
  std::map<std::pair<std::string, std::string>, std::string> exhausted_;
  PeriodicThread budget_timer_;
  PeriodicThread timer_;  // last: stopped before the rest goes
};

// The document of a finalised invoice: the computed invoice with its id,
// number ("INV-000042"), status "final" and finalisation time.
Json FinalInvoiceDocument(const Invoice& invoice, const std::string& id, int64_t number,
                          int64_t finalized_at);
std::string InvoiceNumberText(int64_t number);

}  // namespace atrium::billing
