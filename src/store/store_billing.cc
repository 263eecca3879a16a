// The store's billing rows: price books, tenants' plans, rated usage and
// invoices (src/billing has the rules; docs/billing.md the promises). See
// store.h for the contracts.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using sql::Value;
using store_internal::GpuUsageFromRow;
using store_internal::kGpuUsageColumns;
using store_internal::kUsageColumns;
using store_internal::StatusOf;
using store_internal::UsageFromRow;

std::string P(size_t n) { return "$" + std::to_string(n); }

constexpr char kBookColumns[] = "id, name, currency, created_by, created_at, updated_at";
constexpr char kVersionColumns[] =
    "book_id, version, effective_from, minimum_charge_minor, entries, note, created_by, "
    "created_at";
constexpr char kPlanColumns[] =
    "tenant_id, version, effective_from, price_book_id, anchor_day, discount_bp, "
    "commitment_minor, entries, note, created_by, created_at, prepaid";
constexpr char kRatedColumns[] =
    "tenant_id, source, record_id, meter, item, price_ref, quantity, usage_at, usage_period, "
    "invoice_period, project, key_id, deployment_id, rated_at";
constexpr size_t kRatedColumnCount = 14;
constexpr char kInvoiceColumns[] =
    "id, number, tenant_id, period_start, period_end, currency, total_minor, document, "
    "finalized_at";

Status Done(Result<sql::Rows> r) {
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

PriceBookRecord BookFromRow(const Row& r) {
  PriceBookRecord b;
  b.id = r.Text(0);
  b.name = r.Text(1);
  b.currency = r.Text(2);
  b.created_by = r.Text(3);
  b.created_at = r.Int(4);
  b.updated_at = r.Int(5);
  return b;
}

PriceBookVersion VersionFromRow(const Row& r) {
  PriceBookVersion v;
  v.book_id = r.Text(0);
  v.version = r.Int(1);
  v.effective_from = r.Int(2);
  v.minimum_charge_minor = r.Int(3);
  v.entries_json = r.Text(4);
  v.note = r.Text(5);
  v.created_by = r.Text(6);
  v.created_at = r.Int(7);
  return v;
}

BillingPlan PlanFromRow(const Row& r) {
  BillingPlan p;
  p.tenant_id = r.Text(0);
  p.version = r.Int(1);
  p.effective_from = r.Int(2);
  p.price_book_id = r.Text(3);
  p.anchor_day = r.Int(4);
  p.discount_bp = r.Int(5);
  p.commitment_minor = r.Int(6);
  p.entries_json = r.Text(7);
  p.note = r.Text(8);
  p.created_by = r.Text(9);
  p.prepaid = r.Int(11) != 0;
  p.created_at = r.Int(10);
  return p;
}

RatedUsage RatedFromRow(const Row& r) {
  RatedUsage u;
  u.tenant_id = r.Text(0);
  u.source = r.Text(1);
  u.record_id = r.Text(2);
  u.meter = r.Text(3);
  u.item = r.Text(4);
  u.price_ref = r.Text(5);
  u.quantity = r.Int(6);
  u.usage_at = r.Int(7);
  u.usage_period = r.Int(8);
  u.invoice_period = r.Int(9);
  u.project = r.Text(10);
  u.key_id = r.Text(11);
  u.deployment_id = r.Text(12);
  return u;
}

InvoiceRecord InvoiceFromRow(const Row& r) {
  return {r.Text(0), r.Int(1), r.Text(2), r.Int(3), r.Int(4),
          r.Text(5), r.Int(6), r.Text(7), r.Int(8)};
}

// Billing writes (rating, finalising) are serialised by one lock, so no
// usage is rated into a period while it is finalised. SQLite's write
// transactions are serial already.
Status LockBilling(sql::Connection& c) {
  if (c.dialect() != sql::Dialect::kPostgres) return OkStatus();
  return Done(c.Exec("LOCK TABLE billing_accounts IN SHARE ROW EXCLUSIVE MODE", {}));
}

Status CheckEffective(int64_t effective_from, int64_t now, int64_t latest, const char* what) {
  if (effective_from < now) {
    return Error::FailedPrecondition(std::string(what) +
                                     " cannot take effect in the past: a change never rewrites "
                                     "usage already priced (effective_from must be now or later)");
  }
  // At the same time as the latest is allowed: the later version wins.
  if (latest >= 0 && effective_from < latest) {
    return Error::FailedPrecondition(std::string(what) +
                                     " must take effect no earlier than the latest version, "
                                     "which takes effect at " +
                                     std::to_string(latest));
  }
  return OkStatus();
}

Status InsertVersionOn(sql::Connection& c, const PriceBookVersion& v) {
  return Done(c.Exec(std::string("INSERT INTO price_book_versions (") + kVersionColumns +
                         ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                     {v.book_id, v.version, v.effective_from, v.minimum_charge_minor,
                      v.entries_json, v.note, v.created_by, v.created_at}));
}

// A tenant's rated rows counted in one invoice period, summed per price,
// item, usage period, project and key.
Result<std::vector<RatedGroup>> RatedGroupsOn(sql::Connection& c, const std::string& tenant_id,
                                              int64_t invoice_period) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      c.Exec("SELECT price_ref, meter, item, usage_period, project, key_id, SUM(quantity), "
             "COUNT(*) FROM rated_usage WHERE tenant_id = $1 AND invoice_period = $2 GROUP BY "
             "price_ref, meter, item, usage_period, project, key_id ORDER BY price_ref, meter, "
             "item, usage_period, project, key_id",
             {tenant_id, invoice_period}));
  std::vector<RatedGroup> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) {
    out.push_back(
        {r.Text(0), r.Text(1), r.Text(2), r.Int(3), r.Text(4), r.Text(5), r.Int(6), r.Int(7)});
  }
  return out;
}

// Priced quantities counted in invoices before `invoice_period`, per price
// and usage period.
Result<std::vector<RatedGroup>> InvoicedBeforeOn(sql::Connection& c, const std::string& tenant_id,
                                                 int64_t invoice_period) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      c.Exec("SELECT price_ref, usage_period, SUM(quantity), COUNT(*) FROM rated_usage WHERE "
             "tenant_id = $1 AND invoice_period < $2 AND price_ref <> '' GROUP BY price_ref, "
             "usage_period ORDER BY price_ref, usage_period",
             {tenant_id, invoice_period}));
  std::vector<RatedGroup> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) {
    RatedGroup g;
    g.price_ref = r.Text(0);
    g.usage_period = r.Int(1);
    g.quantity = r.Int(2);
    g.records = r.Int(3);
    out.push_back(std::move(g));
  }
  return out;
}

Status MarkRatedOn(sql::Connection& c, const char* table, const std::vector<std::string>& ids) {
  for (size_t start = 0; start < ids.size(); start += store_internal::kInListChunk) {
    std::vector<Value> params;
    const std::string in = store_internal::AppendInList(
        ids, start, std::min(ids.size(), start + store_internal::kInListChunk), params);
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("UPDATE ") + table + " SET rated = 1 WHERE id IN (" + in + ")", params));
  }
  return OkStatus();
}

// The INSERT of `rows` rated rows, written once per row count (as usage
// records are); a row already stored is skipped.
constexpr size_t kRatedRowsPerInsert = 64;  // 896 parameters
const std::string& RatedInsertSql(size_t rows) {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> out(kRatedRowsPerInsert + 1);
    for (size_t n = 1; n <= kRatedRowsPerInsert; ++n) {
      std::string q = std::string("INSERT INTO rated_usage (") + kRatedColumns + ") VALUES ";
      size_t param = 0;
      for (size_t row = 0; row < n; ++row) {
        q += row ? ", (" : "(";
        for (size_t col = 0; col < kRatedColumnCount; ++col) {
          if (col) q += ", ";
          q += P(++param);
        }
        q += ")";
      }
      q += " ON CONFLICT (tenant_id, source, record_id, meter) DO NOTHING";
      out[n] = std::move(q);
    }
    return out;
  }();
  return texts.at(rows);
}

size_t RowsInNextInsert(size_t left) {
  if (left >= kRatedRowsPerInsert) return kRatedRowsPerInsert;
  size_t rows = 1;
  while (rows * 2 <= left) rows *= 2;
  return rows;
}

}  // namespace

Result<PriceBookRecord> Store::CreatePriceBookForPlatform(PriceBookRecord book,
                                                          PriceBookVersion first, int64_t now) {
  ATRIUM_RETURN_IF_ERROR(CheckEffective(first.effective_from, now, -1, "a price book"));
  return db_->Transact<PriceBookRecord>([&](sql::Connection& c) -> Result<PriceBookRecord> {
    auto inserted = c.Exec(
        std::string("INSERT INTO price_books (") + kBookColumns +
            ") VALUES ($1, $2, $3, $4, $5, $6)",
        {book.id, book.name, book.currency, book.created_by, book.created_at, book.updated_at});
    if (!inserted.has_value()) {
      Error e = std::move(inserted).error();
      if (e.code == ErrorCode::kAlreadyExists) {
        e.message = "a price book named '" + book.name + "' exists already";
      }
      return e;
    }
    first.book_id = book.id;
    first.version = 1;
    ATRIUM_RETURN_IF_ERROR(InsertVersionOn(c, first));
    return book;
  });
}

Result<std::vector<PriceBookRecord>> Store::ListPriceBooksForPlatform() {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT ") + kBookColumns + " FROM price_books ORDER BY name", {}));
  std::vector<PriceBookRecord> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(BookFromRow(r));
  return out;
}

Result<PriceBookRecord> Store::GetPriceBookForPlatform(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kBookColumns +
                                                   " FROM price_books WHERE id = $1 OR name = $1",
                                               {id}));
  if (rows.rows.empty()) return Error::NotFound("price book not found");
  return BookFromRow(rows.rows[0]);
}

Result<std::vector<PriceBookVersion>> Store::ListPriceBookVersionsForPlatform(
    const std::string& book_id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kVersionColumns +
                                        " FROM price_book_versions WHERE book_id = $1 ORDER BY "
                                        "version",
                                    {book_id}));
  std::vector<PriceBookVersion> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(VersionFromRow(r));
  return out;
}

Result<PriceBookVersion> Store::AddPriceBookVersionForPlatform(PriceBookVersion v, int64_t now) {
  return db_->Transact<PriceBookVersion>([&](sql::Connection& c) -> Result<PriceBookVersion> {
    ATRIUM_ASSIGN_OR_RETURN(auto book,
                            c.Exec("SELECT id FROM price_books WHERE id = $1", {v.book_id}));
    if (book.rows.empty()) return Error::NotFound("price book not found");
    ATRIUM_ASSIGN_OR_RETURN(auto latest,
                            c.Exec("SELECT version, effective_from FROM price_book_versions WHERE "
                                   "book_id = $1 ORDER BY version DESC LIMIT 1",
                                   {v.book_id}));
    const int64_t last_version = latest.rows.empty() ? 0 : latest.rows[0].Int(0);
    const int64_t last_from = latest.rows.empty() ? -1 : latest.rows[0].Int(1);
    ATRIUM_RETURN_IF_ERROR(CheckEffective(v.effective_from, now, last_from, "a price version"));
    v.version = last_version + 1;
    ATRIUM_RETURN_IF_ERROR(InsertVersionOn(c, v));
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("UPDATE price_books SET updated_at = $2 WHERE id = $1", {v.book_id, now}));
    return v;
  });
}

Result<BillingPlan> Store::AddBillingPlanForPlatform(BillingPlan plan, int64_t now) {
  return db_->Transact<BillingPlan>([&](sql::Connection& c) -> Result<BillingPlan> {
    if (plan.tenant_id != kDefaultPlanTenantId) {
      ATRIUM_ASSIGN_OR_RETURN(auto tenant,
                              c.Exec("SELECT id FROM tenants WHERE id = $1", {plan.tenant_id}));
      if (tenant.rows.empty()) return Error::NotFound("tenant not found");
    }
    ATRIUM_ASSIGN_OR_RETURN(
        auto book, c.Exec("SELECT currency FROM price_books WHERE id = $1", {plan.price_book_id}));
    if (book.rows.empty()) return Error::NotFound("price book not found");
    const std::string currency = book.rows[0].Text(0);
    ATRIUM_ASSIGN_OR_RETURN(
        auto latest,
        c.Exec("SELECT p.version, p.effective_from, p.anchor_day, b.currency FROM billing_plans p "
               "JOIN price_books b ON b.id = p.price_book_id WHERE p.tenant_id = $1 ORDER BY "
               "p.version DESC LIMIT 1",
               {plan.tenant_id}));
    int64_t last_from = -1;
    plan.version = 1;
    if (!latest.rows.empty()) {
      const Row& l = latest.rows[0];
      plan.version = l.Int(0) + 1;
      last_from = l.Int(1);
      if (l.Int(2) != plan.anchor_day) {
        return Error::FailedPrecondition("the tenant's billing periods start on day " +
                                         std::to_string(l.Int(2)) +
                                         " of the month; a plan cannot move them");
      }
      if (l.Text(3) != currency) {
        return Error::FailedPrecondition("the tenant is billed in " + l.Text(3) + "; price book " +
                                         plan.price_book_id + " is in " + currency);
      }
    } else if (plan.anchor_day != 1) {
      // Usage from before the first plan is billed in periods from the
      // 1st; those periods stay. (Rating checks the anchor it used under
      // the same lock, so no record is rated with the old one after this.)
      ATRIUM_RETURN_IF_ERROR(LockBilling(c));
      ATRIUM_ASSIGN_OR_RETURN(
          auto used, c.Exec("SELECT (SELECT COUNT(*) FROM usage_records WHERE tenant_id = $1) + "
                            "(SELECT COUNT(*) FROM gpu_usage_records WHERE tenant_id = $1)",
                            {plan.tenant_id}));
      if (used.rows.at(0).Int(0) > 0) {
        return Error::FailedPrecondition(
            "the tenant has usage billed in periods from the 1st "
            "already: its anchor day stays 1");
      }
    }
    ATRIUM_RETURN_IF_ERROR(CheckEffective(plan.effective_from, now, last_from, "a billing plan"));
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO billing_plans (") + kPlanColumns +
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
               {plan.tenant_id, plan.version, plan.effective_from, plan.price_book_id,
                plan.anchor_day, plan.discount_bp, plan.commitment_minor, plan.entries_json,
                plan.note, plan.created_by, plan.created_at, int64_t{plan.prepaid ? 1 : 0}}));
    return plan;
  });
}

Result<std::vector<BillingPlan>> Store::ListBillingPlans(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kPlanColumns +
                                                   " FROM billing_plans WHERE tenant_id = $1 "
                                                   "ORDER BY version",
                                               {scope.tenant_id}));
  std::vector<BillingPlan> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(PlanFromRow(r));
  return out;
}

Result<PricingRows> Store::PricingRowsForBilling() {
  return db_->Transact<PricingRows>([&](sql::Connection& c) -> Result<PricingRows> {
    PricingRows out;
    ATRIUM_ASSIGN_OR_RETURN(
        auto books,
        c.Exec(std::string("SELECT ") + kBookColumns + " FROM price_books ORDER BY id", {}));
    for (const auto& r : books.rows) out.books.push_back(BookFromRow(r));
    ATRIUM_ASSIGN_OR_RETURN(auto versions,
                            c.Exec(std::string("SELECT ") + kVersionColumns +
                                       " FROM price_book_versions ORDER BY book_id, version",
                                   {}));
    for (const auto& r : versions.rows) out.versions.push_back(VersionFromRow(r));
    ATRIUM_ASSIGN_OR_RETURN(auto plans,
                            c.Exec(std::string("SELECT ") + kPlanColumns +
                                       " FROM billing_plans ORDER BY tenant_id, version",
                                   {}));
    for (const auto& r : plans.rows) out.plans.push_back(PlanFromRow(r));
    return out;
  });
}

Result<Store::UnratedUsage> Store::UnratedUsageForBilling(size_t limit, bool tokens) {
  UnratedUsage out;
  const auto n = static_cast<int64_t>(limit);
  ATRIUM_ASSIGN_OR_RETURN(auto token_rows,
                          db_->Exec(std::string("SELECT ") + kUsageColumns +
                                        " FROM usage_records WHERE rated = 0 ORDER BY created_at, "
                                        "id LIMIT $1",
                                    {tokens ? n : int64_t{0}}));
  for (const auto& r : token_rows.rows) out.tokens.push_back(UsageFromRow(r));
  ATRIUM_ASSIGN_OR_RETURN(auto gpu, db_->Exec(std::string("SELECT ") + kGpuUsageColumns +
                                                  " FROM gpu_usage_records WHERE rated = 0 "
                                                  "ORDER BY created_at, id LIMIT $1",
                                              {n}));
  for (const auto& r : gpu.rows) out.gpu.push_back(GpuUsageFromRow(r));
  return out;
}

Result<std::vector<UsageRecord>> Store::UnratedTokenTotalsForBilling() {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT tenant_id, key_id, model, deployment_id, SUM(input_tokens), "
                           "SUM(output_tokens), SUM(cached_tokens), MAX(created_at) FROM "
                           "usage_records WHERE rated = 0 GROUP BY tenant_id, key_id, model, "
                           "deployment_id",
                           {}));
  std::vector<UsageRecord> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) {
    UsageRecord u;
    u.tenant_id = r.Text(0);
    u.key_id = r.Text(1);
    u.model = r.Text(2);
    u.deployment_id = r.Text(3);
    u.id = "unrated:" + u.tenant_id + "/" + u.key_id + "/" + u.model + "/" + u.deployment_id;
    u.input_tokens = r.Int(4);
    u.output_tokens = r.Int(5);
    u.cached_tokens = r.Int(6);
    u.created_at = r.Int(7);
    u.status = "completed";
    out.push_back(std::move(u));
  }
  return out;
}

Status Store::StoreRatedUsageForBilling(const std::vector<std::string>& token_record_ids,
                                        const std::vector<std::string>& gpu_record_ids,
                                        const std::vector<RatedUsage>& rows,
                                        const std::map<std::string, int64_t>& anchors,
                                        int64_t now) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(LockBilling(c));
    std::map<std::string, int64_t> finalized;  // tenant → finalized_through
    for (const auto& r : rows) {
      if (finalized.count(r.tenant_id) != 0) continue;
      ATRIUM_ASSIGN_OR_RETURN(
          auto plan, c.Exec("SELECT anchor_day FROM billing_plans WHERE tenant_id = $1 LIMIT 1",
                            {r.tenant_id}));
      const int64_t anchor = plan.rows.empty() ? 1 : plan.rows[0].Int(0);
      auto used = anchors.find(r.tenant_id);
      if (anchor != (used == anchors.end() ? 1 : used->second)) {
        return Error::FailedPrecondition("tenant " + r.tenant_id +
                                         "'s billing periods changed while it was rated");
      }
      ATRIUM_ASSIGN_OR_RETURN(
          auto account,
          c.Exec("SELECT finalized_through FROM billing_accounts WHERE tenant_id = $1",
                 {r.tenant_id}));
      finalized[r.tenant_id] = account.rows.empty() ? 0 : account.rows[0].Int(0);
    }
    for (size_t done = 0; done < rows.size();) {
      const size_t n = RowsInNextInsert(rows.size() - done);
      std::vector<Value> params;
      params.reserve(n * kRatedColumnCount);
      for (size_t i = done; i < done + n; ++i) {
        const RatedUsage& r = rows[i];
        // Usage of a finalised period counts in the first open one.
        const int64_t through = finalized[r.tenant_id];
        const int64_t invoice_period = r.usage_period < through ? through : r.usage_period;
        params.emplace_back(r.tenant_id);
        params.emplace_back(r.source);
        params.emplace_back(r.record_id);
        params.emplace_back(r.meter);
        params.emplace_back(r.item);
        params.emplace_back(r.price_ref);
        params.emplace_back(r.quantity);
        params.emplace_back(r.usage_at);
        params.emplace_back(r.usage_period);
        params.emplace_back(invoice_period);
        params.emplace_back(r.project);
        params.emplace_back(r.key_id);
        params.emplace_back(r.deployment_id);
        params.emplace_back(now);
      }
      ATRIUM_RETURN_IF_ERROR(c.Exec(RatedInsertSql(n), params));
      done += n;
    }
    ATRIUM_RETURN_IF_ERROR(MarkRatedOn(c, "usage_records", token_record_ids));
    ATRIUM_RETURN_IF_ERROR(MarkRatedOn(c, "gpu_usage_records", gpu_record_ids));
    return true;
  }));
}

Result<std::vector<RatedGroup>> Store::RatedGroups(const TenantScope& scope,
                                                   int64_t invoice_period) {
  auto c = db_->Acquire();
  return RatedGroupsOn(*c, scope.tenant_id, invoice_period);
}

Result<std::vector<RatedGroup>> Store::InvoicedBefore(const TenantScope& scope,
                                                      int64_t invoice_period) {
  auto c = db_->Acquire();
  return InvoicedBeforeOn(*c, scope.tenant_id, invoice_period);
}

Result<int64_t> Store::FinalizedThrough(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT finalized_through FROM billing_accounts WHERE tenant_id = $1",
                           {scope.tenant_id}));
  return rows.rows.empty() ? int64_t{0} : rows.rows[0].Int(0);
}

Result<InvoiceRecord> Store::FinalizeInvoiceForBilling(const std::string& tenant_id,
                                                       int64_t period_start, int64_t period_end,
                                                       const std::string& invoice_id,
                                                       const InvoiceCompute& compute, int64_t now) {
  return db_->Transact<InvoiceRecord>([&](sql::Connection& c) -> Result<InvoiceRecord> {
    ATRIUM_RETURN_IF_ERROR(LockBilling(c));
    ATRIUM_ASSIGN_OR_RETURN(
        auto account,
        c.Exec("SELECT finalized_through FROM billing_accounts WHERE tenant_id = $1", {tenant_id}));
    const int64_t through = account.rows.empty() ? 0 : account.rows[0].Int(0);
    if (through > period_start) {
      return Error::FailedPrecondition("the tenant's invoices are final up to " +
                                       std::to_string(through) + " already");
    }
    ATRIUM_ASSIGN_OR_RETURN(
        auto earlier, c.Exec("SELECT MIN(invoice_period) FROM rated_usage WHERE tenant_id = $1 AND "
                             "invoice_period >= $2 AND invoice_period < $3",
                             {tenant_id, through, period_start}));
    if (!earlier.rows.empty() && !earlier.rows[0].IsNull(0)) {
      return Error::FailedPrecondition("an earlier period of the tenant, from " +
                                       std::to_string(earlier.rows[0].Int(0)) +
                                       ", has usage and is not final: invoices are final in order");
    }
    // The groups, read inside this transaction (the lock keeps rating out).
    ATRIUM_ASSIGN_OR_RETURN(auto groups, RatedGroupsOn(c, tenant_id, period_start));
    ATRIUM_ASSIGN_OR_RETURN(auto prior, InvoicedBeforeOn(c, tenant_id, period_start));
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("UPDATE invoice_sequence SET last_number = last_number + 1 WHERE id = 1", {}));
    ATRIUM_ASSIGN_OR_RETURN(auto seq,
                            c.Exec("SELECT last_number FROM invoice_sequence WHERE id = 1", {}));
    const int64_t number = seq.rows.at(0).Int(0);
    ATRIUM_ASSIGN_OR_RETURN(
        auto grants, c.Exec(std::string("SELECT ") + store_internal::kCreditColumns +
                                " FROM credit_grants WHERE tenant_id = $1 AND remaining_minor > 0 "
                                "ORDER BY created_at, id",
                            {tenant_id}));
    std::vector<CreditGrant> credits;
    credits.reserve(grants.rows.size());
    for (const auto& r : grants.rows) credits.push_back(store_internal::CreditFromRow(r));
    ATRIUM_ASSIGN_OR_RETURN(auto doc, compute(number, groups, prior, credits));
    for (const auto& a : doc.credits) {
      ATRIUM_ASSIGN_OR_RETURN(
          auto taken, c.Exec("UPDATE credit_grants SET remaining_minor = remaining_minor - $1 "
                             "WHERE id = $2 AND tenant_id = $3 AND remaining_minor >= $1",
                             {a.amount_minor, a.grant_id, tenant_id}));
      if (taken.affected != 1 || a.amount_minor <= 0) {
        return Error::InvalidArgument("credit grant " + a.grant_id + " cannot pay " +
                                      std::to_string(a.amount_minor));
      }
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("INSERT INTO credit_applications (invoice_id, grant_id, tenant_id, amount_minor, "
                 "applied_at) VALUES ($1, $2, $3, $4, $5)",
                 {invoice_id, a.grant_id, tenant_id, a.amount_minor, now}));
    }
    InvoiceRecord inv{invoice_id,   number,          tenant_id,    period_start, period_end,
                      doc.currency, doc.total_minor, doc.document, now};
    auto inserted = c.Exec(std::string("INSERT INTO invoices (") + kInvoiceColumns +
                               ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                           {inv.id, inv.number, inv.tenant_id, inv.period_start, inv.period_end,
                            inv.currency, inv.total_minor, inv.document, inv.finalized_at});
    if (!inserted.has_value()) {
      Error e = std::move(inserted).error();
      if (e.code == ErrorCode::kAlreadyExists) {
        return Error::FailedPrecondition("the tenant's invoice for this period is final already");
      }
      return e;
    }
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(account.rows.empty()
                   ? "INSERT INTO billing_accounts (tenant_id, finalized_through) VALUES ($1, $2)"
                   : "UPDATE billing_accounts SET finalized_through = $2 WHERE tenant_id = $1",
               {tenant_id, period_end}));
    return inv;
  });
}

Result<std::vector<Store::BillingTenant>> Store::BillingTenantsForBilling() {
  std::map<std::string, BillingTenant> by_id;
  auto at = [&](const std::string& id) -> BillingTenant& {
    auto& t = by_id[id];
    t.tenant_id = id;
    return t;
  };
  ATRIUM_ASSIGN_OR_RETURN(auto accounts,
                          db_->Exec("SELECT tenant_id, finalized_through FROM billing_accounts"));
  for (const auto& r : accounts.rows) at(r.Text(0)).finalized_through = r.Int(1);
  ATRIUM_ASSIGN_OR_RETURN(
      auto plans,
      db_->Exec("SELECT tenant_id, MIN(effective_from) FROM billing_plans GROUP BY tenant_id"));
  for (const auto& r : plans.rows) at(r.Text(0)).first_plan_from = r.Int(1);
  ATRIUM_ASSIGN_OR_RETURN(
      auto open, db_->Exec("SELECT r.tenant_id, MIN(r.invoice_period) FROM rated_usage r LEFT JOIN "
                           "billing_accounts a ON a.tenant_id = r.tenant_id WHERE "
                           "r.invoice_period >= COALESCE(a.finalized_through, 0) GROUP BY "
                           "r.tenant_id"));
  for (const auto& r : open.rows) at(r.Text(0)).first_open_usage = r.Int(1);
  // Which of them still exist (evicted ones bill only what they used).
  std::vector<std::string> ids;
  ids.reserve(by_id.size());
  for (auto& [id, t] : by_id) {
    t.live = id == kDefaultPlanTenantId;
    ids.push_back(id);
  }
  for (size_t start = 0; start < ids.size(); start += store_internal::kInListChunk) {
    std::vector<Value> params;
    const std::string in = store_internal::AppendInList(
        ids, start, std::min(ids.size(), start + store_internal::kInListChunk), params);
    ATRIUM_ASSIGN_OR_RETURN(auto live,
                            db_->Exec("SELECT id FROM tenants WHERE id IN (" + in + ")", params));
    for (const auto& r : live.rows) by_id[r.Text(0)].live = true;
  }
  std::vector<BillingTenant> out;
  out.reserve(by_id.size());
  for (auto& [id, t] : by_id) out.push_back(std::move(t));
  return out;
}

Result<std::vector<std::string>> Store::TenantsWithUsageForBilling(int64_t from, int64_t to) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec("SELECT tenant_id FROM usage_records WHERE created_at >= $1 AND created_at < $2 "
                "UNION SELECT tenant_id FROM gpu_usage_records WHERE from_ms >= $1 AND from_ms < "
                "$2 UNION SELECT tenant_id FROM rated_usage WHERE usage_at >= $1 AND usage_at < $2 "
                "ORDER BY tenant_id",
                {from, to}));
  std::vector<std::string> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(r.Text(0));
  return out;
}

Result<std::vector<InvoiceRecord>> Store::ListInvoices(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kInvoiceColumns +
                                                   " FROM invoices WHERE tenant_id = $1 ORDER "
                                                   "BY period_start DESC",
                                               {scope.tenant_id}));
  std::vector<InvoiceRecord> out;
  out.reserve(rows.rows.size());
  for (const auto& r : rows.rows) out.push_back(InvoiceFromRow(r));
  return out;
}

Result<InvoiceRecord> Store::GetInvoice(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kInvoiceColumns +
                                                   " FROM invoices WHERE tenant_id = $1 AND id "
                                                   "= $2",
                                               {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("invoice not found");
  return InvoiceFromRow(rows.rows[0]);
}

Result<Store::UsageForVerify> Store::UsageForVerifyForBilling(const TenantScope& scope,
                                                              int64_t from, int64_t to) {
  return db_->Transact<UsageForVerify>([&](sql::Connection& c) -> Result<UsageForVerify> {
    UsageForVerify out;
    ATRIUM_ASSIGN_OR_RETURN(auto tokens,
                            c.Exec(std::string("SELECT ") + kUsageColumns +
                                       ", rated FROM usage_records WHERE tenant_id = $1 AND "
                                       "created_at >= $2 AND created_at < $3 ORDER BY id",
                                   {scope.tenant_id, from, to}));
    for (const auto& r : tokens.rows) {
      out.tokens.push_back(UsageFromRow(r));
      if (r.Int(18) == 0) out.unrated.push_back(out.tokens.back().id);
    }
    ATRIUM_ASSIGN_OR_RETURN(
        auto gpu, c.Exec(std::string("SELECT ") + kGpuUsageColumns +
                             ", rated FROM gpu_usage_records WHERE tenant_id = $1 AND "
                             "subject_kind = 'allocation' AND from_ms >= $2 AND from_ms < $3 "
                             "ORDER BY id",
                         {scope.tenant_id, from, to}));
    for (const auto& r : gpu.rows) {
      out.gpu.push_back(GpuUsageFromRow(r));
      if (r.Int(15) == 0) out.unrated.push_back(out.gpu.back().id);
    }
    ATRIUM_ASSIGN_OR_RETURN(auto rated,
                            c.Exec(std::string("SELECT ") + kRatedColumns +
                                       " FROM rated_usage WHERE tenant_id = $1 AND usage_at >= $2 "
                                       "AND usage_at < $3 ORDER BY source, record_id, meter",
                                   {scope.tenant_id, from, to}));
    for (const auto& r : rated.rows) out.rated.push_back(RatedFromRow(r));
    return out;
  });
}

}  // namespace atrium
