// Budgets from the command line: budget create | list | get | update |
// delete. Tenant admins for their own tenant; operators with --tenant.
// Amounts are minor units of the tenant's billing currency (cents for USD).
#include <memory>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {
namespace {

const std::vector<Column> kBudgetColumns = {
    {"ID", "id"},       {"SCOPE", "scope"},       {"SUBJECT", "subject"}, {"AMOUNT", "amount"},
    {"SPENT", "spent"}, {"CURRENCY", "currency"}, {"PERCENT", "percent"}, {"STATE", "state"},
    {"HARD", "hard"},   {"PERIOD", "period"}};

struct BudgetArgs {
  std::string tenant;
  std::string id;
  std::string scope;
  std::string subject;
  int64_t amount_minor = 0;
  std::string thresholds;  // "50,80,100"
  std::string hard;        // "" | true | false
};

// "50,80,100" → [50, 80, 100]; the server checks the values.
Result<Json> ThresholdsOf(const std::string& text) {
  Json out = Json::array();
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(part, &used);
      if (used != part.size()) throw std::invalid_argument(part);
      out.push_back(v);
    } catch (const std::exception&) {
      return Error::InvalidArgument("--thresholds: whole percentages separated by commas, got '" +
                                    part + "'");
    }
  }
  return out;
}

Result<Json> BodyOf(const BudgetArgs& a, bool create) {
  Json body = Json::object();
  if (create) {
    body["scope"] = a.scope;
    if (!a.subject.empty()) body["subject"] = a.subject;
  }
  if (a.amount_minor != 0) body["amount_minor"] = a.amount_minor;
  if (!a.thresholds.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(body["thresholds"], ThresholdsOf(a.thresholds));
  }
  if (!a.hard.empty()) body["hard"] = a.hard == "true";
  return body;
}

int Show(Context& ctx, const Json& j) {
  if (ctx.json_output()) {
    ctx.PrintJson(j);
  } else {
    ctx.out() << FormatObjects(kBudgetColumns, {j});
  }
  return kExitOk;
}

int Create(Context& ctx, const BudgetArgs& a) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(a.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto body = BodyOf(a, true);
  if (!body.has_value()) return ctx.Fail(body.error());
  auto made = api->Post(*base + "/budgets", *body);
  if (!made.has_value()) return ctx.Fail(made.error());
  return Show(ctx, *made);
}

int List(Context& ctx, const BudgetArgs& a) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(a.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(*base + "/budgets");
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  ctx.out() << FormatObjects(kBudgetColumns, ItemsOf(*list, "items"));
  return kExitOk;
}

int Get(Context& ctx, const BudgetArgs& a) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(a.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto got = api->Get(*base + "/budgets/" + UrlEncode(a.id));
  if (!got.has_value()) return ctx.Fail(got.error());
  return Show(ctx, *got);
}

int Update(Context& ctx, const BudgetArgs& a) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(a.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto body = BodyOf(a, false);
  if (!body.has_value()) return ctx.Fail(body.error());
  auto changed = api->Put(*base + "/budgets/" + UrlEncode(a.id), *body);
  if (!changed.has_value()) return ctx.Fail(changed.error());
  return Show(ctx, *changed);
}

int Delete(Context& ctx, const BudgetArgs& a) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(a.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto gone = api->Delete(*base + "/budgets/" + UrlEncode(a.id));
  if (!gone.has_value()) return ctx.Fail(gone.error());
  if (!ctx.json_output()) ctx.out() << "Deleted budget " << a.id << "\n";
  return kExitOk;
}

void AddChangeOptions(CLI::App* cmd, BudgetArgs& a) {
  cmd->add_option("--amount-minor", a.amount_minor,
                  "Per billing period, in minor units of the tenant's currency (cents)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000'000'000}));
  cmd->add_option("--thresholds", a.thresholds,
                  "Percentages that notify, ascending (default 50,80,100)");
  cmd->add_option("--hard", a.hard, "true (default): refuse new spend at 100 %; false: only notify")
      ->check(CLI::IsMember({"true", "false"}));
}

}  // namespace

void AddBudgetCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* budget = AddGroup(app, "budget", "Caps on what a tenant, project or API key spends");
  auto c = std::make_shared<BudgetArgs>();
  CLI::App* create = budget->add_subcommand("create", "Make a budget for this billing period on");
  create->add_option("--scope", c->scope, "tenant, project or key")
      ->required()
      ->check(CLI::IsMember({"tenant", "project", "key"}));
  create->add_option("--subject", c->subject, "The project's name or the API key's id");
  create->add_option("--tenant", c->tenant, "Tenant id or name (default: your own)");
  AddChangeOptions(create, *c);
  create->get_option("--amount-minor")->required();
  verbs.Add(create, [c](Context& ctx) { return Create(ctx, *c); });
  auto l = std::make_shared<BudgetArgs>();
  CLI::App* list = budget->add_subcommand("list", "Budgets and what each counted this period");
  list->add_option("--tenant", l->tenant, "Tenant id or name (default: your own)");
  verbs.Add(list, [l](Context& ctx) { return List(ctx, *l); });
  auto g = std::make_shared<BudgetArgs>();
  CLI::App* get = budget->add_subcommand("get", "A budget");
  get->add_option("id", g->id, "The budget's id")->required();
  get->add_option("--tenant", g->tenant, "Tenant id or name (default: your own)");
  verbs.Add(get, [g](Context& ctx) { return Get(ctx, *g); });
  auto u = std::make_shared<BudgetArgs>();
  CLI::App* update = budget->add_subcommand("update", "Change a budget");
  update->add_option("id", u->id, "The budget's id")->required();
  update->add_option("--tenant", u->tenant, "Tenant id or name (default: your own)");
  AddChangeOptions(update, *u);
  verbs.Add(update, [u](Context& ctx) { return Update(ctx, *u); });
  auto d = std::make_shared<BudgetArgs>();
  CLI::App* del = budget->add_subcommand("delete", "Delete a budget");
  del->add_option("id", d->id, "The budget's id")->required();
  del->add_option("--tenant", d->tenant, "Tenant id or name (default: your own)");
  verbs.Add(del, [d](Context& ctx) { return Delete(ctx, *d); });
}

}  // namespace atrium::cli
