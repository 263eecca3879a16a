// Rows of billing: price books, tenants' billing plans, rated usage and
// invoices. Plain data; the rules (money, rating, periods, invoices) live in
// src/billing, the tables in the store (store_billing.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace atrium {

// One step of a price: up to `up_to` pricing units (0 on the last step: no
// bound), `price_micro` micro-minor units per pricing unit.
struct PriceTier {
  int64_t up_to = 0;
  int64_t price_micro = 0;
  bool operator==(const PriceTier&) const = default;
};

// What one meter costs, for the usage it selects. Selectors: `model` (the
// GPU model of gpu.* meters, the model name of tokens.* meters; "*" any),
// `mig_profile` (gpu.mig only; "*" any), `deployment` ("" any). The most
// specific entry that selects a record prices it (src/billing/price_book.h).
struct PriceEntry {
  // gpu.whole | gpu.mig | gpu.share | gpu.node | tokens.input |
  // tokens.output | tokens.cached
  std::string meter;
  std::string model = "*";
  std::string mig_profile;
  std::string deployment;
  int64_t gpus_per_node = 0;  // gpu.node only: what a node-hour is
  std::string tier_mode;      // flat | volume | graduated
  std::vector<PriceTier> tiers;
  bool operator==(const PriceEntry&) const = default;
};

// A price book: a name and a currency; its prices are versions.
struct PriceBookRecord {
  std::string id;  // pb_…
  std::string name;
  std::string currency;     // ISO 4217
  bool is_default = false;  // the default plan's book now (computed, not stored)
  std::string created_by;
  int64_t created_at = 0;
  int64_t updated_at = 0;
};

// One version of a price book's prices, in force from `effective_from`
// until the next version's: a version never takes effect before it was
// made, so a change never rewrites a period already billed.
struct PriceBookVersion {
  std::string book_id;
  int64_t version = 0;  // 1, 2, …
  int64_t effective_from = 0;
  int64_t minimum_charge_minor = 0;  // per invoice period, 0: none
  std::vector<PriceEntry> entries;   // read from entries_json by src/billing
  std::string entries_json;          // as stored
  std::string note;
  std::string created_by;
  int64_t created_at = 0;
};

// The tenant id of the platform's default plan, whose versions name the
// price book of tenants without a plan of their own.
inline constexpr char kDefaultPlanTenantId[] = "*";

// What a tenant is billed on from `effective_from`: a price book, and its
// contract terms. Versioned like price books.
struct BillingPlan {
  std::string tenant_id;
  int64_t version = 0;
  int64_t effective_from = 0;
  std::string price_book_id;
  int64_t anchor_day = 1;        // 1..28: the day of the month periods start
  int64_t discount_bp = 0;       // basis points off usage, 0..10000
  int64_t commitment_minor = 0;  // committed spend per period, 0: none
  // Prepaid: the tenant spends its credits; with none left it is over a
  // hard budget (new spend refused) until more are granted.
  bool prepaid = false;
  std::vector<PriceEntry> entries;  // contract prices, before the book's
  std::string entries_json;         // as stored
  std::string note;
  std::string created_by;
  int64_t created_at = 0;
};

// One usage record's quantity on one meter, priced by `price_ref` (""
// when no price applies: counted, shown, not charged). Its key is
// (tenant_id, source, record_id, meter); a record is rated once.
struct RatedUsage {
  std::string tenant_id;
  std::string source;     // tokens | gpu
  std::string record_id;  // the usage record's id
  std::string meter;
  std::string item;       // what the invoice line names: the model, GPU model[/profile]
  std::string price_ref;  // book:<id>@<version>#<entry> | plan:<tenant>@<version>#<entry> | ""
  int64_t quantity = 0;   // in the meter's base unit (tokens, milli-GPU·ms, instance·ms)
  int64_t usage_at = 0;   // the record's time: which period it belongs to
  std::string project;
  std::string key_id;
  std::string deployment_id;
  // Set by the store when it is stored: the start of the period it
  // belongs to, and of the invoice that counts it (later when that period
  // was finalised before it arrived: an adjustment).
  int64_t usage_period = 0;
  int64_t invoice_period = 0;
  bool operator==(const RatedUsage&) const = default;
};

// Rated usage summed, as invoices are computed from it.
struct RatedGroup {
  std::string price_ref;
  std::string meter;
  std::string item;
  int64_t usage_period = 0;
  std::string project;
  std::string key_id;
  int64_t quantity = 0;
  int64_t records = 0;
};

// A finalised invoice: numbered without gaps across the platform, never
// changed. `document` is the invoice as computed when it was finalised
// (src/billing/invoice.h, InvoiceToJson), with its number.
struct InvoiceRecord {
  std::string id;  // inv_…
  int64_t number = 0;
  std::string tenant_id;
  int64_t period_start = 0;
  int64_t period_end = 0;
  std::string currency;
  int64_t total_minor = 0;
  std::string document;
  int64_t finalized_at = 0;
};

// Every price book version, every tenant's plans and the default book:
// what rating prices with.
struct PricingRows {
  std::vector<PriceBookRecord> books;
  std::vector<PriceBookVersion> versions;
  std::vector<BillingPlan> plans;
};

// A cap on what a tenant, one of its projects or one of its API keys may
// spend per billing period (src/billing/budget.h has the rules). Amounts
// are minor units of the tenant's billing currency.
struct BudgetRecord {
  std::string id;  // bud_…
  std::string tenant_id;
  std::string scope;    // tenant | project | key
  std::string subject;  // "" (tenant), the project's name or the key's id
  std::string currency;
  int64_t amount_minor = 0;
  // Percentages of the amount that notify once per period when spend
  // reaches them, ascending, each 1..1000.
  std::vector<int64_t> thresholds;
  bool hard = true;  // at 100 %: new spend is refused
  std::string created_by;
  int64_t created_at = 0;
  int64_t updated_at = 0;
};

// Where a budget stands in its current period, as the billing service last
// computed it from usage (rated and not yet rated).
struct BudgetStatus {
  std::string budget_id;
  std::string tenant_id;
  int64_t period_start = 0;
  int64_t period_end = 0;
  int64_t spent_minor = 0;
  int64_t notified_percent = 0;  // the highest threshold notified this period
  int64_t computed_at = 0;       // when the spend was read (the service's clock)
};

// What one gateway holds against a budget now: its requests' worst cases
// in flight and the cost of those ended whose records the billing service
// has not counted yet. Fresh rows of other gateways count against the
// budget's headroom.
struct BudgetHold {
  std::string holder;  // the gateway's id
  std::string budget_id;
  int64_t amount_minor = 0;
  int64_t updated_at = 0;
};

// What a model's tokens cost at most, for holding a request's worst case
// against budgets: micro-minor units per million tokens (the highest tier's
// price). Cached tokens cost `cached_micro` (the input price when there is
// no cached price).
struct TokenRates {
  int64_t input_micro = 0;
  int64_t output_micro = 0;
  int64_t cached_micro = 0;
  bool operator==(const TokenRates&) const = default;
};

// Money given to a tenant ahead of its invoices: prepaid (bought) or a
// grant (given), in its billing currency, used up by final invoices (the
// earliest to expire first) while it lives. Never changed but for what
// remains of it.
struct CreditGrant {
  std::string id;  // cr_…
  std::string tenant_id;
  std::string kind;  // prepaid | grant
  std::string currency;
  int64_t amount_minor = 0;
  int64_t remaining_minor = 0;
  int64_t expires_at = 0;  // 0: never
  std::string note;
  std::string created_by;
  int64_t created_at = 0;
};

// What one credit grant paid of one final invoice.
struct CreditApplication {
  std::string invoice_id;
  std::string grant_id;
  std::string tenant_id;
  int64_t amount_minor = 0;
  int64_t applied_at = 0;
};

}  // namespace atrium
