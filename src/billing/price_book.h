// Price books and billing plans, the pure rules: what the meters are and in
// what units they are priced, how entries are read and checked, and which
// entry prices a piece of usage.
//
// Meters and their units. A meter counts usage in a base unit exactly and
// is priced per a pricing unit of `divisor` base units:
//   gpu.whole      milli-GPU·ms   per GPU-hour            (3.6e9)
//   gpu.share      milli-GPU·ms   per milli-GPU-hour      (3.6e6)
//   gpu.mig        instance·ms    per instance-hour       (3.6e6), per profile
//   gpu.node       milli-GPU·ms   per node-hour           (gpus_per_node × 3.6e9)
//   tokens.input   tokens         per million tokens      (1e6), net of cached
//   tokens.output  tokens         per million tokens
//   tokens.cached  tokens         per million tokens      (without an entry,
//                                 cached tokens are input tokens)
//
// Which entry prices usage: among a tenant's plan's contract entries, else
// its price book's, the entries whose selectors all match (a selector "*"
// or "" matches anything); of those the most specific — a deployment named
// beats a model named beats a MIG profile named. Entries of one version are
// unique by selectors, so there are no ties.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "model/billing_records.h"

namespace atrium::billing {

// The platform's default plan (kDefaultPlanTenantId) has no contract
// prices, discount or commitment, and periods from the 1st.
inline constexpr const char* kDefaultPlanTenant = kDefaultPlanTenantId;

// At most this many entries in one version, and tiers in one entry.
inline constexpr size_t kMaxPriceEntries = 1000;
inline constexpr size_t kMaxPriceTiers = 32;

struct MeterInfo {
  std::string_view name;
  std::string_view unit;  // the pricing unit, plural: "GPU-hours"
  int64_t divisor = 0;    // base units per pricing unit (gpu.node: per GPU of the node)
};
// The meter's units; nullptr for an unknown meter.
const MeterInfo* FindMeter(std::string_view meter);
// Base units per pricing unit of an entry's meter (gpu.node: its node).
int64_t DivisorOf(const PriceEntry& entry);

// Reads a JSON array of entries (the API's and the CLI's shape):
//   {"meter": "gpu.whole", "model": "H100-80GB", "price_minor": "249"}
//   {"meter": "tokens.output", "model": "*", "tier_mode": "graduated",
//    "tiers": [{"up_to": 1000, "price_minor": "60"}, {"price_minor": "40"}]}
// Errors name the entry and field: unknown meters or fields, a selector a
// meter does not have, both or neither of price_minor and tiers, tiers not
// rising, the last tier bounded, two entries with the same selectors.
Result<std::vector<PriceEntry>> ParsePriceEntries(const Json& value, std::string_view what);
// The entries in that shape; with `units`, each also names its pricing
// unit (for people; the parser does not take it back).
Json PriceEntriesToJson(const std::vector<PriceEntry>& entries, bool units = true);
// The entry's selectors as one string: "<meter>|<model>|<mig_profile>|<deployment>".
std::string EntryKey(const PriceEntry& entry);

// The versions of every price book and every tenant's plans, indexed for
// pricing: immutable, built once per rating round.
class Pricing {
 public:
  // `versions` of any books (each book's in any order), `plans` of any
  // tenants, and the platform's default plan (tenant kDefaultPlanTenant),
  // which prices tenants without a plan of their own.
  Pricing(std::vector<PriceBookVersion> versions, std::vector<BillingPlan> plans);
  // Holds pointers into its own maps: moved, never copied.
  Pricing(const Pricing&) = delete;
  Pricing& operator=(const Pricing&) = delete;
  Pricing(Pricing&&) = default;
  Pricing& operator=(Pricing&&) = default;

  struct Match {
    std::string price_ref;  // "" when nothing prices it
    const PriceEntry* entry = nullptr;
  };
  // The entry that prices usage of `meter` selected by `model`,
  // `mig_profile` and `deployment` for `tenant_id` at time `at`.
  Match Find(const std::string& tenant_id, std::string_view meter, std::string_view model,
             std::string_view mig_profile, std::string_view deployment, int64_t at) const;
  // Whether any entry prices `meter` for the tenant at `at` (tokens.cached
  // without one is rated as input).
  bool Prices(const std::string& tenant_id, std::string_view meter, std::string_view model,
              std::string_view deployment, int64_t at) const;

  // The plan in force for the tenant at `at`: its own, else the default
  // plan; nullptr when neither.
  const BillingPlan* PlanAt(const std::string& tenant_id, int64_t at) const;
  // The book version in force at `at`; nullptr when none.
  const PriceBookVersion* BookVersionAt(const std::string& book_id, int64_t at) const;
  // The entry a price_ref names; nullptr when it names none.
  const PriceEntry* EntryOf(const std::string& price_ref) const;

 private:
  struct Priced {
    const PriceEntry* entry;
    std::string ref;  // the full price_ref
  };
  struct Indexed {
    // Entries by meter, most specific first.
    std::map<std::string, std::vector<Priced>, std::less<>> by_meter;
  };
  const Priced* Best(const Indexed& index, std::string_view meter, std::string_view model,
                     std::string_view mig_profile, std::string_view deployment) const;
  const Indexed* IndexOfBook(const std::string& book_id, int64_t at) const;

  std::map<std::string, std::vector<PriceBookVersion>, std::less<>> books_;  // by id, oldest first
  std::map<std::string, std::vector<BillingPlan>, std::less<>> plans_;  // by tenant, oldest first
  // Keyed by ref prefix ("book:<id>@<v>#", "plan:<tenant>@<v>#"); the
  // versions' and plans' own indexes point into it. Pointers into books_
  // and plans_, which never move after construction.
  std::unordered_map<std::string, Indexed> index_;
  std::unordered_map<const PriceBookVersion*, const Indexed*> book_index_;
  std::unordered_map<const BillingPlan*, const Indexed*> plan_index_;
};

// Pricing of stored rows: each version's and plan's stored entries read
// (Internal naming the version or plan when they do not read).
Result<Pricing> PricingOfRows(const PricingRows& rows);

}  // namespace atrium::billing
