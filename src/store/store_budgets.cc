// The store's budget and credit rows: budgets, where each stands, what
// gateways hold against them, and credit grants (src/billing/budget.h and
// credit.h have the rules; docs/billing.md the promises). See store.h for
// the contracts.
#include <cstdlib>
#include <utility>

#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using store_internal::AppendAuditOn;
using store_internal::ExpectOneRowOn;
using store_internal::StatusOf;

constexpr char kBudgetColumns[] =
    "id, tenant_id, scope, subject, currency, amount_minor, thresholds, hard, created_by, "
    "created_at, updated_at";
constexpr char kStatusColumns[] =
    "budget_id, tenant_id, period_start, period_end, spent_minor, notified_percent, computed_at";

// Delete holds of gateways silent this long: gone for good.
constexpr int64_t kForgetHoldsMs = 3'600'000;

std::string ThresholdsText(const std::vector<int64_t>& thresholds) {
  std::string out;
  for (int64_t t : thresholds) {
    if (!out.empty()) out += ',';
    out += std::to_string(t);
  }
  return out;
}

std::vector<int64_t> ThresholdsOf(const std::string& text) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    out.push_back(std::strtoll(text.substr(start, comma - start).c_str(), nullptr, 10));
    start = comma + 1;
  }
  return out;
}

BudgetRecord BudgetFromRow(const Row& r) {
  BudgetRecord b;
  b.id = r.Text(0);
  b.tenant_id = r.Text(1);
  b.scope = r.Text(2);
  b.subject = r.Text(3);
  b.currency = r.Text(4);
  b.amount_minor = r.Int(5);
  b.thresholds = ThresholdsOf(r.Text(6));
  b.hard = r.Int(7) != 0;
  b.created_by = r.Text(8);
  b.created_at = r.Int(9);
  b.updated_at = r.Int(10);
  return b;
}

BudgetStatus StatusFromRow(const Row& r) {
  BudgetStatus s;
  s.budget_id = r.Text(0);
  s.tenant_id = r.Text(1);
  s.period_start = r.Int(2);
  s.period_end = r.Int(3);
  s.spent_minor = r.Int(4);
  s.notified_percent = r.Int(5);
  s.computed_at = r.Int(6);
  return s;
}

Result<std::vector<BudgetRecord>> BudgetsOn(sql::Connection& c, const std::string& where,
                                            const std::vector<sql::Value>& params) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, c.Exec(std::string("SELECT ") + kBudgetColumns +
                                                " FROM budgets " + where + " ORDER BY id",
                                            params));
  std::vector<BudgetRecord> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(BudgetFromRow(r));
  return out;
}

Result<std::vector<BudgetStatus>> StatusesOn(sql::Connection& c, const std::string& where,
                                             const std::vector<sql::Value>& params) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, c.Exec(std::string("SELECT ") + kStatusColumns + " FROM budget_status " + where +
                            " ORDER BY budget_id",
                        params));
  std::vector<BudgetStatus> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(StatusFromRow(r));
  return out;
}

}  // namespace

namespace store_internal {

const char kCreditColumns[] =
    "id, tenant_id, kind, currency, amount_minor, remaining_minor, expires_at, note, created_by, "
    "created_at";

CreditGrant CreditFromRow(const sql::Row& r) {
  CreditGrant g;
  g.id = r.Text(0);
  g.tenant_id = r.Text(1);
  g.kind = r.Text(2);
  g.currency = r.Text(3);
  g.amount_minor = r.Int(4);
  g.remaining_minor = r.Int(5);
  g.expires_at = r.Int(6);
  g.note = r.Text(7);
  g.created_by = r.Text(8);
  g.created_at = r.Int(9);
  return g;
}

}  // namespace store_internal

Result<CreditGrant> Store::CreateCreditGrant(const TenantScope& scope, const CreditGrant& grant) {
  CreditGrant g = grant;
  g.tenant_id = scope.tenant_id;
  g.remaining_minor = g.amount_minor;
  return db_->Transact<CreditGrant>([&](sql::Connection& c) -> Result<CreditGrant> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO credit_grants (") + store_internal::kCreditColumns +
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
               {g.id, g.tenant_id, g.kind, g.currency, g.amount_minor, g.remaining_minor,
                g.expires_at, g.note, g.created_by, g.created_at}));
    return g;
  });
}

Result<std::vector<CreditGrant>> Store::ListCreditGrants(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + store_internal::kCreditColumns +
                                        " FROM credit_grants WHERE tenant_id = $1 "
                                        "ORDER BY created_at, id",
                                    {scope.tenant_id}));
  std::vector<CreditGrant> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(store_internal::CreditFromRow(r));
  return out;
}

Result<std::vector<CreditApplication>> Store::CreditApplicationsOf(const TenantScope& scope,
                                                                   const std::string& invoice_id) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT invoice_id, grant_id, tenant_id, amount_minor, applied_at FROM "
                           "credit_applications WHERE tenant_id = $1 AND invoice_id = $2 "
                           "ORDER BY grant_id",
                           {scope.tenant_id, invoice_id}));
  std::vector<CreditApplication> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) {
    out.push_back({r.Text(0), r.Text(1), r.Text(2), r.Int(3), r.Int(4)});
  }
  return out;
}

Status Store::SetPrepaidBudgetForBilling(const std::string& tenant_id,
                                         std::optional<int64_t> amount, const std::string& currency,
                                         int64_t now) {
  const std::string id = "bud_prepaid_" + tenant_id;
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    if (!amount.has_value()) {
      ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budgets WHERE id = $1", {id}));
      ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budget_status WHERE budget_id = $1", {id}));
      ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budget_holds WHERE budget_id = $1", {id}));
      return true;
    }
    ATRIUM_ASSIGN_OR_RETURN(
        auto had, c.Exec("SELECT amount_minor, currency FROM budgets WHERE id = $1", {id}));
    if (!had.rows.empty()) {
      if (had.rows[0].Int(0) != *amount || had.rows[0].Text(1) != currency) {
        ATRIUM_RETURN_IF_ERROR(c.Exec(
            "UPDATE budgets SET amount_minor = $1, currency = $2, updated_at = $3 WHERE id = $4",
            {*amount, currency, now, id}));
      }
      return true;
    }
    // Only for a tenant that exists: an evicted tenant's plans stay (billing
    // records), its budgets do not.
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO budgets (") + kBudgetColumns +
                   ") SELECT $1, $2, 'prepaid', '', $3, $4, '80,100', 1, 'system:billing', $5, $5 "
                   "WHERE EXISTS (SELECT 1 FROM tenants WHERE id = $2)",
               {id, tenant_id, currency, *amount, now}));
    return true;
  }));
}

Result<BudgetRecord> Store::CreateBudget(const TenantScope& scope, const BudgetRecord& budget) {
  BudgetRecord b = budget;
  b.tenant_id = scope.tenant_id;
  return db_->Transact<BudgetRecord>([&](sql::Connection& c) -> Result<BudgetRecord> {
    auto inserted = c.Exec(std::string("INSERT INTO budgets (") + kBudgetColumns +
                               ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                           {b.id, b.tenant_id, b.scope, b.subject, b.currency, b.amount_minor,
                            ThresholdsText(b.thresholds), int64_t{b.hard ? 1 : 0}, b.created_by,
                            b.created_at, b.updated_at});
    if (!inserted.has_value()) {
      Error e = std::move(inserted).error();
      if (e.code == ErrorCode::kAlreadyExists) {
        e.message = "the " + b.scope + (b.subject.empty() ? "" : " '" + b.subject + "'") +
                    " has a budget already: change that one";
      }
      return e;
    }
    return b;
  });
}

Result<BudgetRecord> Store::UpdateBudget(const TenantScope& scope, const BudgetRecord& budget) {
  return db_->Transact<BudgetRecord>([&](sql::Connection& c) -> Result<BudgetRecord> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(
        c,
        "UPDATE budgets SET amount_minor = $1, thresholds = $2, hard = $3, updated_at = $4 "
        "WHERE id = $5 AND tenant_id = $6",
        {budget.amount_minor, ThresholdsText(budget.thresholds), int64_t{budget.hard ? 1 : 0},
         budget.updated_at, budget.id, scope.tenant_id},
        "budget"));
    ATRIUM_ASSIGN_OR_RETURN(auto rows, BudgetsOn(c, "WHERE id = $1", {budget.id}));
    return rows.at(0);
  });
}

Status Store::DeleteBudget(const TenantScope& scope, const std::string& id) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(c, "DELETE FROM budgets WHERE id = $1 AND tenant_id = $2",
                                          {id, scope.tenant_id}, "budget"));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budget_status WHERE budget_id = $1", {id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budget_holds WHERE budget_id = $1", {id}));
    return true;
  }));
}

Result<BudgetRecord> Store::GetBudget(const TenantScope& scope, const std::string& id) {
  auto conn = db_->Acquire();
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, BudgetsOn(*conn, "WHERE id = $1 AND tenant_id = $2", {id, scope.tenant_id}));
  if (rows.empty()) return Error::NotFound("budget not found");
  return rows.front();
}

Result<std::vector<BudgetRecord>> Store::ListBudgets(const TenantScope& scope) {
  auto conn = db_->Acquire();
  return BudgetsOn(*conn, "WHERE tenant_id = $1", {scope.tenant_id});
}

Result<std::vector<BudgetStatus>> Store::ListBudgetStatuses(const TenantScope& scope) {
  auto conn = db_->Acquire();
  return StatusesOn(*conn, "WHERE tenant_id = $1", {scope.tenant_id});
}

Result<std::vector<BudgetRecord>> Store::BudgetsForBilling() {
  auto conn = db_->Acquire();
  return BudgetsOn(*conn, "", {});
}

Result<std::vector<BudgetStatus>> Store::BudgetStatusesForBilling() {
  auto conn = db_->Acquire();
  return StatusesOn(*conn, "", {});
}

Status Store::StoreBudgetStatusesForBilling(const std::vector<BudgetStatus>& statuses,
                                            std::vector<AuditRecord> crossings) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    for (const auto& s : statuses) {
      ATRIUM_ASSIGN_OR_RETURN(auto exists,
                              c.Exec("SELECT 1 FROM budgets WHERE id = $1", {s.budget_id}));
      if (exists.rows.empty()) continue;
      ATRIUM_RETURN_IF_ERROR(
          c.Exec(std::string("INSERT INTO budget_status (") + kStatusColumns +
                     ") VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (budget_id) DO UPDATE SET "
                     "period_start = excluded.period_start, period_end = excluded.period_end, "
                     "spent_minor = excluded.spent_minor, notified_percent = "
                     "excluded.notified_percent, computed_at = excluded.computed_at",
                 {s.budget_id, s.tenant_id, s.period_start, s.period_end, s.spent_minor,
                  s.notified_percent, s.computed_at}));
    }
    for (auto& a : crossings) ATRIUM_RETURN_IF_ERROR(AppendAuditOn(c, std::move(a)));
    return true;
  }));
}

Result<Store::BudgetSnapshot> Store::SyncBudgetHoldsForGateway(const std::string& holder,
                                                               const std::vector<BudgetHold>& holds,
                                                               int64_t now, int64_t fresh_ms) {
  if (holder.empty()) return Error::InvalidArgument("a budget hold needs its holder");
  return db_->Transact<BudgetSnapshot>([&](sql::Connection& c) -> Result<BudgetSnapshot> {
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budget_holds WHERE holder = $1 OR updated_at < $2",
                                  {holder, now - kForgetHoldsMs}));
    for (const auto& h : holds) {
      if (h.amount_minor <= 0) continue;
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("INSERT INTO budget_holds (holder, budget_id, amount_minor, updated_at) "
                 "VALUES ($1, $2, $3, $4)",
                 {holder, h.budget_id, h.amount_minor, now}));
    }
    BudgetSnapshot snap;
    ATRIUM_ASSIGN_OR_RETURN(snap.budgets, BudgetsOn(c, "", {}));
    ATRIUM_ASSIGN_OR_RETURN(snap.statuses, StatusesOn(c, "", {}));
    ATRIUM_ASSIGN_OR_RETURN(
        auto others,
        c.Exec("SELECT budget_id, SUM(amount_minor), COUNT(*) FROM budget_holds WHERE holder <> "
               "$1 AND updated_at >= $2 GROUP BY budget_id",
               {holder, now - fresh_ms}));
    for (const auto& r : others.rows) snap.others[r.Text(0)] = {r.Int(1), r.Int(2)};
    return snap;
  });
}

}  // namespace atrium
