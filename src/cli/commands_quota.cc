// quota set | get: a tenant's guarantee and limit per GPU model and kind.
// Amounts are in GPUs on the command line ("4", "0.5", "250m") and in
// milli-GPU on the wire.
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {

// Shared with `project quota`: prints quota rows as a table.
void PrintQuotaRows(Context& ctx, const Json& rows) {
  std::vector<std::vector<std::string>> table;
  auto gpus = [](const Json& v) {
    return v.is_number_integer() ? FormatMilliGpus(v.get<int64_t>()) : std::string("-");
  };
  // The figures are those the scheduler enforces; a note says when the
  // tenant's quota clamps a project's split (the operator lowered it).
  bool notes = false;
  for (const auto& q : rows) {
    std::string note;
    const Json& requested = FieldAt(q, "requested");
    if (FieldAt(q, "over_committed") == Json(true) && requested.is_object()) {
      note = "over-committed: set " + gpus(FieldAt(requested, "guarantee_milli")) + "/" +
             gpus(FieldAt(requested, "limit_milli")) + ", clamped to the tenant's quota";
    }
    const Json& clamped = FieldAt(q, "clamped_projects");
    if (clamped.is_array() && !clamped.empty()) {
      std::string names;
      for (const auto& p : clamped) names += (names.empty() ? "" : ", ") + p.get<std::string>();
      note = "clamps projects " + names;
    }
    notes = notes || !note.empty();
    table.push_back({StringAt(q, "model"), StringAt(q, "kind"), gpus(FieldAt(q, "guarantee_milli")),
                     gpus(FieldAt(q, "limit_milli")), gpus(FieldAt(q, "used_milli")),
                     EscapeForTerminal(note)});
  }
  if (!notes) {
    for (auto& row : table) row.pop_back();
    ctx.out() << FormatTable({"MODEL", "KIND", "GUARANTEE", "LIMIT", "USED"}, table);
    return;
  }
  ctx.out() << FormatTable({"MODEL", "KIND", "GUARANTEE", "LIMIT", "USED", "NOTE"}, table);
}

// The body of a quota PUT from the shared options; a usage error as Error.
Result<Json> QuotaBody(const std::string& model, const std::string& kind,
                       const std::string& guarantee, const std::string& limit) {
  ATRIUM_ASSIGN_OR_RETURN(int64_t g, ParseMilliGpus(guarantee));
  ATRIUM_ASSIGN_OR_RETURN(int64_t l, ParseMilliGpus(limit.empty() ? guarantee : limit));
  if (l < g) return Error::InvalidArgument("--limit must not be below --guarantee");
  return Json{{"model", model}, {"kind", kind}, {"guarantee_milli", g}, {"limit_milli", l}};
}

namespace {

// A tenant's quota list (what GET and PUT .../quotas answer), as JSON or a table.
int PrintQuotas(Context& ctx, const Json& quotas) {
  if (ctx.json_output()) {
    ctx.PrintJson(quotas);
  } else {
    PrintQuotaRows(ctx, FieldAt(quotas, "items"));
  }
  return kExitOk;
}

struct SetArgs {
  std::string tenant;
  std::string model;
  std::string kind = "gpu";
  std::string guarantee;
  std::string limit;
};

int Set(Context& ctx, const SetArgs& args) {
  auto body = QuotaBody(args.model, args.kind, args.guarantee, args.limit);
  if (!body.has_value()) return ctx.Usage(body.error().message);
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(args.tenant);
  if (!id.has_value()) return ctx.Fail(id.error());
  auto quotas = api->Put("/api/v1/tenants/" + UrlEncode(*id) + "/quotas", *body);
  if (!quotas.has_value()) return ctx.Fail(quotas.error());
  return PrintQuotas(ctx, *quotas);
}

int Get(Context& ctx, const std::string& tenant) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto quotas = api->Get(*base + "/quotas");
  if (!quotas.has_value()) return ctx.Fail(quotas.error());
  return PrintQuotas(ctx, *quotas);
}

}  // namespace

void AddQuotaOptions(CLI::App* command, std::string& model, std::string& kind,
                     std::string& guarantee, std::string& limit) {
  command->add_option("--model", model, "GPU model, e.g. H100-80GB")->required();
  command->add_option("--kind", kind, "Allocation kind the quota is for (a gang uses gpu)")
      ->check(CLI::IsMember({"gpu", "mig", "share", "node"}))
      ->capture_default_str();
  command->add_option("--guarantee", guarantee, "GPUs always available, e.g. 4, 0.5 or 250m")
      ->required();
  command->add_option("--limit", limit, "At most this many GPUs (default: the guarantee)");
}

void AddQuotaCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* quota = AddGroup(app, "quota", "Tenant quotas per GPU model and kind");

  auto set_args = std::make_shared<SetArgs>();
  CLI::App* set = quota->add_subcommand(
      "set", "Set a tenant's guarantee and limit for one GPU model and kind (0 0 removes it)");
  set->add_option("tenant", set_args->tenant, "Tenant id or name")->required();
  AddQuotaOptions(set, set_args->model, set_args->kind, set_args->guarantee, set_args->limit);
  verbs.Add(set, [set_args](Context& ctx) { return Set(ctx, *set_args); });

  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = quota->add_subcommand("get", "Show a tenant's quotas and what it uses");
  get->add_option("tenant", *get_arg, "Tenant id or name (default: your own)");
  verbs.Add(get, [get_arg](Context& ctx) { return Get(ctx, *get_arg); });
}

}  // namespace atrium::cli
