// tenant create | list | get | update | suspend | resume | evict.
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/terminal.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kTenantFieldOrder = {"id",   "name",    "display_name", "state",
                                                    "tier", "regions", "weight",       "labels"};
const std::vector<Column> kTenantColumns = {
    {"ID", "id"},         {"NAME", "name"},       {"STATE", "state"},   {"TIER", "tier"},
    {"WEIGHT", "weight"}, {"REGIONS", "regions"}, {"LABELS", "labels"}, {"CREATED", "created_at"}};

std::string TenantPath(const std::string& id) { return "/api/v1/tenants/" + UrlEncode(id); }

struct TenantFields {
  std::string display_name;
  std::string tier;
  std::vector<std::string> regions;
  int64_t weight = 1;
  std::vector<std::string> labels;
  std::vector<std::string> remove_labels;  // update only
  // Set after parsing, from the options' counts.
  CLI::Option* display_name_opt = nullptr;
  CLI::Option* tier_opt = nullptr;
  CLI::Option* regions_opt = nullptr;
  CLI::Option* weight_opt = nullptr;
};

void AddTenantFieldOptions(CLI::App* command, TenantFields& f) {
  f.display_name_opt = command->add_option("--display-name", f.display_name, "Name for people");
  f.tier_opt =
      command->add_option("--tier", f.tier, "Isolation tier")
          ->check(CLI::IsMember({"shared", "dedicated-gpu", "dedicated-node", "dedicated-pool"}));
  f.regions_opt = command->add_option("--region", f.regions, "Region (repeat for several)")
                      ->allow_extra_args(false);
  f.weight_opt = command->add_option("--weight", f.weight, "Fair-share weight, 1..10000");
  command->add_option("--label", f.labels, "Label key=value (repeat for several)")
      ->allow_extra_args(false);
}

// The JSON fields the options set.
Json BodyOf(const TenantFields& f) {
  Json body = Json::object();
  if (f.display_name_opt->count()) body["display_name"] = f.display_name;
  if (f.tier_opt->count()) body["tier"] = f.tier;
  if (f.regions_opt->count()) body["regions"] = f.regions;
  if (f.weight_opt->count()) body["weight"] = f.weight;
  return body;
}

struct CreateArgs {
  std::string name;
  TenantFields fields;
};

int Create(Context& ctx, const CreateArgs& args) {
  auto labels = ParseLabels(args.fields.labels);
  if (!labels.has_value()) return ctx.Usage(labels.error().message);
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  Json body = BodyOf(args.fields);
  body["name"] = args.name;
  if (!labels->empty()) body["labels"] = *labels;
  auto tenant = api->Post("/api/v1/tenants", body);
  if (!tenant.has_value()) return ctx.Fail(tenant.error());
  ctx.PrintObject(*tenant, kTenantFieldOrder);
  return kExitOk;
}

struct ListTenantArgs {
  std::string state;
  std::string label;
  ListArgs list;
};

int List(Context& ctx, const ListTenantArgs& args) {
  if (!args.label.empty()) {
    if (auto label = ParseLabel(args.label); !label.has_value()) {
      return ctx.Usage(label.error().message);
    }
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  std::string target = WithQuery("/api/v1/tenants", {{"state", args.state}, {"label", args.label}});
  return RunList(ctx, *api, target, args.list, kTenantColumns);
}

int Get(Context& ctx, const std::string& id_or_name) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(id_or_name);
  if (!id.has_value()) return ctx.Fail(id.error());
  auto tenant = api->Get(TenantPath(*id));
  if (!tenant.has_value()) return ctx.Fail(tenant.error());
  ctx.PrintObject(*tenant, kTenantFieldOrder);
  return kExitOk;
}

struct UpdateArgs {
  std::string tenant;
  TenantFields fields;
};

int Update(Context& ctx, const UpdateArgs& args) {
  auto labels = ParseLabels(args.fields.labels);
  if (!labels.has_value()) return ctx.Usage(labels.error().message);
  Json body = BodyOf(args.fields);
  bool change_labels = !labels->empty() || !args.fields.remove_labels.empty();
  if (body.empty() && !change_labels) {
    return ctx.Usage(
        "nothing to update: give at least one of --display-name, --tier, "
        "--region, --weight, --label, --remove-label");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(args.tenant);
  if (!id.has_value()) return ctx.Fail(id.error());
  if (change_labels) {
    // The API replaces the whole label map; --label adds to what is there.
    auto current = api->Get(TenantPath(*id));
    if (!current.has_value()) return ctx.Fail(current.error());
    Json merged = FieldAt(*current, "labels");
    if (!merged.is_object()) merged = Json::object();
    for (const auto& [key, value] : *labels) merged[key] = value;
    for (const auto& key : args.fields.remove_labels) merged.erase(key);
    body["labels"] = merged;
  }
  auto tenant = api->Patch(TenantPath(*id), body);
  if (!tenant.has_value()) return ctx.Fail(tenant.error());
  ctx.PrintObject(*tenant, kTenantFieldOrder);
  return kExitOk;
}

// suspend and resume: a POST without a body, the tenant back.
int ChangeState(Context& ctx, const std::string& tenant, const std::string& action) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(tenant);
  if (!id.has_value()) return ctx.Fail(id.error());
  auto answer = api->Post(TenantPath(*id) + "/" + action);
  if (!answer.has_value()) return ctx.Fail(answer.error());
  ctx.PrintObject(*answer, kTenantFieldOrder);
  return kExitOk;
}

struct EvictArgs {
  std::string tenant;
  bool yes = false;
};

int Evict(Context& ctx, const EvictArgs& args) {
  if (!args.yes && !IsInteractive()) {
    return ctx.Usage(
        "evicting removes the tenant's users, keys and sessions for good; "
        "pass --yes to confirm when not at a terminal");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto id = ctx.TenantIdOf(args.tenant);
  if (!id.has_value()) return ctx.Fail(id.error());
  auto tenant = api->Get(TenantPath(*id));
  if (!tenant.has_value()) return ctx.Fail(tenant.error());
  const std::string name = StringAt(*tenant, "name");
  if (!args.yes) {
    auto answer = ReadLine("Evict tenant " + name + " (" + *id +
                           ")? Every credential stops working and its users, keys and sessions "
                           "are deleted. Type the tenant name to confirm: ");
    if (!answer.has_value() || *answer != name) return ctx.Usage("not confirmed; nothing done");
  }
  auto answer = api->Post(TenantPath(*id) + "/evict");
  if (!answer.has_value()) return ctx.Fail(answer.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*answer);
    return kExitOk;
  }
  Json removed = FieldAt(*answer, "removed");
  ctx.out() << "Evicted tenant " << EscapeForTerminal(name) << " (" << EscapeForTerminal(*id)
            << "): removed " << CellText(FieldAt(removed, "users")) << " users, "
            << CellText(FieldAt(removed, "api_keys")) << " API keys, "
            << CellText(FieldAt(removed, "sessions")) << " sessions.\n";
  return kExitOk;
}

}  // namespace

void AddTenantCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* tenant = AddGroup(app, "tenant", "Onboard and manage tenants (platform staff)");

  auto create_args = std::make_shared<CreateArgs>();
  CLI::App* create = tenant->add_subcommand("create", "Onboard a tenant");
  create->add_option("name", create_args->name, "Tenant name: lower-case letters, digits, '-'")
      ->required();
  AddTenantFieldOptions(create, create_args->fields);
  verbs.Add(create, [create_args](Context& ctx) { return Create(ctx, *create_args); });

  auto list_args = std::make_shared<ListTenantArgs>();
  CLI::App* list = tenant->add_subcommand("list", "List tenants");
  list->add_option("--state", list_args->state, "Only tenants in this state")
      ->check(CLI::IsMember({"active", "suspended", "evicting"}));
  list->add_option("--label", list_args->label, "Only tenants with this label key=value");
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto get_arg = std::make_shared<std::string>();
  CLI::App* get = tenant->add_subcommand("get", "Show a tenant");
  get->add_option("tenant", *get_arg, "Tenant id or name")->required();
  verbs.Add(get, [get_arg](Context& ctx) { return Get(ctx, *get_arg); });

  auto update_args = std::make_shared<UpdateArgs>();
  CLI::App* update = tenant->add_subcommand("update", "Change a tenant's settings");
  update->add_option("tenant", update_args->tenant, "Tenant id or name")->required();
  AddTenantFieldOptions(update, update_args->fields);
  update
      ->add_option("--remove-label", update_args->fields.remove_labels,
                   "Label key to remove (repeat for several)")
      ->allow_extra_args(false);
  verbs.Add(update, [update_args](Context& ctx) { return Update(ctx, *update_args); });

  for (const char* action : {"suspend", "resume"}) {
    auto arg = std::make_shared<std::string>();
    CLI::App* command = tenant->add_subcommand(
        action, std::string(action) == "suspend"
                    ? "Suspend a tenant: every credential of it is rejected at once"
                    : "Resume a suspended tenant");
    command->add_option("tenant", *arg, "Tenant id or name")->required();
    std::string verb = action;
    verbs.Add(command, [arg, verb](Context& ctx) { return ChangeState(ctx, *arg, verb); });
  }

  auto evict_args = std::make_shared<EvictArgs>();
  CLI::App* evict = tenant->add_subcommand(
      "evict", "Evict a tenant: revoke its credentials and delete its users and keys");
  evict->add_option("tenant", evict_args->tenant, "Tenant id or name")->required();
  evict->add_flag("-y,--yes", evict_args->yes, "Do not ask for confirmation");
  verbs.Add(evict, [evict_args](Context& ctx) { return Evict(ctx, *evict_args); });
}

}  // namespace atrium::cli
