#include "billing/credit.h"

#include <algorithm>

namespace atrium::billing {

std::vector<CreditGrant> UsableCredits(std::vector<CreditGrant> grants, const std::string& currency,
                                       const Period& period) {
  std::erase_if(grants, [&](const CreditGrant& g) {
    return g.currency != currency || g.remaining_minor <= 0 || g.created_at >= period.end_ms ||
           (g.expires_at != 0 && g.expires_at < period.end_ms);
  });
  std::sort(grants.begin(), grants.end(), [](const CreditGrant& a, const CreditGrant& b) {
    const int64_t ea = a.expires_at == 0 ? INT64_MAX : a.expires_at;
    const int64_t eb = b.expires_at == 0 ? INT64_MAX : b.expires_at;
    if (ea != eb) return ea < eb;
    if (a.created_at != b.created_at) return a.created_at < b.created_at;
    return a.id < b.id;
  });
  return grants;
}

std::vector<CreditApplication> ApplyCredits(Invoice& invoice,
                                            const std::vector<CreditGrant>& usable) {
  std::vector<CreditApplication> out;
  for (const auto& g : usable) {
    if (invoice.total_minor <= 0) break;
    const int64_t paid = std::min(g.remaining_minor, invoice.total_minor);
    if (paid <= 0) continue;
    InvoiceLine line;
    line.kind = "credit";
    line.description = (g.kind == "prepaid" ? "Prepaid credit " : "Credit grant ") + g.id +
                       (g.note.empty() ? "" : " (" + g.note + ")");
    line.usage_period = invoice.period.start_ms;
    line.amount_minor = -paid;
    invoice.lines.push_back(std::move(line));
    invoice.credits_minor -= paid;
    invoice.total_minor -= paid;
    out.push_back({"", g.id, g.tenant_id, paid, 0});
  }
  return out;
}

int64_t LiveBalance(const std::vector<CreditGrant>& grants, const std::string& currency,
                    int64_t now) {
  int64_t balance = 0;
  for (const auto& g : grants) {
    if (g.currency != currency || g.remaining_minor <= 0) continue;
    if (g.expires_at != 0 && g.expires_at <= now) continue;
    balance += g.remaining_minor;
  }
  return balance;
}

}  // namespace atrium::billing
