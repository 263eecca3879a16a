// key create | list | revoke. Keys live where users do: in a tenant
// (--tenant, or the caller's own) or among the platform's own.
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "crypto/ids.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kKeyFieldOrder = {
    "id",    "name",      "prefix",     "owner_user_id", "role",      "scopes",
    "state", "tenant_id", "created_at", "expires_at",    "revoked_at"};
const std::vector<Column> kKeyColumns = {{"ID", "id"},
                                         {"NAME", "name"},
                                         {"OWNER", "owner_user_id"},
                                         {"ROLE", "role"},
                                         {"STATE", "state"},
                                         {"SCOPES", "scopes"},
                                         {"EXPIRES", "expires_at"},
                                         {"CREATED", "created_at"}};

// A user id as given, or the id of the user with that username.
Result<std::string> UserIdOf(ApiSession& api, const std::string& base,
                             const std::string& id_or_name) {
  if (IsWellFormedId(id_or_name, "usr")) return id_or_name;
  ATRIUM_ASSIGN_OR_RETURN(auto users, api.ListAll(base + "/users", 1000));
  for (const auto& user : users) {
    if (StringAt(user, "username") == id_or_name) return StringAt(user, "id");
  }
  return Error::NotFound("no user named '" + id_or_name + "'");
}

struct CreateArgs {
  std::string name;
  std::string tenant;
  std::string owner;
  std::string role;
  std::vector<std::string> scopes;
  std::string expires_in;
};

int Create(Context& ctx, const CreateArgs& args) {
  Json body = {{"name", args.name}};
  if (!args.expires_in.empty()) {
    auto seconds = ParseDuration(args.expires_in);
    if (!seconds.has_value()) return ctx.Usage(seconds.error().message);
    body["expires_in_seconds"] = *seconds;
  }
  if (!args.role.empty()) body["role"] = args.role;
  if (!args.scopes.empty()) body["scopes"] = args.scopes;
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  if (!args.owner.empty()) {
    auto owner = UserIdOf(*api, *base, args.owner);
    if (!owner.has_value()) return ctx.Fail(owner.error());
    body["owner_user_id"] = *owner;
  }
  auto key = api->Post(*base + "/keys", body);
  if (!key.has_value()) return ctx.Fail(key.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*key);
    return kExitOk;
  }
  Json shown = *key;
  std::string text = StringAt(shown, "key");
  shown.erase("key");
  ctx.out() << FormatDetail(shown, kKeyFieldOrder) << "\n"
            << "API key (shown only this once; store it safely):\n"
            << EscapeForTerminal(text) << "\n";
  return kExitOk;
}

struct ListKeyArgs {
  std::string tenant;
  std::string owner;
  ListArgs list;
};

int List(Context& ctx, const ListKeyArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  std::string owner;
  if (!args.owner.empty()) {
    auto id = UserIdOf(*api, *base, args.owner);
    if (!id.has_value()) return ctx.Fail(id.error());
    owner = *id;
  }
  return RunList(ctx, *api, WithQuery(*base + "/keys", {{"owner_user_id", owner}}), args.list,
                 kKeyColumns);
}

struct RevokeArgs {
  std::string key;
  std::string tenant;
};

int Revoke(Context& ctx, const RevokeArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  // Accept the listed prefix ("atr_<id>") as well as the bare id.
  std::string id = args.key.rfind("atr_", 0) == 0 ? args.key.substr(4) : args.key;
  auto key = api->Post(*base + "/keys/" + UrlEncode(id) + "/revoke");
  if (!key.has_value()) return ctx.Fail(key.error());
  ctx.PrintObject(*key, kKeyFieldOrder);
  return kExitOk;
}

void AddTenantOption(CLI::App* command, std::string& tenant) {
  command->add_option("--tenant", tenant,
                      "Tenant id or name (default: your own; platform staff: the platform)");
}

}  // namespace

void AddKeyCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* key = AddGroup(app, "key", "Manage API keys");

  auto create_args = std::make_shared<CreateArgs>();
  CLI::App* create =
      key->add_subcommand("create", "Create an API key; its text is printed only this once");
  create->add_option("name", create_args->name, "What the key is for")->required();
  AddTenantOption(create, create_args->tenant);
  create->add_option("--owner", create_args->owner, "Owner user id or username (default: you)");
  create->add_option("--role", create_args->role, "Role of the key (default: the owner's)");
  create->add_option("--scope", create_args->scopes, "Scope, e.g. a model (repeat for several)")
      ->allow_extra_args(false);
  create->add_option("--expires-in", create_args->expires_in,
                     "Lifetime, e.g. 30d, 12h, 90m, 3600s (default: never expires)");
  verbs.Add(create, [create_args](Context& ctx) { return Create(ctx, *create_args); });

  auto list_args = std::make_shared<ListKeyArgs>();
  CLI::App* list = key->add_subcommand("list", "List API keys");
  AddTenantOption(list, list_args->tenant);
  list->add_option("--owner", list_args->owner, "Only keys of this user id or username");
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto revoke_args = std::make_shared<RevokeArgs>();
  CLI::App* revoke = key->add_subcommand("revoke", "Revoke an API key, effective at once");
  revoke->add_option("key_id", revoke_args->key, "Key id")->required();
  AddTenantOption(revoke, revoke_args->tenant);
  verbs.Add(revoke, [revoke_args](Context& ctx) { return Revoke(ctx, *revoke_args); });
}

}  // namespace atrium::cli
