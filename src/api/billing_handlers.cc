// Billing: price books (/api/v1/price-books, the platform's), the default
// price book (/api/v1/billing/default-price-book), tenants' billing plans,
// drafts and invoices (/api/v1/tenants/{tenant_id}/billing/…,
// /invoices/…) and the books' proof (/api/v1/billing/verify). The rules are
// src/billing's; a tenant reads only its own plan and invoices — another
// tenant's id answers 404 like a missing one.
#include <algorithm>
#include <map>
#include <set>

#include "api/handler_util.h"
#include "api/handlers.h"
#include "billing/billing_service.h"
#include "billing/credit.h"
#include "billing/money.h"
#include "billing/period.h"
#include "billing/price_book.h"
#include "crypto/ids.h"

namespace atrium::api {
namespace {

constexpr size_t kMaxNoteChars = 500;

// The exponent of a stored currency (checked when it was stored).
int ExponentOf(const std::string& currency) {
  auto e = billing::CurrencyExponent(currency);
  return e.has_value() ? *e : 2;
}

Result<billing::BillingService*> BillingOf(const Context& ctx) {
  if (ctx.services.billing == nullptr) {
    return Error::Unavailable("this server does not run billing");
  }
  return ctx.services.billing;
}

// Stored entries as the API shows them, each with its pricing unit.
Json EntriesView(const std::string& stored) {
  if (auto j = ParseJson(stored); j.has_value()) {
    if (auto e = billing::ParsePriceEntries(*j, "entries"); e.has_value()) {
      return billing::PriceEntriesToJson(*e);
    }
  }
  return Json::array();
}

Json VersionView(const PriceBookVersion& v, int exponent) {
  Json entries = EntriesView(v.entries_json);
  return {{"version", v.version},
          {"effective_from", FormatTimestamp(v.effective_from)},
          {"minimum_charge_minor", v.minimum_charge_minor},
          {"minimum_charge", billing::FormatAmount(v.minimum_charge_minor, exponent)},
          {"entries", std::move(entries)},
          {"note", v.note},
          {"created_by", v.created_by},
          {"created_at", FormatTimestamp(v.created_at)}};
}

// The default plan's book in force now; "" when none.
std::string DefaultBookNow(const Context& ctx) {
  auto plans = ctx.services.store->ListBillingPlans(TenantScope::Of(kDefaultPlanTenantId));
  if (!plans.has_value()) return "";
  const int64_t now = ctx.services.clock->NowMillis();
  std::string book;
  for (const auto& p : *plans) {
    if (p.effective_from <= now) book = p.price_book_id;
  }
  return book;
}

Result<Json> BookView(const Context& ctx, const PriceBookRecord& b, bool with_versions) {
  ATRIUM_ASSIGN_OR_RETURN(auto versions,
                          ctx.services.store->ListPriceBookVersionsForPlatform(b.id));
  const int exponent = ExponentOf(b.currency);
  const int64_t now = ctx.services.clock->NowMillis();
  int64_t current = 0;
  for (const auto& v : versions) {
    if (v.effective_from <= now) current = v.version;
  }
  Json view = {{"id", b.id},
               {"name", b.name},
               {"currency", b.currency},
               {"default", DefaultBookNow(ctx) == b.id},
               {"current_version", current},
               {"latest_version", versions.empty() ? 0 : versions.back().version},
               {"created_by", b.created_by},
               {"created_at", FormatTimestamp(b.created_at)},
               {"updated_at", FormatTimestamp(b.updated_at)}};
  if (with_versions) {
    Json list = Json::array();
    for (const auto& v : versions) list.push_back(VersionView(v, exponent));
    view["versions"] = std::move(list);
  }
  return view;
}

// effective_from of a body: a timestamp at or after now; now when absent.
Result<int64_t> EffectiveFrom(const Context& ctx, const std::optional<std::string>& text) {
  const int64_t now = ctx.services.clock->NowMillis();
  if (!text.has_value()) return now;
  ATRIUM_ASSIGN_OR_RETURN(int64_t at, ParseTimestamp(*text, "effective_from"));
  if (at < now) {
    return Error::InvalidArgument(
        "effective_from is in the past: prices and plans take effect "
        "now or later, so a period already priced never changes");
  }
  return at;
}

// A version's entries from a body's "entries" field, in their stored form.
Result<std::string> EntriesText(const Json& body, const char* field) {
  if (!body.contains(field)) return std::string("[]");
  ATRIUM_ASSIGN_OR_RETURN(auto entries, billing::ParsePriceEntries(body.at(field), field));
  return billing::PriceEntriesToJson(entries, /*units=*/false).dump();
}

// A price book or tenant name: [a-z0-9][a-z0-9-]*, at most 63 characters.
Status ValidateBookName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 63 && name[0] != '-';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-');
  if (!ok) {
    return Error::InvalidArgument(
        "name must be 1 to 63 of a-z, 0-9 and '-', not starting with "
        "'-'");
  }
  return OkStatus();
}

Json PlanView(const BillingPlan& p, const std::string& currency) {
  const int exponent = ExponentOf(currency);
  Json entries = EntriesView(p.entries_json);
  return {{"version", p.version},
          {"effective_from", FormatTimestamp(p.effective_from)},
          {"price_book", p.price_book_id},
          {"currency", currency},
          {"anchor_day", p.anchor_day},
          {"discount_bp", p.discount_bp},
          {"commitment_minor", p.commitment_minor},
          {"commitment", billing::FormatAmount(p.commitment_minor, exponent)},
          {"prepaid", p.prepaid},
          {"entries", std::move(entries)},
          {"note", p.note},
          {"created_by", p.created_by},
          {"created_at", FormatTimestamp(p.created_at)}};
}

std::string CurrencyOf(const Context& ctx, const std::string& book_id) {
  auto b = ctx.services.store->GetPriceBookForPlatform(book_id);
  return b.has_value() ? b->currency : "";
}

Result<BillingPlan> PlanFromBody(Context& ctx, const std::string& tenant_id, bool is_default) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto book = r.String("price_book", true, 200);
  auto effective = r.String("effective_from", false, 64);
  std::optional<int64_t> anchor;
  std::optional<int64_t> discount;
  std::optional<int64_t> commitment;
  std::optional<bool> prepaid;
  std::optional<std::string> note;
  if (!is_default) {
    anchor = r.Int("anchor_day", false, billing::kMinAnchorDay, billing::kMaxAnchorDay);
    discount = r.Int("discount_bp", false, 0, 10'000);
    commitment = r.Int("commitment_minor", false, 0, billing::kMaxAmountMinor);
    prepaid = r.Bool("prepaid");
    note = r.String("note", false, kMaxNoteChars);
    r.IsNull("entries");
  }
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(PriceBookRecord b, ctx.services.store->GetPriceBookForPlatform(*book));
  BillingPlan plan;
  plan.tenant_id = tenant_id;
  ATRIUM_ASSIGN_OR_RETURN(plan.effective_from, EffectiveFrom(ctx, effective));
  plan.price_book_id = b.id;
  plan.anchor_day = anchor.value_or(0);
  if (plan.anchor_day == 0) {
    // Unsaid: what the tenant's plans said before, else the 1st.
    auto earlier = ctx.services.store->ListBillingPlans(TenantScope::Of(tenant_id));
    plan.anchor_day = earlier.has_value() && !earlier->empty() ? earlier->front().anchor_day : 1;
  }
  plan.discount_bp = discount.value_or(0);
  plan.commitment_minor = commitment.value_or(0);
  plan.prepaid = prepaid.value_or(false);
  ATRIUM_ASSIGN_OR_RETURN(plan.entries_json, EntriesText(body, "entries"));
  plan.note = note.value_or("");
  plan.created_by = ctx.principal->user_id;
  plan.created_at = ctx.services.clock->NowMillis();
  return plan;
}

}  // namespace

Result<http::Response> CreatePriceBook(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto name = r.String("name", true, 63);
  auto currency = r.String("currency", true, 3);
  auto effective = r.String("effective_from", false, 64);
  auto minimum = r.Int("minimum_charge_minor", false, 0, billing::kMaxAmountMinor);
  auto note = r.String("note", false, kMaxNoteChars);
  r.IsNull("entries");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(ValidateBookName(*name));
  ATRIUM_RETURN_IF_ERROR(billing::CurrencyExponent(*currency));
  if (!body.contains("entries")) return Error::InvalidArgument("missing required field 'entries'");
  PriceBookRecord b;
  b.id = NewId("pb", *ctx.services.clock);
  b.name = *name;
  b.currency = *currency;
  b.created_by = ctx.principal->user_id;
  b.created_at = b.updated_at = ctx.services.clock->NowMillis();
  PriceBookVersion v;
  ATRIUM_ASSIGN_OR_RETURN(v.effective_from, EffectiveFrom(ctx, effective));
  v.minimum_charge_minor = minimum.value_or(0);
  ATRIUM_ASSIGN_OR_RETURN(v.entries_json, EntriesText(body, "entries"));
  v.note = note.value_or("");
  v.created_by = b.created_by;
  v.created_at = b.created_at;
  ctx.audit_target = "price_book/" + b.id;
  ATRIUM_ASSIGN_OR_RETURN(
      b, ctx.services.store->CreatePriceBookForPlatform(b, v, ctx.services.clock->NowMillis()));
  ATRIUM_ASSIGN_OR_RETURN(Json view, BookView(ctx, b, true));
  return JsonResponse(201, view);
}

Result<http::Response> ListPriceBooks(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto books, ctx.services.store->ListPriceBooksForPlatform());
  Json items = Json::array();
  for (const auto& b : books) {
    ATRIUM_ASSIGN_OR_RETURN(Json view, BookView(ctx, b, false));
    items.push_back(std::move(view));
  }
  return JsonResponse(200, {{"items", items}});
}

Result<http::Response> GetPriceBook(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto b, ctx.services.store->GetPriceBookForPlatform(ctx.request.PathParam("book_id")));
  ATRIUM_ASSIGN_OR_RETURN(Json view, BookView(ctx, b, true));
  return JsonResponse(200, view);
}

Result<http::Response> AddPriceBookVersion(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto b, ctx.services.store->GetPriceBookForPlatform(ctx.request.PathParam("book_id")));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto effective = r.String("effective_from", false, 64);
  auto minimum = r.Int("minimum_charge_minor", false, 0, billing::kMaxAmountMinor);
  auto note = r.String("note", false, kMaxNoteChars);
  r.IsNull("entries");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  if (!body.contains("entries")) return Error::InvalidArgument("missing required field 'entries'");
  PriceBookVersion v;
  v.book_id = b.id;
  ATRIUM_ASSIGN_OR_RETURN(v.effective_from, EffectiveFrom(ctx, effective));
  v.minimum_charge_minor = minimum.value_or(0);
  ATRIUM_ASSIGN_OR_RETURN(v.entries_json, EntriesText(body, "entries"));
  v.note = note.value_or("");
  v.created_by = ctx.principal->user_id;
  v.created_at = ctx.services.clock->NowMillis();
  ctx.audit_target = "price_book/" + b.id;
  ATRIUM_ASSIGN_OR_RETURN(
      v, ctx.services.store->AddPriceBookVersionForPlatform(v, ctx.services.clock->NowMillis()));
  return JsonResponse(201, VersionView(v, ExponentOf(b.currency)));
}

Result<http::Response> GetDefaultPriceBook(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto plans, ctx.services.store->ListBillingPlans(TenantScope::Of(kDefaultPlanTenantId)));
  Json items = Json::array();
  for (const auto& p : plans) {
    items.push_back({{"version", p.version},
                     {"price_book", p.price_book_id},
                     {"effective_from", FormatTimestamp(p.effective_from)},
                     {"created_by", p.created_by}});
  }
  const std::string now = DefaultBookNow(ctx);
  return JsonResponse(
      200, {{"price_book", now.empty() ? Json(nullptr) : Json(now)}, {"versions", items}});
}

Result<http::Response> SetDefaultPriceBook(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(BillingPlan plan, PlanFromBody(ctx, kDefaultPlanTenantId, true));
  ctx.audit_target = "billing/default_price_book";
  ATRIUM_ASSIGN_OR_RETURN(
      plan, ctx.services.store->AddBillingPlanForPlatform(plan, ctx.services.clock->NowMillis()));
  return JsonResponse(201, {{"version", plan.version},
                            {"price_book", plan.price_book_id},
                            {"effective_from", FormatTimestamp(plan.effective_from)}});
}

Result<http::Response> SetBillingPlan(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(BillingPlan plan, PlanFromBody(ctx, ctx.scope.tenant_id, false));
  ctx.audit_target = "tenant/" + ctx.scope.tenant_id + "/billing_plan";
  ATRIUM_ASSIGN_OR_RETURN(
      plan, ctx.services.store->AddBillingPlanForPlatform(plan, ctx.services.clock->NowMillis()));
  return JsonResponse(201, PlanView(plan, CurrencyOf(ctx, plan.price_book_id)));
}

Result<http::Response> GetBillingPlan(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto plans, ctx.services.store->ListBillingPlans(ctx.scope));
  const int64_t now = ctx.services.clock->NowMillis();
  Json versions = Json::array();
  Json in_force = nullptr;
  std::string book_id;
  for (const auto& p : plans) {
    Json view = PlanView(p, CurrencyOf(ctx, p.price_book_id));
    if (p.effective_from <= now) {
      in_force = view;
      book_id = p.price_book_id;
    }
    versions.push_back(std::move(view));
  }
  // Without a plan of its own the tenant is billed on the default book.
  if (book_id.empty()) book_id = DefaultBookNow(ctx);
  Json book = nullptr;
  if (!book_id.empty()) {
    auto b = ctx.services.store->GetPriceBookForPlatform(book_id);
    if (b.has_value()) {
      ATRIUM_ASSIGN_OR_RETURN(auto all,
                              ctx.services.store->ListPriceBookVersionsForPlatform(b->id));
      const int exponent = ExponentOf(b->currency);
      Json current = nullptr;
      for (const auto& v : all) {
        if (v.effective_from <= now) current = VersionView(v, exponent);
      }
      book = {{"id", b->id}, {"name", b->name}, {"currency", b->currency}, {"in_force", current}};
    }
  }
  return JsonResponse(200, {{"in_force", in_force},
                            {"versions", versions},
                            {"price_book", book},
                            {"default_plan", in_force.is_null()}});
}

Result<http::Response> GetDraftInvoice(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* billing, BillingOf(ctx));
  const std::string period = QueryOf(ctx.request, "period");
  ATRIUM_ASSIGN_OR_RETURN(
      Json doc,
      billing->Invoice(ctx.scope.tenant_id,
                       period.empty() ? std::nullopt : std::optional<std::string>(period)));
  return JsonResponse(200, doc);
}

Result<http::Response> ListInvoices(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto invoices, ctx.services.store->ListInvoices(ctx.scope));
  Json items = Json::array();
  for (const auto& inv : invoices) {
    const int exponent = ExponentOf(inv.currency);
    items.push_back({{"id", inv.id},
                     {"number", billing::InvoiceNumberText(inv.number)},
                     {"period", billing::PeriodName({inv.period_start, inv.period_end})},
                     {"period_start", FormatTimestamp(inv.period_start)},
                     {"period_end", FormatTimestamp(inv.period_end)},
                     {"currency", inv.currency},
                     {"total_minor", inv.total_minor},
                     {"total", billing::FormatAmount(inv.total_minor, exponent)},
                     {"finalized_at", FormatTimestamp(inv.finalized_at)}});
  }
  return JsonResponse(200, {{"items", items}});
}

Result<http::Response> GetInvoice(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto inv, ctx.services.store->GetInvoice(ctx.scope, ctx.request.PathParam("invoice_id")));
  ATRIUM_ASSIGN_OR_RETURN(Json doc, ParseJson(inv.document));
  return JsonResponse(200, doc);
}

Result<http::Response> GetInvoiceCsv(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto inv, ctx.services.store->GetInvoice(ctx.scope, ctx.request.PathParam("invoice_id")));
  ATRIUM_ASSIGN_OR_RETURN(Json doc, ParseJson(inv.document));
  http::Response r;
  r.status = 200;
  r.content_type = "text/csv; charset=utf-8";
  r.headers.emplace_back(
      "Content-Disposition",
      "attachment; filename=\"" + billing::InvoiceNumberText(inv.number) + ".csv\"");
  r.body = billing::InvoiceCsv(doc);
  return r;
}

Result<http::Response> FinalizeInvoice(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* billing, BillingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto period = r.String("period", true, 7);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ctx.audit_target = "tenant/" + ctx.scope.tenant_id + "/invoice/" + *period;
  ATRIUM_ASSIGN_OR_RETURN(auto inv, billing->Finalize(ctx.scope.tenant_id, *period));
  ATRIUM_ASSIGN_OR_RETURN(Json doc, ParseJson(inv.document));
  return JsonResponse(201, doc);
}

Result<http::Response> VerifyBilling(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* billing, BillingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto period = r.String("period", true, 7);
  auto tenant = r.String("tenant", false, 200);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(billing::ParsePeriodName(*period, 1));
  std::vector<std::string> tenants;
  if (tenant.has_value()) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.tenants->Get(*tenant));
    tenants.push_back(t.id);
  } else {
    // Every tenant with usage near the period (anchors move it by up to
    // 27 days) or billing rows.
    ATRIUM_ASSIGN_OR_RETURN(billing::Period p, billing::ParsePeriodName(*period, 1));
    ATRIUM_ASSIGN_OR_RETURN(
        tenants, ctx.services.store->TenantsWithUsageForBilling(p.start_ms - 28 * 86'400'000LL,
                                                                p.end_ms + 28 * 86'400'000LL));
  }
  Json reports = Json::array();
  bool ok = true;
  for (const auto& id : tenants) {
    ATRIUM_ASSIGN_OR_RETURN(auto rep, billing->Verify(id, *period));
    ok = ok && rep.ok();
    reports.push_back({{"tenant_id", id},
                       {"period", billing::PeriodName(rep.period)},
                       {"records", rep.records},
                       {"rated_rows", rep.rated_rows},
                       {"pending", rep.pending},
                       {"invoice_final", rep.invoice_final},
                       {"invoice_number", rep.invoice_number},
                       {"ok", rep.ok()},
                       {"problems", rep.problems}});
  }
  return JsonResponse(200, {{"period", *period}, {"ok", ok}, {"tenants", reports}});
}

Json CreditView(const CreditGrant& g, int64_t now) {
  const int exponent = ExponentOf(g.currency);
  return {{"id", g.id},
          {"kind", g.kind},
          {"currency", g.currency},
          {"amount_minor", g.amount_minor},
          {"amount", billing::FormatAmount(g.amount_minor, exponent)},
          {"remaining_minor", g.remaining_minor},
          {"remaining", billing::FormatAmount(g.remaining_minor, exponent)},
          {"expires_at", g.expires_at == 0 ? Json(nullptr) : Json(FormatTimestamp(g.expires_at))},
          {"expired", g.expires_at != 0 && g.expires_at <= now},
          {"note", g.note},
          {"created_by", g.created_by},
          {"created_at", FormatTimestamp(g.created_at)}};
}

Result<http::Response> GrantCredit(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* billing, BillingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto amount = r.Int("amount_minor", true, 1, billing::kMaxAmountMinor);
  auto kind = r.String("kind", false, 16);
  auto expires = r.String("expires_at", false, 64);
  auto note = r.String("note", false, kMaxNoteChars);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  const int64_t now = ctx.services.clock->NowMillis();
  CreditGrant g;
  g.kind = kind.value_or("grant");
  if (g.kind != "grant" && g.kind != "prepaid") {
    return Error::InvalidArgument("'kind' must be grant or prepaid");
  }
  if (expires.has_value()) {
    ATRIUM_ASSIGN_OR_RETURN(g.expires_at, ParseTimestamp(*expires, "expires_at"));
    if (g.expires_at <= now) return Error::InvalidArgument("expires_at must be in the future");
  }
  ATRIUM_ASSIGN_OR_RETURN(g.currency, billing->CurrencyNow(ctx.scope.tenant_id));
  g.id = NewId("cr", *ctx.services.clock);
  g.amount_minor = *amount;
  g.note = note.value_or("");
  g.created_by = ctx.principal->user_id;
  g.created_at = now;
  ctx.audit_target = "tenant/" + ctx.scope.tenant_id + "/credit/" + g.id;
  ATRIUM_ASSIGN_OR_RETURN(g, ctx.services.store->CreateCreditGrant(ctx.scope, g));
  return JsonResponse(201, CreditView(g, now));
}

Result<http::Response> ListCredits(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto grants, ctx.services.store->ListCreditGrants(ctx.scope));
  const int64_t now = ctx.services.clock->NowMillis();
  Json items = Json::array();
  std::set<std::string> currencies;
  for (const auto& g : grants) {
    items.push_back(CreditView(g, now));
    currencies.insert(g.currency);
  }
  Json balances = Json::array();
  for (const auto& currency : currencies) {
    const int64_t live = billing::LiveBalance(grants, currency, now);
    balances.push_back({{"currency", currency},
                        {"balance_minor", live},
                        {"balance", billing::FormatAmount(live, ExponentOf(currency))}});
  }
  return JsonResponse(200, {{"items", items}, {"balances", balances}});
}

}  // namespace atrium::api
