#include "billing/price_book.h"

#include <algorithm>
#include <array>
#include <set>
#include <utility>

#include "billing/money.h"

namespace atrium::billing {
namespace {

constexpr int64_t kHourMs = 3'600'000;

constexpr std::array<MeterInfo, 7> kMeters = {{
    {"gpu.whole", "GPU-hours", 1000 * kHourMs},
    {"gpu.share", "milli-GPU-hours", kHourMs},
    {"gpu.mig", "instance-hours", kHourMs},
    {"gpu.node", "node-hours", 1000 * kHourMs},
    {"tokens.input", "million tokens", 1'000'000},
    {"tokens.output", "million tokens", 1'000'000},
    {"tokens.cached", "million tokens", 1'000'000},
}};

bool IsAny(std::string_view selector) { return selector.empty() || selector == "*"; }

bool Selects(std::string_view selector, std::string_view value) {
  return IsAny(selector) || selector == value;
}

int Specificity(const PriceEntry& e) {
  return (e.deployment.empty() ? 0 : 4) + (IsAny(e.model) ? 0 : 2) + (IsAny(e.mig_profile) ? 0 : 1);
}

// A selector: printable ASCII without spaces, '|', '#' or '@' (they
// separate the parts of a price_ref), at most 128 characters.
Status CheckSelector(const std::string& value, const std::string& field) {
  if (value.size() > 128) return Error::InvalidArgument(field + " is longer than 128 characters");
  for (char ch : value) {
    if (ch <= ' ' || ch > '~' || ch == '|' || ch == '#' || ch == '@') {
      return Error::InvalidArgument(field +
                                    " may not hold spaces, control characters, '|', '#' "
                                    "or '@'");
    }
  }
  return OkStatus();
}

Result<PriceTier> ParseTier(const Json& value, const std::string& what, bool last) {
  if (!value.is_object()) return Error::InvalidArgument(what + " must be an object");
  JsonObjectReader r(value, what);
  auto up_to = r.Int("up_to", false, 1, int64_t{1} << 53);
  auto price = r.String("price_minor", true, 64);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  PriceTier t;
  ATRIUM_ASSIGN_OR_RETURN(t.price_micro, ParseUnitPrice(*price, what + ".price_minor"));
  if (last && up_to.has_value()) {
    return Error::InvalidArgument(what + " is the last tier: it has no up_to (it takes the rest)");
  }
  if (!last && !up_to.has_value()) {
    return Error::InvalidArgument(what + ".up_to is required on every tier but the last");
  }
  t.up_to = up_to.value_or(0);
  return t;
}

Result<PriceEntry> ParseEntry(const Json& value, const std::string& what) {
  if (!value.is_object()) return Error::InvalidArgument(what + " must be an object");
  JsonObjectReader r(value, what);
  auto meter = r.String("meter", true, 32);
  auto model = r.String("model", false, 256);
  auto profile = r.String("mig_profile", false, 256);
  auto deployment = r.String("deployment", false, 256);
  auto gpus = r.Int("gpus_per_node", false, 1, 1024);
  auto price = r.String("price_minor", false, 64);
  auto mode = r.String("tier_mode", false, 16);
  const Json* tiers = value.contains("tiers") ? &value.at("tiers") : nullptr;
  if (tiers != nullptr) r.IsNull("tiers");  // declares the field
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  PriceEntry e;
  e.meter = *meter;
  const MeterInfo* info = FindMeter(e.meter);
  if (info == nullptr) {
    return Error::InvalidArgument(what + ".meter '" + e.meter.substr(0, 32) +
                                  "' is not a meter: gpu.whole, gpu.share, gpu.mig, gpu.node, "
                                  "tokens.input, tokens.output or tokens.cached");
  }
  e.model = model.value_or("*");
  if (e.model.empty()) e.model = "*";
  ATRIUM_RETURN_IF_ERROR(CheckSelector(e.model, what + ".model"));
  if (e.meter == "gpu.mig") {
    e.mig_profile = profile.value_or("*");
    if (e.mig_profile.empty()) e.mig_profile = "*";
    ATRIUM_RETURN_IF_ERROR(CheckSelector(e.mig_profile, what + ".mig_profile"));
  } else if (profile.has_value()) {
    return Error::InvalidArgument(what + ".mig_profile is for meter gpu.mig only");
  }
  e.deployment = deployment.value_or("");
  ATRIUM_RETURN_IF_ERROR(CheckSelector(e.deployment, what + ".deployment"));
  if (e.meter == "gpu.node") {
    if (!gpus.has_value()) {
      return Error::InvalidArgument(what +
                                    ".gpus_per_node is required for meter gpu.node: it "
                                    "says how many GPUs a node-hour is");
    }
    e.gpus_per_node = *gpus;
  } else if (gpus.has_value()) {
    return Error::InvalidArgument(what + ".gpus_per_node is for meter gpu.node only");
  }
  if (price.has_value() == (tiers != nullptr)) {
    return Error::InvalidArgument(what + " needs either price_minor (a flat price) or tiers");
  }
  if (price.has_value()) {
    if (mode.has_value() && *mode != "flat") {
      return Error::InvalidArgument(what + ".tier_mode '" + mode->substr(0, 16) +
                                    "' needs tiers; a price_minor is flat");
    }
    e.tier_mode = "flat";
    PriceTier t;
    ATRIUM_ASSIGN_OR_RETURN(t.price_micro, ParseUnitPrice(*price, what + ".price_minor"));
    e.tiers.push_back(t);
    return e;
  }
  if (!mode.has_value() || (*mode != "volume" && *mode != "graduated")) {
    return Error::InvalidArgument(what +
                                  ".tier_mode must be volume (the whole quantity at the "
                                  "tier it reaches) or graduated (each tier's part at its "
                                  "price) with tiers");
  }
  e.tier_mode = *mode;
  if (!tiers->is_array() || tiers->empty() || tiers->size() > kMaxPriceTiers) {
    return Error::InvalidArgument(what + ".tiers must be an array of 1 to " +
                                  std::to_string(kMaxPriceTiers) + " tiers");
  }
  for (size_t i = 0; i < tiers->size(); ++i) {
    ATRIUM_ASSIGN_OR_RETURN(
        auto t,
        ParseTier((*tiers)[i], what + ".tiers[" + std::to_string(i) + "]", i + 1 == tiers->size()));
    if (!e.tiers.empty() && t.up_to != 0 && t.up_to <= e.tiers.back().up_to) {
      return Error::InvalidArgument(what + ".tiers[" + std::to_string(i) +
                                    "].up_to must be above the tier before it");
    }
    e.tiers.push_back(t);
  }
  return e;
}

}  // namespace

const MeterInfo* FindMeter(std::string_view meter) {
  for (const auto& m : kMeters) {
    if (m.name == meter) return &m;
  }
  return nullptr;
}

int64_t DivisorOf(const PriceEntry& entry) {
  const MeterInfo* info = FindMeter(entry.meter);
  if (info == nullptr) return 1;
  return entry.meter == "gpu.node" ? info->divisor * std::max<int64_t>(1, entry.gpus_per_node)
                                   : info->divisor;
}

std::string EntryKey(const PriceEntry& entry) {
  return entry.meter + "|" + entry.model + "|" + entry.mig_profile + "|" + entry.deployment;
}

Result<std::vector<PriceEntry>> ParsePriceEntries(const Json& value, std::string_view what) {
  const std::string name(what);
  if (!value.is_array()) return Error::InvalidArgument("'" + name + "' must be an array of prices");
  if (value.size() > kMaxPriceEntries) {
    return Error::InvalidArgument(name + " holds more than " + std::to_string(kMaxPriceEntries) +
                                  " prices");
  }
  std::vector<PriceEntry> out;
  std::set<std::string> keys;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string here = name + "[" + std::to_string(i) + "]";
    ATRIUM_ASSIGN_OR_RETURN(auto e, ParseEntry(value[i], here));
    if (!keys.insert(EntryKey(e)).second) {
      return Error::InvalidArgument(here +
                                    " selects the same usage as an entry before it (meter, "
                                    "model, mig_profile and deployment)");
    }
    out.push_back(std::move(e));
  }
  return out;
}

Json PriceEntriesToJson(const std::vector<PriceEntry>& entries, bool units) {
  Json out = Json::array();
  for (const auto& e : entries) {
    Json j = {{"meter", e.meter}, {"model", e.model}};
    if (e.meter == "gpu.mig") j["mig_profile"] = e.mig_profile;
    if (!e.deployment.empty()) j["deployment"] = e.deployment;
    if (e.meter == "gpu.node") j["gpus_per_node"] = e.gpus_per_node;
    const MeterInfo* info = FindMeter(e.meter);
    if (units) j["unit"] = info == nullptr ? "" : std::string(info->unit);
    if (e.tier_mode == "flat" && e.tiers.size() == 1) {
      j["price_minor"] = FormatUnitPrice(e.tiers[0].price_micro);
    } else {
      j["tier_mode"] = e.tier_mode;
      Json tiers = Json::array();
      for (const auto& t : e.tiers) {
        Json tj = {{"price_minor", FormatUnitPrice(t.price_micro)}};
        if (t.up_to != 0) tj["up_to"] = t.up_to;
        tiers.push_back(std::move(tj));
      }
      j["tiers"] = std::move(tiers);
    }
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

Result<std::vector<PriceEntry>> StoredEntries(const std::string& text, const std::string& what) {
  ATRIUM_ASSIGN_OR_RETURN(Json j, ParseJson(text));
  auto entries = ParsePriceEntries(j, what);
  if (!entries.has_value()) {
    return Error::Internal("stored prices of " + what + " do not read: " + entries.error().message);
  }
  return entries;
}

}  // namespace

Result<Pricing> PricingOfRows(const PricingRows& rows) {
  std::vector<PriceBookVersion> versions = rows.versions;
  std::vector<BillingPlan> plans = rows.plans;
  for (auto& v : versions) {
    ATRIUM_ASSIGN_OR_RETURN(v.entries,
                            StoredEntries(v.entries_json, "price book " + v.book_id + " version " +
                                                              std::to_string(v.version)));
  }
  for (auto& p : plans) {
    ATRIUM_ASSIGN_OR_RETURN(
        p.entries, StoredEntries(p.entries_json, "the plan of " + p.tenant_id + " version " +
                                                     std::to_string(p.version)));
  }
  return Pricing(std::move(versions), std::move(plans));
}

Pricing::Pricing(std::vector<PriceBookVersion> versions, std::vector<BillingPlan> plans) {
  for (auto& v : versions) books_[v.book_id].push_back(std::move(v));
  for (auto& p : plans) plans_[p.tenant_id].push_back(std::move(p));
  auto index_of = [this](const std::string& prefix, const std::vector<PriceEntry>& entries) {
    Indexed& index = index_[prefix];
    for (const auto& e : entries) {
      index.by_meter[e.meter].push_back(Priced{&e, prefix + EntryKey(e)});
    }
    for (auto& [meter, list] : index.by_meter) {
      std::stable_sort(list.begin(), list.end(), [](const Priced& a, const Priced& b) {
        return Specificity(*a.entry) > Specificity(*b.entry);
      });
    }
    return &index;
  };
  for (auto& [id, list] : books_) {
    std::sort(list.begin(), list.end(),
              [](const auto& a, const auto& b) { return a.version < b.version; });
    for (const auto& v : list) {
      book_index_[&v] = index_of("book:" + id + "@" + std::to_string(v.version) + "#", v.entries);
    }
  }
  for (auto& [tenant, list] : plans_) {
    std::sort(list.begin(), list.end(),
              [](const auto& a, const auto& b) { return a.version < b.version; });
    for (const auto& p : list) {
      plan_index_[&p] =
          index_of("plan:" + tenant + "@" + std::to_string(p.version) + "#", p.entries);
    }
  }
}

const BillingPlan* Pricing::PlanAt(const std::string& tenant_id, int64_t at) const {
  // Versions rise with their effective times (the store refuses a version
  // in force before the one it follows), so the last one begun is in force
  // (of two at the same time, the later).
  auto in_force = [&](const std::string& id) -> const BillingPlan* {
    auto it = plans_.find(id);
    if (it == plans_.end()) return nullptr;
    const BillingPlan* found = nullptr;
    for (const auto& p : it->second) {
      if (p.effective_from <= at) found = &p;
    }
    return found;
  };
  const BillingPlan* own = in_force(tenant_id);
  return own != nullptr ? own : in_force(kDefaultPlanTenant);
}

const PriceBookVersion* Pricing::BookVersionAt(const std::string& book_id, int64_t at) const {
  auto it = books_.find(book_id);
  if (it == books_.end()) return nullptr;
  const PriceBookVersion* found = nullptr;
  for (const auto& v : it->second) {
    if (v.effective_from <= at) found = &v;
  }
  return found;
}

const Pricing::Indexed* Pricing::IndexOfBook(const std::string& book_id, int64_t at) const {
  const PriceBookVersion* v = BookVersionAt(book_id, at);
  if (v == nullptr) return nullptr;
  auto it = book_index_.find(v);
  return it == book_index_.end() ? nullptr : it->second;
}

const Pricing::Priced* Pricing::Best(const Indexed& index, std::string_view meter,
                                     std::string_view model, std::string_view mig_profile,
                                     std::string_view deployment) const {
  auto it = index.by_meter.find(meter);
  if (it == index.by_meter.end()) return nullptr;
  for (const Priced& p : it->second) {
    const PriceEntry* e = p.entry;
    if (Selects(e->model, model) && Selects(e->mig_profile, mig_profile) &&
        (e->deployment.empty() || e->deployment == deployment)) {
      return &p;
    }
  }
  return nullptr;
}

Pricing::Match Pricing::Find(const std::string& tenant_id, std::string_view meter,
                             std::string_view model, std::string_view mig_profile,
                             std::string_view deployment, int64_t at) const {
  const BillingPlan* plan = PlanAt(tenant_id, at);
  if (plan == nullptr) return {};
  if (auto own = plan_index_.find(plan); own != plan_index_.end()) {
    if (const Priced* p = Best(*own->second, meter, model, mig_profile, deployment)) {
      return {p->ref, p->entry};
    }
  }
  const Indexed* index = IndexOfBook(plan->price_book_id, at);
  if (index == nullptr) return {};
  if (const Priced* p = Best(*index, meter, model, mig_profile, deployment)) {
    return {p->ref, p->entry};
  }
  return {};
}

bool Pricing::Prices(const std::string& tenant_id, std::string_view meter, std::string_view model,
                     std::string_view deployment, int64_t at) const {
  return Find(tenant_id, meter, model, "*", deployment, at).entry != nullptr;
}

const PriceEntry* Pricing::EntryOf(const std::string& price_ref) const {
  const size_t hash = price_ref.find('#');
  if (hash == std::string::npos) return nullptr;
  auto it = index_.find(price_ref.substr(0, hash + 1));
  if (it == index_.end()) return nullptr;
  for (const auto& [meter, list] : it->second.by_meter) {
    for (const Priced& p : list) {
      if (p.ref == price_ref) return p.entry;
    }
  }
  return nullptr;
}

}  // namespace atrium::billing
