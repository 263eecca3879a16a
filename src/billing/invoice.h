// Invoices, computed: rated usage summed per price, charged, discounted,
// topped up to a commitment and a minimum. Pure and deterministic, so a
// draft can be recomputed at any time and a finalised invoice proved
// against the rows it counted.
//
// Lines. One per price (price_ref) and item for the period's own usage,
// charged on the line's whole quantity: flat (quantity × price), volume
// (the whole quantity at the price of the tier it reaches) or graduated
// (each tier's part at its price). Usage of an earlier, already finalised
// period that arrived late is an adjustment line per price and period,
// charged at the margin: what the period's quantity with it costs minus
// what it cost without it, so tiers come out as if it had been on time.
// Usage no price applies to is a line of amount 0 marked unpriced.
//
// Then, in this order: the plan's discount (basis points of the usage and
// adjustment lines, one line); the commitment top-up (the plan's committed
// spend minus the period's discounted usage, when above it); the minimum
// charge top-up (the price book's minimum minus all that, when above it).
// Rounding: each line's amount is rounded once, on its exact value, to the
// minor unit, halves away from zero (money.h); the discount likewise.
// Breakdowns per project and per API key split a line's amount in
// proportion to quantity, largest remainders first, so they sum to it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "billing/period.h"
#include "billing/price_book.h"
#include "common/json_reader.h"
#include "common/result.h"
#include "model/billing_records.h"

namespace atrium::billing {

// The exact charge for `quantity` base units at `entry`, rounded once.
// InvalidArgument when it is beyond kMaxAmountMinor.
Result<int64_t> ChargeOf(const PriceEntry& entry, int64_t quantity);

struct InvoiceTerms {
  std::string currency;  // ISO 4217; "" when the tenant has no price book
  int exponent = 2;
  int64_t discount_bp = 0;
  int64_t commitment_minor = 0;
  int64_t minimum_charge_minor = 0;
};

struct InvoiceShare {
  std::string name;  // a project or an API key id ("" none)
  int64_t quantity = 0;
  int64_t amount_minor = 0;
};

struct InvoiceLine {
  // usage | adjustment | discount | commitment | minimum | credit
  std::string kind;
  std::string description;
  std::string meter;
  std::string item;
  std::string price_ref;     // "" for unpriced usage and the lines after usage
  int64_t usage_period = 0;  // adjustments: the start of the period the usage is of
  int64_t quantity = 0;      // base units
  int64_t records = 0;
  std::string unit;           // the pricing unit
  std::string quantity_text;  // quantity in pricing units, six decimals at most
  std::string price_text;     // the price per pricing unit, or the tiers
  bool priced = true;
  int64_t amount_minor = 0;
  std::vector<InvoiceShare> by_project;
  std::vector<InvoiceShare> by_key;
};

struct Invoice {
  std::string tenant_id;
  Period period;
  InvoiceTerms terms;
  std::vector<InvoiceLine> lines;
  int64_t usage_minor = 0;        // usage lines
  int64_t adjustments_minor = 0;  // adjustment lines
  int64_t discount_minor = 0;     // <= 0
  int64_t commitment_minor = 0;   // the top-up
  int64_t minimum_minor = 0;      // the top-up
  int64_t credits_minor = 0;      // <= 0: what credit grants paid (credit.h)
  int64_t total_minor = 0;
  int64_t records = 0;  // rated rows counted
};

// Quantities of earlier periods already invoiced, per (usage period,
// price_ref): what an adjustment is charged at the margin of.
using PriorQuantities = std::map<std::pair<int64_t, std::string>, int64_t>;

// The invoice of `period` from the rated usage counted in it (`groups`,
// whose usage_period is the period's start or, for adjustments, an
// earlier one). `pricing` resolves each group's price_ref; a price_ref it
// cannot resolve is an Internal error (rated rows name only prices that
// exist). InvalidArgument when an amount is beyond kMaxAmountMinor.
Result<Invoice> ComputeInvoice(const std::string& tenant_id, const Period& period,
                               const InvoiceTerms& terms, const std::vector<RatedGroup>& groups,
                               const Pricing& pricing, const PriorQuantities& prior);

// The invoice as the API shows it and a finalised invoice keeps it: amounts
// in minor units and as text of the currency ("12.34").
Json InvoiceToJson(const Invoice& invoice);
// CSV of an invoice document (InvoiceToJson, as stored): a header row, one
// row per line, then one per project and per API key share of each line.
std::string InvoiceCsv(const Json& document);

}  // namespace atrium::billing
