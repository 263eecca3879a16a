#include "billing/billing_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "billing/budget.h"
#include "billing/credit.h"
#include "billing/money.h"
#include "billing/rating.h"
#include "crypto/ids.h"

namespace atrium::billing {

struct BillingService::Context {
  PricingRows rows;
  Pricing pricing;
};

namespace {

// Entries as stored were checked when they were made; one that no longer
// reads is a broken row, not a price of nothing.
std::tuple<std::string, std::string, std::string> KeyOf(const RatedUsage& r) {
  return {r.source, r.record_id, r.meter};
}

}  // namespace

std::string InvoiceNumberText(int64_t number) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "INV-%06lld", static_cast<long long>(number));
  return buf;
}

Json FinalInvoiceDocument(const Invoice& invoice, const std::string& id, int64_t number,
                          int64_t finalized_at) {
  Json doc = InvoiceToJson(invoice);
  doc["id"] = id;
  doc["number"] = InvoiceNumberText(number);
  doc["status"] = "final";
  doc["finalized_at"] = FormatTimestamp(finalized_at);
  return doc;
}

BillingService::BillingService(Store& store, const Clock& clock, BillingOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      budget_timer_("budgets", options_.budget_interval_ms, [this] { BudgetRound(); }),
      timer_("billing", options_.interval_ms, [this] { Round(); }) {}

BillingService::~BillingService() { Stop(); }

Status BillingService::Start() {
  timer_.Start(PeriodicThread::First::kAtOnce);
  budget_timer_.Start(PeriodicThread::First::kAtOnce);
  return OkStatus();
}

void BillingService::Stop() {
  timer_.Stop();
  budget_timer_.Stop();
}

void BillingService::BudgetRound() {
  auto counted = RefreshBudgets();
  if (!counted.has_value()) {
    spdlog::warn("billing: counting budgets failed, retrying next round: {}",
                 counted.error().message);
  }
}

void BillingService::Round() {
  auto rated = RateDue();
  if (!rated.has_value()) {
    spdlog::warn("billing: rating round failed, retrying next round: {}", rated.error().message);
  }
  if (options_.finalize_after_ms > 0) {
    auto finalized = FinalizeDue();
    if (!finalized.has_value()) {
      spdlog::warn("billing: finalising failed, retrying next round: {}",
                   finalized.error().message);
    }
  }
  if (options_.on_round) options_.on_round();
}

int64_t BillingService::AnchorDayOf(const PricingRows& rows, const std::string& tenant_id) {
  for (const auto& p : rows.plans) {
    if (p.tenant_id == tenant_id) return p.anchor_day;
  }
  return 1;
}

Result<BillingService::Context> BillingService::LoadContext() {
  ATRIUM_ASSIGN_OR_RETURN(PricingRows rows, store_.PricingRowsForBilling());
  ATRIUM_ASSIGN_OR_RETURN(Pricing pricing, PricingOfRows(rows));
  return Context{std::move(rows), std::move(pricing)};
}

Result<Pricing> BillingService::LoadPricing() {
  ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
  return std::move(ctx.pricing);
}

Result<std::vector<RatedUsage>> BillingService::RateAll(const Context& ctx,
                                                        const std::vector<UsageRecord>& tokens,
                                                        const std::vector<GpuUsageRecord>& gpu,
                                                        std::map<std::string, int64_t>* used) {
  std::vector<RatedUsage> rows;
  rows.reserve(tokens.size() * 2 + gpu.size());
  for (const auto& u : tokens) RateTokenUsage(u, ctx.pricing, rows);
  for (const auto& g : gpu) RateGpuUsage(g, ctx.pricing, rows);
  std::map<std::string, int64_t> anchors;
  for (auto& r : rows) {
    auto it = anchors.find(r.tenant_id);
    if (it == anchors.end()) {
      it = anchors.emplace(r.tenant_id, AnchorDayOf(ctx.rows, r.tenant_id)).first;
    }
    r.usage_period = PeriodContaining(std::max<int64_t>(0, r.usage_at), it->second).start_ms;
  }
  if (used != nullptr) *used = std::move(anchors);
  return rows;
}

Result<RatingRound> BillingService::RateDue() {
  std::lock_guard<std::mutex> lock(round_mu_);
  RatingRound round;
  for (int64_t batch = 0; batch < options_.max_batches; ++batch) {
    const int64_t now = clock_.NowMillis();
    const int64_t ripe = now - options_.rating_lag_ms;
    ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
    ATRIUM_ASSIGN_OR_RETURN(auto unrated, store_.UnratedUsageForBilling(options_.batch));
    std::vector<UsageRecord> tokens;
    std::vector<GpuUsageRecord> gpu;
    std::vector<std::string> token_ids;
    std::vector<std::string> gpu_ids;
    for (auto& u : unrated.tokens) {
      if (u.created_at > ripe) break;  // oldest first: the rest are younger
      token_ids.push_back(u.id);
      tokens.push_back(std::move(u));
    }
    for (auto& g : unrated.gpu) {
      if (g.from_ms > ripe) continue;
      gpu_ids.push_back(g.id);
      gpu.push_back(std::move(g));
    }
    if (token_ids.empty() && gpu_ids.empty()) break;
    std::map<std::string, int64_t> anchors;  // what each tenant's periods were cut with
    ATRIUM_ASSIGN_OR_RETURN(auto rows, RateAll(ctx, tokens, gpu, &anchors));
    ATRIUM_RETURN_IF_ERROR(
        store_.StoreRatedUsageForBilling(token_ids, gpu_ids, rows, anchors, now));
    round.token_records += static_cast<int64_t>(token_ids.size());
    round.gpu_records += static_cast<int64_t>(gpu_ids.size());
    round.rows += static_cast<int64_t>(rows.size());
    if (unrated.tokens.size() < options_.batch && unrated.gpu.size() < options_.batch) break;
  }
  return round;
}

Result<InvoiceTerms> BillingService::TermsAt(const Context& ctx, const std::string& tenant_id,
                                             const Period& period) {
  InvoiceTerms terms;
  // The plan in force when the period began, else the one begun in it (a
  // tenant given its first plan mid-period).
  const BillingPlan* plan = ctx.pricing.PlanAt(tenant_id, period.start_ms);
  if (plan == nullptr) plan = ctx.pricing.PlanAt(tenant_id, period.end_ms - 1);
  const int64_t period_start = period.start_ms;
  if (plan == nullptr) return terms;
  for (const auto& b : ctx.rows.books) {
    if (b.id == plan->price_book_id) terms.currency = b.currency;
  }
  ATRIUM_ASSIGN_OR_RETURN(terms.exponent, CurrencyExponent(terms.currency));
  if (plan->tenant_id == tenant_id) {
    terms.discount_bp = plan->discount_bp;
    terms.commitment_minor = plan->commitment_minor;
  }
  const PriceBookVersion* version =
      ctx.pricing.BookVersionAt(plan->price_book_id, std::max(period_start, plan->effective_from));
  if (version != nullptr) terms.minimum_charge_minor = version->minimum_charge_minor;
  // A period that began after the tenant was evicted holds late usage
  // only: no commitment or minimum charge for a tenant that is gone.
  if (auto evicted = store_.GetEvictedTenantForPlatform(tenant_id);
      evicted.has_value() && period.start_ms >= evicted->updated_at) {
    terms.commitment_minor = 0;
    terms.minimum_charge_minor = 0;
  }
  return terms;
}

namespace {

PriorQuantities PriorOf(const std::vector<RatedGroup>& invoiced_before) {
  PriorQuantities prior;
  for (const auto& g : invoiced_before) prior[{g.usage_period, g.price_ref}] += g.quantity;
  return prior;
}

}  // namespace

Result<Json> BillingService::Invoice(const std::string& tenant_id,
                                     const std::optional<std::string>& period_name) {
  ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
  const int64_t anchor = AnchorDayOf(ctx.rows, tenant_id);
  Period period = PeriodContaining(clock_.NowMillis(), anchor);
  if (period_name.has_value()) {
    ATRIUM_ASSIGN_OR_RETURN(period, ParsePeriodName(*period_name, anchor));
  }
  const TenantScope scope = TenantScope::Of(tenant_id);
  ATRIUM_ASSIGN_OR_RETURN(auto invoices, store_.ListInvoices(scope));
  for (const auto& inv : invoices) {
    if (inv.period_start == period.start_ms) return ParseJson(inv.document);
  }
  ATRIUM_ASSIGN_OR_RETURN(auto through, store_.FinalizedThrough(scope));
  if (period.start_ms < through) {
    return Error::NotFound("the tenant has no invoice for " + PeriodName(period) +
                           ": it had nothing to bill then");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto groups, store_.RatedGroups(scope, period.start_ms));
  ATRIUM_ASSIGN_OR_RETURN(auto before, store_.InvoicedBefore(scope, period.start_ms));
  ATRIUM_ASSIGN_OR_RETURN(auto terms, TermsAt(ctx, tenant_id, period));
  ATRIUM_ASSIGN_OR_RETURN(
      auto inv, ComputeInvoice(tenant_id, period, terms, groups, ctx.pricing, PriorOf(before)));
  // The credits that would pay it if it were final now.
  ATRIUM_ASSIGN_OR_RETURN(auto credits, store_.ListCreditGrants(scope));
  ApplyCredits(inv, UsableCredits(std::move(credits), terms.currency, period));
  Json doc = InvoiceToJson(inv);
  doc["status"] = "draft";
  doc["number"] = nullptr;
  doc["computed_at"] = FormatTimestamp(clock_.NowMillis());
  return doc;
}

Result<InvoiceRecord> BillingService::Finalize(const std::string& tenant_id,
                                               const std::string& period_name) {
  ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
  const int64_t anchor = AnchorDayOf(ctx.rows, tenant_id);
  ATRIUM_ASSIGN_OR_RETURN(Period period, ParsePeriodName(period_name, anchor));
  const int64_t now = clock_.NowMillis();
  if (period.end_ms > now) {
    return Error::FailedPrecondition("period " + period_name + " has not ended: it ends " +
                                     FormatTimestamp(period.end_ms));
  }
  ATRIUM_ASSIGN_OR_RETURN(auto terms, TermsAt(ctx, tenant_id, period));
  const std::string id = NewId("inv", clock_);
  auto compute = [&](int64_t number, const std::vector<RatedGroup>& groups,
                     const std::vector<RatedGroup>& before,
                     const std::vector<CreditGrant>& credits) -> Result<Store::InvoiceDocument> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto inv, ComputeInvoice(tenant_id, period, terms, groups, ctx.pricing, PriorOf(before)));
    auto applied = ApplyCredits(inv, UsableCredits(credits, terms.currency, period));
    return Store::InvoiceDocument{terms.currency, inv.total_minor,
                                  FinalInvoiceDocument(inv, id, number, now).dump(),
                                  std::move(applied)};
  };
  return store_.FinalizeInvoiceForBilling(tenant_id, period.start_ms, period.end_ms, id, compute,
                                          now);
}

Result<int64_t> BillingService::FinalizeDue() {
  ATRIUM_ASSIGN_OR_RETURN(auto tenants, store_.BillingTenantsForBilling());
  ATRIUM_ASSIGN_OR_RETURN(PricingRows rows, store_.PricingRowsForBilling());
  const int64_t now = clock_.NowMillis();
  int64_t made = 0;
  for (const auto& t : tenants) {
    if (t.tenant_id == kDefaultPlanTenantId) continue;
    const int64_t anchor = AnchorDayOf(rows, t.tenant_id);
    if (!t.live) {
      // An evicted tenant owes only for periods it has usage in (late
      // records included): no more monthly invoices, no commitment.
      if (t.first_open_usage < 0) continue;
      const Period p = PeriodContaining(t.first_open_usage, anchor);
      if (p.end_ms + options_.finalize_after_ms > now) continue;
      auto made_one = Finalize(t.tenant_id, PeriodName(p));
      if (!made_one.has_value()) {
        spdlog::error("billing: cannot finalise {} of evicted tenant {}: {}", PeriodName(p),
                      t.tenant_id, made_one.error().message);
        continue;
      }
      ++made;
      continue;
    }
    int64_t from = t.finalized_through;
    if (from == 0) {
      // Nothing final yet: from the first usage or plan.
      std::vector<int64_t> starts;
      if (t.first_open_usage >= 0) starts.push_back(t.first_open_usage);
      if (t.first_plan_from >= 0) starts.push_back(t.first_plan_from);
      if (starts.empty()) continue;
      from = *std::min_element(starts.begin(), starts.end());
    } else if (t.first_plan_from < 0 && t.first_open_usage < 0) {
      continue;
    }
    Period p = PeriodContaining(from, anchor);
    // At most a year of periods per round: a service down for long
    // catches up over several.
    for (int i = 0; i < 12 && p.end_ms + options_.finalize_after_ms <= now; ++i) {
      auto made_one = Finalize(t.tenant_id, PeriodName(p));
      if (!made_one.has_value()) {
        spdlog::error("billing: cannot finalise {} of tenant {}: {}", PeriodName(p), t.tenant_id,
                      made_one.error().message);
        break;
      }
      ++made;
      spdlog::info("billing: invoice {} of tenant {} for {} is final, total {} {}",
                   InvoiceNumberText(made_one->number), t.tenant_id, PeriodName(p),
                   made_one->total_minor, made_one->currency);
      p = NextPeriod(p, anchor);
    }
  }
  return made;
}

Result<VerifyReport> BillingService::Verify(const std::string& tenant_id,
                                            const std::string& period_name) {
  ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
  const int64_t anchor = AnchorDayOf(ctx.rows, tenant_id);
  ATRIUM_ASSIGN_OR_RETURN(Period period, ParsePeriodName(period_name, anchor));
  const TenantScope scope = TenantScope::Of(tenant_id);
  VerifyReport report;
  report.tenant_id = tenant_id;
  report.period = period;
  auto problem = [&](std::string text) {
    if (report.problems.size() < 100) report.problems.push_back(std::move(text));
  };
  ATRIUM_ASSIGN_OR_RETURN(auto usage,
                          store_.UsageForVerifyForBilling(scope, period.start_ms, period.end_ms));
  report.records = static_cast<int64_t>(usage.tokens.size() + usage.gpu.size());
  report.rated_rows = static_cast<int64_t>(usage.rated.size());
  const int64_t ripe = clock_.NowMillis() - options_.rating_lag_ms;
  std::set<std::string> unrated(usage.unrated.begin(), usage.unrated.end());
  std::vector<UsageRecord> tokens;
  std::vector<GpuUsageRecord> gpu;
  for (auto& u : usage.tokens) {
    if (unrated.count(u.id) == 0) {
      tokens.push_back(std::move(u));
    } else if (u.created_at > ripe) {
      ++report.pending;
    } else {
      problem("token record " + u.id + " is not rated");
    }
  }
  for (auto& g : usage.gpu) {
    if (unrated.count(g.id) == 0) {
      gpu.push_back(std::move(g));
    } else if (g.from_ms > ripe || g.created_at > ripe) {
      ++report.pending;
    } else {
      problem("GPU record " + g.id + " is not rated");
    }
  }
  // Every rated record, rated again, gives exactly the stored rows.
  ATRIUM_ASSIGN_OR_RETURN(auto expected, RateAll(ctx, tokens, gpu));
  std::map<std::tuple<std::string, std::string, std::string>, const RatedUsage*> stored;
  for (const auto& r : usage.rated) {
    if (!stored.emplace(KeyOf(r), &r).second) {
      problem("record " + r.record_id + " is rated twice on " + r.meter);
    }
  }
  for (const auto& e : expected) {
    auto it = stored.find(KeyOf(e));
    if (it == stored.end()) {
      problem(e.source + " record " + e.record_id + " has no rated " + e.meter);
      continue;
    }
    const RatedUsage& s = *it->second;
    if (s.quantity != e.quantity || s.price_ref != e.price_ref || s.item != e.item ||
        s.usage_period != e.usage_period || s.usage_at != e.usage_at || s.key_id != e.key_id ||
        s.project != e.project) {
      problem(e.source + " record " + e.record_id + " on " + e.meter + " was rated " +
              std::to_string(s.quantity) + " at '" + s.price_ref + "'; rating it again gives " +
              std::to_string(e.quantity) + " at '" + e.price_ref + "'");
    }
    stored.erase(it);
  }
  for (const auto& [key, r] : stored) {
    problem("rated row " + r->record_id + " on " + r->meter + " has no usage record that gives it");
  }
  // A final invoice is what its rows give.
  ATRIUM_ASSIGN_OR_RETURN(auto invoices, store_.ListInvoices(scope));
  for (const auto& inv : invoices) {
    if (inv.period_start != period.start_ms) continue;
    report.invoice_final = true;
    report.invoice_number = InvoiceNumberText(inv.number);
    ATRIUM_ASSIGN_OR_RETURN(auto groups, store_.RatedGroups(scope, period.start_ms));
    ATRIUM_ASSIGN_OR_RETURN(auto before, store_.InvoicedBefore(scope, period.start_ms));
    ATRIUM_ASSIGN_OR_RETURN(auto terms, TermsAt(ctx, tenant_id, period));
    ATRIUM_ASSIGN_OR_RETURN(
        auto again, ComputeInvoice(tenant_id, period, terms, groups, ctx.pricing, PriorOf(before)));
    // What credits paid of it, applied again in the same order.
    ATRIUM_ASSIGN_OR_RETURN(auto applied, store_.CreditApplicationsOf(scope, inv.id));
    ATRIUM_ASSIGN_OR_RETURN(auto grants, store_.ListCreditGrants(scope));
    std::vector<CreditGrant> paid;
    for (const auto& a : applied) {
      for (const auto& g : grants) {
        if (g.id != a.grant_id) continue;
        paid.push_back(g);
        paid.back().remaining_minor = a.amount_minor;
      }
    }
    if (paid.size() != applied.size()) {
      problem("invoice " + report.invoice_number + ": a credit grant it was paid by is gone");
    }
    ApplyCredits(again, UsableCredits(std::move(paid), terms.currency, period));
    ATRIUM_ASSIGN_OR_RETURN(Json doc, ParseJson(inv.document));
    Json fresh = InvoiceToJson(again);
    for (const char* field : {"lines", "total_minor", "records", "usage_minor", "adjustments_minor",
                              "discount_minor", "credits_minor"}) {
      if (doc.value(field, Json()) != fresh[field]) {
        problem("invoice " + report.invoice_number + ": its " + field +
                " differ from what its rated rows give now");
      }
    }
    int64_t line_sum = 0;
    for (const auto& line : doc.value("lines", Json::array())) {
      line_sum += line.value("amount_minor", int64_t{0});
    }
    if (line_sum != doc.value("total_minor", int64_t{0})) {
      problem("invoice " + report.invoice_number + ": its lines sum to " +
              std::to_string(line_sum) + ", its total says " +
              std::to_string(doc.value("total_minor", int64_t{0})));
    }
  }
  return report;
}

Status BillingService::KeepPrepaidBudgets(const Context& ctx, int64_t now) {
  std::set<std::string> tenants;
  for (const auto& p : ctx.rows.plans) {
    if (p.tenant_id != kDefaultPlanTenantId) tenants.insert(p.tenant_id);
  }
  ATRIUM_ASSIGN_OR_RETURN(auto budgets, store_.BudgetsForBilling());
  std::set<std::string> kept;
  for (const auto& b : budgets) {
    if (b.scope == "prepaid") kept.insert(b.tenant_id);
  }
  for (const auto& tenant_id : tenants) {
    const BillingPlan* plan = ctx.pricing.PlanAt(tenant_id, now);
    const bool prepaid = plan != nullptr && plan->prepaid;
    if (!prepaid) {
      if (kept.count(tenant_id)) {
        ATRIUM_RETURN_IF_ERROR(store_.SetPrepaidBudgetForBilling(tenant_id, std::nullopt, "", now));
      }
      continue;
    }
    std::string currency;
    for (const auto& b : ctx.rows.books) {
      if (b.id == plan->price_book_id) currency = b.currency;
    }
    ATRIUM_ASSIGN_OR_RETURN(auto grants, store_.ListCreditGrants(TenantScope::Of(tenant_id)));
    ATRIUM_RETURN_IF_ERROR(store_.SetPrepaidBudgetForBilling(
        tenant_id, LiveBalance(grants, currency, now), currency, now));
  }
  return OkStatus();
}

Result<int64_t> BillingService::RefreshBudgets() {
  std::lock_guard<std::mutex> round(round_mu_);
  const int64_t now = clock_.NowMillis();
  ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
  ATRIUM_RETURN_IF_ERROR(KeepPrepaidBudgets(ctx, now));
  ATRIUM_ASSIGN_OR_RETURN(auto budgets, store_.BudgetsForBilling());
  std::map<std::pair<std::string, std::string>, std::string> exhausted;
  if (budgets.empty()) {
    std::lock_guard<std::mutex> lock(spend_mu_);
    exhausted_.clear();
    return 0;
  }
  ATRIUM_ASSIGN_OR_RETURN(auto previous, store_.BudgetStatusesForBilling());
  std::map<std::string, BudgetStatus> before;
  for (auto& s : previous) before[s.budget_id] = std::move(s);
  std::map<std::string, std::vector<const BudgetRecord*>> by_tenant;
  for (const auto& b : budgets) by_tenant[b.tenant_id].push_back(&b);
  // Usage the rating rounds have not reached yet counts as it will be
  // rated: token records summed per tenant, key, model and deployment by
  // the database (priced at the group's latest time), GPU records (few:
  // one per allocation and metering round) one by one.
  ATRIUM_ASSIGN_OR_RETURN(auto totals, store_.UnratedTokenTotalsForBilling());
  std::vector<UsageRecord> tokens;
  for (auto& t : totals) {
    if (!by_tenant.count(t.tenant_id)) continue;
    // Rating takes a record's counts up to kMaxRecordTokens: larger sums
    // go as several pieces.
    while (t.input_tokens > 0 || t.output_tokens > 0) {
      UsageRecord piece = t;
      piece.input_tokens = std::min(t.input_tokens, kMaxRecordTokens);
      piece.output_tokens = std::min(t.output_tokens, kMaxRecordTokens);
      piece.cached_tokens = std::min(t.cached_tokens, piece.input_tokens);
      t.input_tokens -= piece.input_tokens;
      t.output_tokens -= piece.output_tokens;
      t.cached_tokens -= piece.cached_tokens;
      tokens.push_back(std::move(piece));
    }
  }
  ATRIUM_ASSIGN_OR_RETURN(auto unrated,
                          store_.UnratedUsageForBilling(options_.batch, /*tokens=*/false));
  std::erase_if(unrated.gpu,
                [&](const GpuUsageRecord& g) { return !by_tenant.count(g.tenant_id); });
  ATRIUM_ASSIGN_OR_RETURN(auto pending, RateAll(ctx, tokens, unrated.gpu));
  std::vector<BudgetStatus> statuses;
  std::vector<AuditRecord> crossings;
  for (const auto& [tenant_id, list] : by_tenant) {
    const Period period = PeriodContaining(now, AnchorDayOf(ctx.rows, tenant_id));
    const TenantScope scope = TenantScope::Of(tenant_id);
    ATRIUM_ASSIGN_OR_RETURN(auto groups, store_.RatedGroups(scope, period.start_ms));
    ATRIUM_ASSIGN_OR_RETURN(auto prior, store_.InvoicedBefore(scope, period.start_ms));
    for (const auto& r : pending) {
      if (r.tenant_id != tenant_id || r.usage_at < period.start_ms || r.usage_at >= period.end_ms) {
        continue;
      }
      groups.push_back(
          {r.price_ref, r.meter, r.item, period.start_ms, r.project, r.key_id, r.quantity, 1});
    }
    ATRIUM_ASSIGN_OR_RETURN(auto terms, TermsAt(ctx, tenant_id, period));
    ATRIUM_ASSIGN_OR_RETURN(
        auto inv, ComputeInvoice(tenant_id, period, terms, groups, ctx.pricing, PriorOf(prior)));
    for (const BudgetRecord* b : list) {
      BudgetStatus s{b->id, tenant_id, period.start_ms, period.end_ms, SpendOf(inv, *b), 0, now};
      auto was = before.find(b->id);
      const int64_t notified = was != before.end() && was->second.period_start == period.start_ms
                                   ? was->second.notified_percent
                                   : 0;
      const int64_t reached = ReachedThreshold(*b, s.spent_minor);
      s.notified_percent = std::max(notified, reached);
      if (reached > notified) {
        AuditRecord a;
        a.time = now;
        a.actor = "system:billing";
        a.tenant_id = tenant_id;
        a.action = "billing.budget_threshold";
        a.target = "budget/" + b->id;
        a.outcome = "allowed";
        a.detail = Json{{"budget_id", b->id},           {"scope", b->scope},
                        {"subject", b->subject},        {"threshold_percent", reached},
                        {"spent_minor", s.spent_minor}, {"amount_minor", b->amount_minor},
                        {"currency", b->currency},      {"period", PeriodName(period)}}
                       .dump();
        crossings.push_back(std::move(a));
      }
      if (b->hard && Exhausted(*b, s.spent_minor) && b->scope != "key") {
        exhausted[{tenant_id, b->scope == "project" ? b->subject : ""}] =
            b->scope == "prepaid"
                ? "the tenant's prepaid credit is spent (" +
                      FormatAmount(s.spent_minor, terms.exponent) + " used of " +
                      FormatAmount(b->amount_minor, terms.exponent) + " " + b->currency +
                      " left): more credit must be granted"
                : "the " + b->scope + (b->subject.empty() ? "" : " '" + b->subject + "'") +
                      "'s budget " + b->id + " is spent for " + PeriodName(period) + " (" +
                      FormatAmount(s.spent_minor, terms.exponent) + " of " +
                      FormatAmount(b->amount_minor, terms.exponent) + " " + b->currency + ")";
      }
      statuses.push_back(std::move(s));
    }
  }
  ATRIUM_RETURN_IF_ERROR(store_.StoreBudgetStatusesForBilling(statuses, std::move(crossings)));
  {
    std::lock_guard<std::mutex> lock(spend_mu_);
    exhausted_ = std::move(exhausted);
  }
  return static_cast<int64_t>(statuses.size());
}

Status BillingService::CheckSpend(const std::string& tenant_id, const std::string& project) const {
  std::lock_guard<std::mutex> lock(spend_mu_);
  auto it = exhausted_.find({tenant_id, ""});
  if (it == exhausted_.end() && !project.empty()) it = exhausted_.find({tenant_id, project});
  if (it == exhausted_.end()) return OkStatus();
  return Error::ResourceExhausted(it->second +
                                      ": no new work starts until the budget is raised or the "
                                      "period ends; running work goes on",
                                  0);
}

Result<std::string> BillingService::CurrencyNow(const std::string& tenant_id) {
  ATRIUM_ASSIGN_OR_RETURN(Context ctx, LoadContext());
  const BillingPlan* plan = ctx.pricing.PlanAt(tenant_id, clock_.NowMillis());
  if (plan != nullptr) {
    for (const auto& b : ctx.rows.books) {
      if (b.id == plan->price_book_id) return b.currency;
    }
  }
  return Error::FailedPrecondition(
      "the tenant is billed on no price book yet: the operator sets a default price book or the "
      "tenant's plan first (a budget is money in the tenant's billing currency)");
}

}  // namespace atrium::billing
