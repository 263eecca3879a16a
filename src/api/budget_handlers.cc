// Budgets (/api/v1/tenants/{tenant_id}/budgets[/{budget_id}]): caps on what
// a tenant, one of its projects or one of its API keys spends per billing
// period. A tenant admin (or the platform admin) makes and changes them;
// whoever reads the tenant's billing reads them, with where each stands.
// The rules are src/billing/budget.h's; another tenant's id answers 404.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "billing/billing_service.h"
#include "billing/budget.h"
#include "billing/money.h"
#include "billing/period.h"
#include "crypto/ids.h"

namespace atrium::api {
namespace {

const std::vector<int64_t> kDefaultThresholds = {50, 80, 100};

// The thresholds of a body, when it has them: an array of integers.
Result<std::optional<std::vector<int64_t>>> ThresholdsOf(const Json& body) {
  if (!body.contains("thresholds")) return std::optional<std::vector<int64_t>>();
  const Json& list = body.at("thresholds");
  if (!list.is_array()) {
    return Error::InvalidArgument("'thresholds' must be an array of percentages");
  }
  std::vector<int64_t> out;
  for (const auto& t : list) {
    if (!t.is_number_integer()) {
      return Error::InvalidArgument("'thresholds' must be an array of whole percentages");
    }
    if (out.size() > billing::kMaxBudgetThresholds) break;
    out.push_back(t.get<int64_t>());
  }
  ATRIUM_RETURN_IF_ERROR(billing::ValidateThresholds(out));
  return std::optional<std::vector<int64_t>>(std::move(out));
}

Json BudgetView(const BudgetRecord& b, const BudgetStatus* s, int64_t now) {
  auto e = billing::CurrencyExponent(b.currency);
  const int exponent = e.has_value() ? *e : 2;
  const bool current = s != nullptr && now < s->period_end;
  const int64_t spent = current ? s->spent_minor : 0;
  const int64_t percent =
      b.amount_minor > 0 ? static_cast<int64_t>(static_cast<__int128>(spent) * 100 / b.amount_minor)
                         : 0;
  std::string state = "ok";
  if (billing::Exhausted(b, spent)) {
    state = b.hard ? "exceeded" : "over";
  } else if (billing::ReachedThreshold(b, spent) > 0) {
    state = "warning";
  }
  return {{"id", b.id},
          {"scope", b.scope},
          {"subject", b.subject.empty() ? Json(nullptr) : Json(b.subject)},
          {"currency", b.currency},
          {"amount_minor", b.amount_minor},
          {"amount", billing::FormatAmount(b.amount_minor, exponent)},
          {"thresholds", b.thresholds},
          {"hard", b.hard},
          {"period",
           current ? Json(billing::PeriodName({s->period_start, s->period_end})) : Json(nullptr)},
          {"spent_minor", spent},
          {"spent", billing::FormatAmount(spent, exponent)},
          {"percent", percent},
          {"state", state},
          {"notified_percent", current ? s->notified_percent : 0},
          {"counted_at", s != nullptr ? Json(FormatTimestamp(s->computed_at)) : Json(nullptr)},
          {"created_by", b.created_by},
          {"created_at", FormatTimestamp(b.created_at)},
          {"updated_at", FormatTimestamp(b.updated_at)}};
}

// A budget is changed by its tenant's admins themselves, not by a key they
// narrowed to some models or a time: such a key must not lift the cap its
// maker set.
Status UnrestrictedCaller(const Context& ctx) {
  if (ctx.principal->is_restricted_key()) {
    return Error::PermissionDenied(
        "a key limited to some models or with an expiry cannot change budgets: use an "
        "unrestricted credential");
  }
  return OkStatus();
}

// The prepaid budget is billing's, kept at the credit balance.
Status NotPrepaid(const BudgetRecord& b) {
  if (b.scope == "prepaid") {
    return Error::FailedPrecondition(
        "this budget is the tenant's prepaid credit balance, kept by billing: grant credits to "
        "raise it, or change the plan");
  }
  return OkStatus();
}

Result<Json> ViewOf(Context& ctx, const BudgetRecord& b) {
  ATRIUM_ASSIGN_OR_RETURN(auto statuses, ctx.services.store->ListBudgetStatuses(ctx.scope));
  for (const auto& s : statuses) {
    if (s.budget_id == b.id) return BudgetView(b, &s, ctx.services.clock->NowMillis());
  }
  return BudgetView(b, nullptr, ctx.services.clock->NowMillis());
}

}  // namespace

Result<http::Response> CreateBudget(Context& ctx) {
  if (ctx.services.billing == nullptr)
    return Error::Unavailable("this server does not run billing");
  ATRIUM_RETURN_IF_ERROR(UnrestrictedCaller(ctx));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto scope = r.String("scope", true, 16);
  auto subject = r.String("subject", false, 200);
  auto amount = r.Int("amount_minor", true, 1, billing::kMaxAmountMinor);
  auto hard = r.Bool("hard");
  r.IsNull("thresholds");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(auto thresholds, ThresholdsOf(body));
  BudgetRecord b;
  b.scope = *scope;
  b.subject = subject.value_or("");
  if (b.scope == "tenant") {
    if (!b.subject.empty()) {
      return Error::InvalidArgument("a tenant budget has no 'subject' (it caps the whole tenant)");
    }
  } else if (b.scope == "project") {
    if (b.subject.empty()) {
      return Error::InvalidArgument("a project budget names its project in 'subject'");
    }
    ATRIUM_RETURN_IF_ERROR(ctx.services.store->GetProject(ctx.scope, b.subject));
  } else if (b.scope == "key") {
    if (b.subject.empty()) {
      return Error::InvalidArgument("a key budget names the API key's id in 'subject'");
    }
    ATRIUM_RETURN_IF_ERROR(ctx.services.store->GetApiKey(ctx.scope, b.subject));
  } else {
    return Error::InvalidArgument("'scope' must be tenant, project or key");
  }
  ATRIUM_ASSIGN_OR_RETURN(b.currency, ctx.services.billing->CurrencyNow(ctx.scope.tenant_id));
  b.id = NewId("bud", *ctx.services.clock);
  b.amount_minor = *amount;
  b.thresholds = thresholds.value_or(kDefaultThresholds);
  b.hard = hard.value_or(true);
  b.created_by = ctx.principal->user_id;
  b.created_at = b.updated_at = ctx.services.clock->NowMillis();
  ctx.audit_target = "budget/" + b.id;
  ATRIUM_ASSIGN_OR_RETURN(b, ctx.services.store->CreateBudget(ctx.scope, b));
  ATRIUM_ASSIGN_OR_RETURN(Json view, ViewOf(ctx, b));
  return JsonResponse(201, view);
}

Result<http::Response> ListBudgets(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto budgets, ctx.services.store->ListBudgets(ctx.scope));
  ATRIUM_ASSIGN_OR_RETURN(auto statuses, ctx.services.store->ListBudgetStatuses(ctx.scope));
  const int64_t now = ctx.services.clock->NowMillis();
  Json items = Json::array();
  for (const auto& b : budgets) {
    const BudgetStatus* status = nullptr;
    for (const auto& s : statuses) {
      if (s.budget_id == b.id) status = &s;
    }
    items.push_back(BudgetView(b, status, now));
  }
  return JsonResponse(200, {{"items", items}});
}

Result<http::Response> GetBudget(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto b, ctx.services.store->GetBudget(ctx.scope, ctx.request.PathParam("budget_id")));
  ATRIUM_ASSIGN_OR_RETURN(Json view, ViewOf(ctx, b));
  return JsonResponse(200, view);
}

Result<http::Response> UpdateBudget(Context& ctx) {
  ATRIUM_RETURN_IF_ERROR(UnrestrictedCaller(ctx));
  ATRIUM_ASSIGN_OR_RETURN(
      auto b, ctx.services.store->GetBudget(ctx.scope, ctx.request.PathParam("budget_id")));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto amount = r.Int("amount_minor", false, 1, billing::kMaxAmountMinor);
  auto hard = r.Bool("hard");
  r.IsNull("thresholds");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(auto thresholds, ThresholdsOf(body));
  ATRIUM_RETURN_IF_ERROR(NotPrepaid(b));
  if (!amount && !hard && !thresholds) {
    return Error::InvalidArgument("nothing to change: give amount_minor, thresholds or hard");
  }
  if (amount) b.amount_minor = *amount;
  if (hard) b.hard = *hard;
  if (thresholds) b.thresholds = *thresholds;
  b.updated_at = ctx.services.clock->NowMillis();
  ctx.audit_target = "budget/" + b.id;
  ATRIUM_ASSIGN_OR_RETURN(b, ctx.services.store->UpdateBudget(ctx.scope, b));
  ATRIUM_ASSIGN_OR_RETURN(Json view, ViewOf(ctx, b));
  return JsonResponse(200, view);
}

Result<http::Response> DeleteBudget(Context& ctx) {
  const std::string id = ctx.request.PathParam("budget_id");
  ctx.audit_target = "budget/" + id;
  ATRIUM_RETURN_IF_ERROR(UnrestrictedCaller(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto b, ctx.services.store->GetBudget(ctx.scope, id));
  ATRIUM_RETURN_IF_ERROR(NotPrepaid(b));
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->DeleteBudget(ctx.scope, id));
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace atrium::api
