// A tenant's side of the inference gateway: entitlement grant | revoke |
// list (which models it may call), limit get | set (request, token,
// concurrency and queue limits of the tenant or one key) and usage list |
// summary | refusals (what it used, and what was refused; each tenant sees
// only its own; the GPU usage verbs are in commands_metering.cc).
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace atrium::cli {
namespace {

// --- entitlement

struct EntitlementArgs {
  std::string tenant;
  std::string model;
};

std::string EntitlementPath(const std::string& base, const std::string& model) {
  return base + "/entitlements/" + UrlEncode(model);
}

int Grant(Context& ctx, const EntitlementArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto granted = api->Put(EntitlementPath(*base, args.model), Json::object());
  if (!granted.has_value()) return ctx.Fail(granted.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*granted);
  } else {
    ctx.out() << "Tenant " << EscapeForTerminal(StringAt(*granted, "tenant_id")) << " may call "
              << EscapeForTerminal(args.model) << ".\n";
  }
  return kExitOk;
}

int Revoke(Context& ctx, const EntitlementArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto gone = api->Delete(EntitlementPath(*base, args.model));
  if (!gone.has_value()) return ctx.Fail(gone.error());
  if (!ctx.json_output()) ctx.out() << "Revoked the entitlement to " << args.model << ".\n";
  return kExitOk;
}

int ListEntitlements(Context& ctx, const std::string& tenant) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(*base + "/entitlements");
  if (!list.has_value()) return ctx.Fail(list.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*list);
    return kExitOk;
  }
  std::vector<Json> items;
  for (const auto& e : FieldAt(*list, "items")) items.push_back(e);
  ctx.out() << FormatObjects({{"MODEL", "model"}, {"GRANTED", "created_at"}}, items);
  return kExitOk;
}

// --- limit

constexpr const char* kLimitFields[] = {"requests_per_minute", "tokens_per_minute",
                                        "max_concurrent", "max_queued"};

void PrintLimits(Context& ctx, const Json& list) {
  if (ctx.json_output()) {
    ctx.PrintJson(list);
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : FieldAt(list, "items")) {
    Json key = FieldAt(l, "key_id");
    std::vector<std::string> row = {key.is_string() ? key.get<std::string>() : "(tenant)"};
    for (const char* field : kLimitFields) {
      Json v = FieldAt(l, field);
      row.push_back(v.is_number_integer() && v.get<int64_t>() == 0 ? "-" : CellText(v));
    }
    row.push_back(CellText(FieldAt(l, "priority")));
    row.push_back(CellText(FieldAt(l, "updated_at")));
    rows.push_back(std::move(row));
  }
  ctx.out() << FormatTable({"KEY", "RPM", "TPM", "CONCURRENT", "QUEUED", "PRIORITY", "UPDATED"},
                           rows);
}

int GetLimits(Context& ctx, const std::string& tenant) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto list = api->Get(*base + "/gateway-limits");
  if (!list.has_value()) return ctx.Fail(list.error());
  PrintLimits(ctx, *list);
  return kExitOk;
}

struct SetLimitArgs {
  std::string tenant;
  std::string key;
  // -1: not given, keep the current value.
  int64_t values[4] = {-1, -1, -1, -1};
  std::string priority;  // "" keep, "none" clear
};

int SetLimits(Context& ctx, const SetLimitArgs& args) {
  bool any = !args.priority.empty();
  for (int64_t v : args.values) any = any || v >= 0;
  if (!any) return ctx.Usage("nothing to set: give --rpm, --tpm, --max-concurrent or --max-queued");
  if (!args.priority.empty() && args.key.empty()) {
    return ctx.Usage("--priority is a key's default class: use it with --key");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  // The PUT replaces the row: start from the current one so that a flag
  // not given keeps its value.
  auto current = api->Get(*base + "/gateway-limits");
  if (!current.has_value()) return ctx.Fail(current.error());
  Json row;
  for (const auto& l : FieldAt(*current, "items")) {
    Json key = FieldAt(l, "key_id");
    if ((args.key.empty() && key.is_null()) || (key.is_string() && key == args.key)) row = l;
  }
  Json body = Json::object();
  for (size_t i = 0; i < std::size(kLimitFields); ++i) {
    Json was = FieldAt(row, kLimitFields[i]);
    body[kLimitFields[i]] =
        args.values[i] >= 0 ? args.values[i] : (was.is_number_integer() ? was.get<int64_t>() : 0);
  }
  std::string path = *base + "/gateway-limits";
  if (!args.key.empty()) {
    Json was = FieldAt(row, "priority");
    std::string priority = args.priority.empty() ? (was.is_string() ? was.get<std::string>() : "")
                           : args.priority == "none" ? ""
                                                     : args.priority;
    if (!priority.empty()) body["priority"] = priority;
    path = *base + "/keys/" + UrlEncode(args.key) + "/gateway-limits";
  }
  auto updated = api->Put(path, body);
  if (!updated.has_value()) return ctx.Fail(updated.error());
  PrintLimits(ctx, *updated);
  return kExitOk;
}

// --- usage

struct UsageArgs {
  std::string tenant;
  std::string from;
  std::string to;
  std::string model;
  std::string key;
  std::string deployment;
  std::string group_by;
  ListArgs list;
};

const std::vector<Column> kUsageColumns = {{"TIME", "created_at"},   {"ID", "id"},
                                           {"MODEL", "model"},       {"KEY", "key_id"},
                                           {"API", "api"},           {"STATUS", "status"},
                                           {"HTTP", "http_status"},  {"IN", "input_tokens"},
                                           {"OUT", "output_tokens"}, {"CACHED", "cached_tokens"},
                                           {"QUEUE_MS", "queue_ms"}, {"TTFT_MS", "ttft_ms"},
                                           {"TOTAL_MS", "total_ms"}};

int ListUsage(Context& ctx, const UsageArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  std::string target = WithQuery(*base + "/usage", {{"from", args.from},
                                                    {"to", args.to},
                                                    {"model", args.model},
                                                    {"key_id", args.key},
                                                    {"deployment", args.deployment}});
  return RunList(ctx, *api, target, args.list, kUsageColumns);
}

int Summary(Context& ctx, const UsageArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto summary = api->Get(WithQuery(*base + "/usage/summary", {{"group_by", args.group_by},
                                                               {"from", args.from},
                                                               {"to", args.to},
                                                               {"model", args.model},
                                                               {"key_id", args.key},
                                                               {"deployment", args.deployment}}));
  if (!summary.has_value()) return ctx.Fail(summary.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*summary);
    return kExitOk;
  }
  std::string group = args.group_by == "key"          ? "KEY"
                      : args.group_by == "model"      ? "MODEL"
                      : args.group_by == "deployment" ? "DEPLOYMENT"
                                                      : "";
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : FieldAt(*summary, "items")) {
    Json g = FieldAt(t, "group");
    rows.push_back({g.is_string() ? g.get<std::string>() : "total",
                    CellText(FieldAt(t, "requests")), CellText(FieldAt(t, "input_tokens")),
                    CellText(FieldAt(t, "output_tokens")), CellText(FieldAt(t, "cached_tokens"))});
  }
  ctx.out() << FormatTable({group.empty() ? "GROUP" : group, "REQUESTS", "INPUT_TOKENS",
                            "OUTPUT_TOKENS", "CACHED_TOKENS"},
                           rows);
  // Beside the tokens, the GPU time held over the same period (per
  // deployment when the tokens are, else per GPU model): GPU usage has no
  // API key and its models are GPU models, so only without those filters.
  if (!args.key.empty() || !args.model.empty()) return kExitOk;
  const std::string gpu_group = args.group_by == "deployment" ? "deployment" : "model";
  auto gpu = api->Get(WithQuery(*base + "/usage/gpu/summary", {{"group_by", gpu_group},
                                                               {"from", args.from},
                                                               {"to", args.to},
                                                               {"deployment", args.deployment}}));
  if (!gpu.has_value()) return ctx.Fail(gpu.error());
  auto gpu_text = GpuSummaryText(*gpu, gpu_group);
  if (!gpu_text.has_value()) return ctx.Fail(gpu_text.error());
  ctx.out() << "\n" << *gpu_text << "(atrium usage gpu-summary, atrium usage gpu)\n";
  return kExitOk;
}

// Requests refused before a model server saw them, counted per key and reason.
int Refusals(Context& ctx, const UsageArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.TenantBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto refusals = api->Get(WithQuery(*base + "/usage/refusals",
                                     {{"from", args.from}, {"to", args.to}, {"key_id", args.key}}));
  if (!refusals.has_value()) return ctx.Fail(refusals.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*refusals);
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : FieldAt(*refusals, "items")) {
    rows.push_back({CellText(FieldAt(t, "key_id")), CellText(FieldAt(t, "reason")),
                    CellText(FieldAt(t, "count")), CellText(FieldAt(t, "first_minute_at")),
                    CellText(FieldAt(t, "last_minute_at"))});
  }
  ctx.out() << FormatTable({"KEY", "REASON", "COUNT", "FIRST_MINUTE", "LAST_MINUTE"}, rows);
  return kExitOk;
}

void AddUsageFilters(CLI::App* command, UsageArgs& args) {
  command->add_option("--tenant", args.tenant, "Tenant id or name (default: your own)");
  command->add_option("--from", args.from,
                      "Only requests at or after this time: RFC 3339 or ms since the epoch");
  command->add_option("--to", args.to, "Only requests before this time: RFC 3339 or ms");
  command->add_option("--model", args.model, "Only requests for this model");
  command->add_option("--key", args.key, "Only requests made with this API key id");
  command->add_option("--deployment", args.deployment,
                      "Only requests this deployment served (and, in the summary, only its "
                      "replicas' GPU time)");
}

}  // namespace

void AddGatewayCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* entitlement =
      AddGroup(app, "entitlement", "Which models a tenant may call on shared deployments");
  auto grant_args = std::make_shared<EntitlementArgs>();
  CLI::App* grant = entitlement->add_subcommand("grant", "Entitle a tenant to a model");
  grant->add_option("tenant", grant_args->tenant, "Tenant id or name")->required();
  grant->add_option("model", grant_args->model, "Model name")->required();
  verbs.Add(grant, [grant_args](Context& ctx) { return Grant(ctx, *grant_args); });
  auto revoke_args = std::make_shared<EntitlementArgs>();
  CLI::App* revoke =
      entitlement->add_subcommand("revoke", "Revoke a tenant's entitlement to a model");
  revoke->add_option("tenant", revoke_args->tenant, "Tenant id or name")->required();
  revoke->add_option("model", revoke_args->model, "Model name")->required();
  verbs.Add(revoke, [revoke_args](Context& ctx) { return Revoke(ctx, *revoke_args); });
  auto list_arg = std::make_shared<std::string>();
  CLI::App* list = entitlement->add_subcommand("list", "List a tenant's entitlements");
  list->add_option("tenant", *list_arg, "Tenant id or name (default: your own)");
  verbs.Add(list, [list_arg](Context& ctx) { return ListEntitlements(ctx, *list_arg); });

  CLI::App* limit = AddGroup(app, "limit", "Gateway limits of a tenant and its API keys");
  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = limit->add_subcommand("get", "Show a tenant's limits and its keys'");
  get->add_option("tenant", *get_arg, "Tenant id or name (default: your own)");
  verbs.Add(get, [get_arg](Context& ctx) { return GetLimits(ctx, *get_arg); });
  auto set_args = std::make_shared<SetLimitArgs>();
  CLI::App* set = limit->add_subcommand(
      "set",
      "Set the tenant-wide limits (platform staff) or, with --key, one key's (0 = no limit; a "
      "flag not given keeps its value)");
  set->add_option("tenant", set_args->tenant, "Tenant id or name")->required();
  set->add_option("--key", set_args->key, "API key id: set this key's limits");
  set->add_option("--rpm", set_args->values[0], "Requests per minute")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}));
  set->add_option("--tpm", set_args->values[1], "Tokens per minute (input and output)")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000'000}));
  set->add_option("--max-concurrent", set_args->values[2], "Requests in flight at once")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  set->add_option("--max-queued", set_args->values[3], "Requests waiting in the queue")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  set->add_option("--priority", set_args->priority, "A key's default priority class")
      ->check(CLI::IsMember({"interactive", "batch", "none"}));
  verbs.Add(set, [set_args](Context& ctx) { return SetLimits(ctx, *set_args); });

  CLI::App* usage =
      AddGroup(app, "usage", "What a tenant used: the gateway's tokens and the GPU time it held");
  auto usage_list_args = std::make_shared<UsageArgs>();
  CLI::App* usage_list = usage->add_subcommand("list", "List usage records, newest first");
  AddUsageFilters(usage_list, *usage_list_args);
  AddListOptions(usage_list, usage_list_args->list);
  verbs.Add(usage_list,
            [usage_list_args](Context& ctx) { return ListUsage(ctx, *usage_list_args); });
  auto summary_args = std::make_shared<UsageArgs>();
  CLI::App* summary =
      usage->add_subcommand("summary", "Usage totals, overall or per model, key or deployment");
  AddUsageFilters(summary, *summary_args);
  summary
      ->add_option("--group-by", summary_args->group_by,
                   "One row per model, per key or per deployment")
      ->check(CLI::IsMember({"model", "key", "deployment"}));
  verbs.Add(summary, [summary_args](Context& ctx) { return Summary(ctx, *summary_args); });
  auto refusals_args = std::make_shared<UsageArgs>();
  CLI::App* refusals = usage->add_subcommand(
      "refusals", "Requests the gateway refused before serving them, per key and reason");
  refusals->add_option("--tenant", refusals_args->tenant, "Tenant id or name (default: your own)");
  refusals->add_option("--from", refusals_args->from,
                       "Only refusals at or after this time: RFC 3339 or ms since the epoch");
  refusals->add_option("--to", refusals_args->to, "Only refusals before this time: RFC 3339 or ms");
  refusals->add_option("--key", refusals_args->key, "Only refusals of this API key id");
  verbs.Add(refusals, [refusals_args](Context& ctx) { return Refusals(ctx, *refusals_args); });
  AddGpuUsageCommands(usage, verbs);
}

}  // namespace atrium::cli
