#include "billing/invoice.h"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "billing/money.h"

namespace atrium::billing {
namespace {

// Σ tier parts × price, exact (micro-minor units × base units).
__int128 ExactCharge(const PriceEntry& entry, int64_t quantity) {
  const __int128 divisor = DivisorOf(entry);
  if (entry.tier_mode == "volume") {
    for (const auto& t : entry.tiers) {
      if (t.up_to == 0 || static_cast<__int128>(quantity) <= t.up_to * divisor) {
        return static_cast<__int128>(quantity) * t.price_micro;
      }
    }
    return 0;
  }
  if (entry.tier_mode == "graduated") {
    __int128 sum = 0;
    __int128 below = 0;  // base units covered by earlier tiers
    for (const auto& t : entry.tiers) {
      const __int128 top = t.up_to == 0 ? static_cast<__int128>(quantity) : t.up_to * divisor;
      const __int128 part = std::min<__int128>(quantity, top) - below;
      if (part <= 0) break;
      sum += part * t.price_micro;
      below = std::max(below, top);
    }
    return sum;
  }
  return entry.tiers.empty() ? 0 : static_cast<__int128>(quantity) * entry.tiers[0].price_micro;
}

std::string QuantityText(int64_t quantity, int64_t divisor) {
  // Six decimals of the pricing unit, truncated.
  const __int128 micro = static_cast<__int128>(quantity) * 1'000'000 / divisor;
  return FormatUnitPrice(static_cast<int64_t>(micro));
}

std::string PriceText(const PriceEntry& e) {
  if (e.tier_mode == "flat" && !e.tiers.empty()) return FormatUnitPrice(e.tiers[0].price_micro);
  std::string out = e.tier_mode + ":";
  for (size_t i = 0; i < e.tiers.size(); ++i) {
    out += (i == 0 ? " " : ", ") + FormatUnitPrice(e.tiers[i].price_micro);
    out += e.tiers[i].up_to == 0 ? " above" : " up to " + std::to_string(e.tiers[i].up_to);
  }
  return out;
}

std::string MeterTitle(std::string_view meter) {
  if (meter == "gpu.whole") return "GPU time, whole GPUs";
  if (meter == "gpu.share") return "GPU time, shared GPUs";
  if (meter == "gpu.mig") return "GPU time, MIG instances";
  if (meter == "gpu.node") return "GPU time, whole nodes";
  if (meter == "tokens.input") return "Input tokens";
  if (meter == "tokens.output") return "Output tokens";
  if (meter == "tokens.cached") return "Cached input tokens";
  return std::string(meter);
}

// Splits `amount` over `shares` in proportion to their quantity; the
// remainders go to the largest fractional parts (ties: the earlier name).
void Split(int64_t amount, int64_t total_quantity, std::vector<InvoiceShare>& shares) {
  if (total_quantity <= 0) return;
  if (amount < 0) {
    Split(-amount, total_quantity, shares);
    for (auto& s : shares) s.amount_minor = -s.amount_minor;
    return;
  }
  std::vector<std::pair<__int128, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < shares.size(); ++i) {
    const __int128 exact = static_cast<__int128>(amount) * shares[i].quantity;
    shares[i].amount_minor = static_cast<int64_t>(exact / total_quantity);
    remainders.emplace_back(exact % total_quantity, i);
    given += shares[i].amount_minor;
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < amount && i < remainders.size(); ++i, ++given) {
    ++shares[remainders[i].second].amount_minor;
  }
}

struct LineKey {
  bool adjustment;
  int64_t usage_period;
  std::string meter;
  std::string item;
  std::string price_ref;
  bool operator<(const LineKey& o) const {
    return std::tie(adjustment, usage_period, meter, item, price_ref) <
           std::tie(o.adjustment, o.usage_period, o.meter, o.item, o.price_ref);
  }
};

struct Pending {
  int64_t quantity = 0;
  int64_t records = 0;
  std::map<std::string, int64_t> by_project;
  std::map<std::string, int64_t> by_key;
};

std::vector<InvoiceShare> SharesOf(const std::map<std::string, int64_t>& m) {
  std::vector<InvoiceShare> out;
  out.reserve(m.size());
  for (const auto& [name, quantity] : m) out.push_back({name, quantity, 0});
  return out;
}

}  // namespace

Result<int64_t> ChargeOf(const PriceEntry& entry, int64_t quantity) {
  const __int128 divisor = static_cast<__int128>(DivisorOf(entry)) * kMicroPerMinor;
  return AmountWithinBounds(RoundedQuotient(ExactCharge(entry, quantity), divisor),
                            "the charge for " + entry.meter);
}

Result<Invoice> ComputeInvoice(const std::string& tenant_id, const Period& period,
                               const InvoiceTerms& terms, const std::vector<RatedGroup>& groups,
                               const Pricing& pricing, const PriorQuantities& prior) {
  Invoice inv;
  inv.tenant_id = tenant_id;
  inv.period = period;
  inv.terms = terms;
  std::map<LineKey, Pending> pending;
  for (const auto& g : groups) {
    const bool adjustment = g.usage_period < period.start_ms;
    Pending& p =
        pending[LineKey{adjustment, adjustment ? g.usage_period : 0, g.meter, g.item, g.price_ref}];
    p.quantity += g.quantity;
    p.records += g.records;
    if (g.meter.rfind("gpu.", 0) == 0) p.by_project[g.project] += g.quantity;
    if (g.meter.rfind("tokens.", 0) == 0) p.by_key[g.key_id] += g.quantity;
    inv.records += g.records;
  }
  for (auto& [key, p] : pending) {
    InvoiceLine line;
    line.kind = key.adjustment ? "adjustment" : "usage";
    line.meter = key.meter;
    line.item = key.item;
    line.price_ref = key.price_ref;
    line.usage_period = key.adjustment ? key.usage_period : period.start_ms;
    line.quantity = p.quantity;
    line.records = p.records;
    const MeterInfo* info = FindMeter(key.meter);
    line.unit = info == nullptr ? "" : std::string(info->unit);
    line.description = MeterTitle(key.meter) + ", " + key.item;
    if (key.adjustment) {
      line.description += " (late usage of " + PeriodName(Period{key.usage_period, 0}) + ")";
    }
    if (key.price_ref.empty()) {
      line.priced = false;
      line.price_text = "no price";
      line.quantity_text = QuantityText(p.quantity, info == nullptr ? 1 : info->divisor);
    } else {
      const PriceEntry* entry = pricing.EntryOf(key.price_ref);
      if (entry == nullptr) {
        return Error::Internal("rated usage names price " + key.price_ref +
                               ", which no price book holds");
      }
      line.price_text = PriceText(*entry);
      line.quantity_text = QuantityText(p.quantity, DivisorOf(*entry));
      if (key.adjustment) {
        auto it = prior.find({key.usage_period, key.price_ref});
        const int64_t before = it == prior.end() ? 0 : it->second;
        ATRIUM_ASSIGN_OR_RETURN(auto with, ChargeOf(*entry, before + p.quantity));
        ATRIUM_ASSIGN_OR_RETURN(auto without, ChargeOf(*entry, before));
        line.amount_minor = with - without;
      } else {
        ATRIUM_ASSIGN_OR_RETURN(line.amount_minor, ChargeOf(*entry, p.quantity));
      }
    }
    line.by_project = SharesOf(p.by_project);
    line.by_key = SharesOf(p.by_key);
    Split(line.amount_minor, p.quantity, line.by_project);
    Split(line.amount_minor, p.quantity, line.by_key);
    (key.adjustment ? inv.adjustments_minor : inv.usage_minor) += line.amount_minor;
    inv.lines.push_back(std::move(line));
  }
  ATRIUM_ASSIGN_OR_RETURN(
      [[maybe_unused]] auto usage_and_adjustments,
      AmountWithinBounds(static_cast<__int128>(inv.usage_minor) + inv.adjustments_minor,
                         "the invoice's usage"));
  auto add_line = [&](std::string kind, std::string description, int64_t amount) {
    InvoiceLine line;
    line.kind = std::move(kind);
    line.description = std::move(description);
    line.usage_period = period.start_ms;
    line.amount_minor = amount;
    inv.lines.push_back(std::move(line));
  };
  const int64_t usage_discount = static_cast<int64_t>(
      RoundedQuotient(static_cast<__int128>(inv.usage_minor) * terms.discount_bp, 10'000));
  const int64_t adjustment_discount = static_cast<int64_t>(
      RoundedQuotient(static_cast<__int128>(inv.adjustments_minor) * terms.discount_bp, 10'000));
  inv.discount_minor = -(usage_discount + adjustment_discount);
  if (inv.discount_minor != 0) {
    add_line("discount",
             "Discount " + FormatUnitPrice(terms.discount_bp * kMicroPerMinor / 100) + " %",
             inv.discount_minor);
  }
  const int64_t discounted_usage = inv.usage_minor - usage_discount;
  if (terms.commitment_minor > discounted_usage) {
    inv.commitment_minor = terms.commitment_minor - discounted_usage;
    add_line("commitment", "Committed spend not used", inv.commitment_minor);
  }
  const int64_t period_charge = discounted_usage + inv.commitment_minor;
  if (terms.minimum_charge_minor > period_charge) {
    inv.minimum_minor = terms.minimum_charge_minor - period_charge;
    add_line("minimum", "Minimum charge", inv.minimum_minor);
  }
  inv.total_minor = period_charge + inv.minimum_minor + inv.adjustments_minor - adjustment_discount;
  return inv;
}

Json InvoiceToJson(const Invoice& inv) {
  const int e = inv.terms.exponent;
  auto money = [&](int64_t minor) { return FormatAmount(minor, e); };
  Json lines = Json::array();
  for (const auto& l : inv.lines) {
    Json j = {{"kind", l.kind},
              {"description", l.description},
              {"amount_minor", l.amount_minor},
              {"amount", money(l.amount_minor)}};
    if (l.kind == "usage" || l.kind == "adjustment") {
      j["meter"] = l.meter;
      j["item"] = l.item;
      j["price_ref"] = l.price_ref;
      j["priced"] = l.priced;
      j["usage_period"] = PeriodName(Period{l.usage_period, 0});
      j["usage_period_start"] = l.usage_period;
      j["quantity"] = l.quantity;
      j["quantity_text"] = l.quantity_text;
      j["unit"] = l.unit;
      j["price_minor"] = l.price_text;
      j["records"] = l.records;
      Json projects = Json::array();
      for (const auto& s : l.by_project) {
        projects.push_back({{"project", s.name},
                            {"quantity", s.quantity},
                            {"amount_minor", s.amount_minor},
                            {"amount", money(s.amount_minor)}});
      }
      Json keys = Json::array();
      for (const auto& s : l.by_key) {
        keys.push_back({{"key_id", s.name},
                        {"quantity", s.quantity},
                        {"amount_minor", s.amount_minor},
                        {"amount", money(s.amount_minor)}});
      }
      j["by_project"] = std::move(projects);
      j["by_key"] = std::move(keys);
    }
    lines.push_back(std::move(j));
  }
  return {{"tenant_id", inv.tenant_id},
          {"period", PeriodName(inv.period)},
          {"period_start", inv.period.start_ms},
          {"period_end", inv.period.end_ms},
          {"period_start_date", DateOf(inv.period.start_ms)},
          {"period_end_date", DateOf(inv.period.end_ms)},
          {"currency", inv.terms.currency},
          {"currency_exponent", e},
          {"discount_bp", inv.terms.discount_bp},
          {"commitment_minor", inv.terms.commitment_minor},
          {"minimum_charge_minor", inv.terms.minimum_charge_minor},
          {"lines", std::move(lines)},
          {"usage_minor", inv.usage_minor},
          {"adjustments_minor", inv.adjustments_minor},
          {"discount_minor", inv.discount_minor},
          {"commitment_topup_minor", inv.commitment_minor},
          {"minimum_topup_minor", inv.minimum_minor},
          {"credits_minor", inv.credits_minor},
          {"total_minor", inv.total_minor},
          {"total", money(inv.total_minor)},
          {"records", inv.records}};
}

namespace {

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) {
    // A leading =, +, - or @ would be a formula to a spreadsheet.
    if (!s.empty() && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@')) return "'" + s;
    return s;
  }
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string Text(const Json& j, const char* name) {
  if (!j.contains(name)) return "";
  const Json& v = j.at(name);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return "";
}

}  // namespace

std::string InvoiceCsv(const Json& doc) {
  std::string out =
      "invoice,period,currency,row,kind,description,meter,item,usage_period,quantity,unit,"
      "price_minor,project,key_id,amount_minor,amount\r\n";
  const std::string head = CsvField(Text(doc, "number")) + "," + CsvField(Text(doc, "period")) +
                           "," + CsvField(Text(doc, "currency"));
  const int e = doc.contains("currency_exponent") ? doc.at("currency_exponent").get<int>() : 2;
  auto row = [&](const std::string& what, const Json& line, const std::string& quantity,
                 const std::string& project, const std::string& key, int64_t amount) {
    out += head + "," + what + "," + CsvField(Text(line, "kind")) + "," +
           CsvField(Text(line, "description")) + "," + CsvField(Text(line, "meter")) + "," +
           CsvField(Text(line, "item")) + "," + CsvField(Text(line, "usage_period")) + "," +
           CsvField(quantity) + "," + CsvField(Text(line, "unit")) + "," +
           CsvField(Text(line, "price_minor")) + "," + CsvField(project) + "," + CsvField(key) +
           "," + std::to_string(amount) + "," + FormatAmount(amount, e) + "\r\n";
  };
  if (doc.contains("lines")) {
    for (const auto& line : doc.at("lines"))
      row("line", line, Text(line, "quantity_text"), "", "",
          line.value("amount_minor", int64_t{0}));
    for (const auto& line : doc.at("lines")) {
      for (const auto& s : line.value("by_project", Json::array())) {
        row("project", line, std::to_string(s.value("quantity", int64_t{0})),
            s.value("project", std::string()), "", s.value("amount_minor", int64_t{0}));
      }
      for (const auto& s : line.value("by_key", Json::array())) {
        row("key", line, std::to_string(s.value("quantity", int64_t{0})), "",
            s.value("key_id", std::string()), s.value("amount_minor", int64_t{0}));
      }
    }
  }
  out += head + ",total,,,,,,,,,,," + std::to_string(doc.value("total_minor", int64_t{0})) + "," +
         FormatAmount(doc.value("total_minor", int64_t{0}), e) + "\r\n";
  return out;
}

}  // namespace atrium::billing
