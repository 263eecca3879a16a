// user create | list | get | update | delete. Users live in a tenant
// (--tenant, or the caller's own) or, for platform staff without --tenant,
// among the platform's own users.
#include <functional>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/terminal.h"
#include "crypto/ids.h"

namespace atrium::cli {
namespace {

const std::vector<std::string> kUserFieldOrder = {"id",   "username", "display_name", "email",
                                                  "role", "kind",     "state",        "tenant_id"};
const std::vector<Column> kUserColumns = {
    {"ID", "id"},       {"USERNAME", "username"}, {"ROLE", "role"},         {"KIND", "kind"},
    {"STATE", "state"}, {"EMAIL", "email"},       {"CREATED", "created_at"}};

// The password for a new or changed human user.
Result<std::string> NewPassword(bool from_stdin, const std::string& username) {
  if (from_stdin) return ReadStdinSecret();
  if (!IsInteractive()) {
    return Error::InvalidArgument("no password: pass --password-stdin (or run interactively)");
  }
  ATRIUM_ASSIGN_OR_RETURN(std::string first, ReadSecret("Password for " + username + ": "));
  ATRIUM_ASSIGN_OR_RETURN(std::string second, ReadSecret("Again: "));
  if (first != second) return Error::InvalidArgument("the passwords differ");
  return first;
}

// "<base>/users/<id>" for a user id or a username in the collection.
Result<std::string> UserPath(ApiSession& api, const std::string& base,
                             const std::string& id_or_name) {
  if (IsWellFormedId(id_or_name, "usr")) return base + "/users/" + UrlEncode(id_or_name);
  ATRIUM_ASSIGN_OR_RETURN(Json page,
                          api.Get(WithQuery(base + "/users", {{"username", id_or_name}})));
  Json items = FieldAt(page, "items");
  if (items.is_array() && !items.empty()) {
    return base + "/users/" + UrlEncode(StringAt(items[0], "id"));
  }
  return Error::NotFound("no user named '" + id_or_name + "'");
}

struct CreateArgs {
  std::string username;
  std::string role;
  std::string tenant;
  bool service = false;
  std::string display_name;
  std::string email;
  bool password_stdin = false;
};

int Create(Context& ctx, const CreateArgs& args) {
  if (args.service && args.password_stdin) {
    return ctx.Usage("service accounts have no password; give them API keys");
  }
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  Json body = {{"username", args.username},
               {"role", args.role},
               {"kind", args.service ? "service" : "human"}};
  if (!args.display_name.empty()) body["display_name"] = args.display_name;
  if (!args.email.empty()) body["email"] = args.email;
  if (!args.service) {
    auto password = NewPassword(args.password_stdin, args.username);
    if (!password.has_value()) return ctx.Usage(password.error().message);
    body["password"] = *password;
  }
  auto user = api->Post(*base + "/users", body);
  if (!user.has_value()) return ctx.Fail(user.error());
  ctx.PrintObject(*user, kUserFieldOrder);
  return kExitOk;
}

struct ListUserArgs {
  std::string tenant;
  ListArgs list;
};

int List(Context& ctx, const ListUserArgs& args) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  return RunList(ctx, *api, *base + "/users", args.list, kUserColumns);
}

struct OneUserArgs {
  std::string user;
  std::string tenant;
};

// Connects, resolves the user to "<base>/users/<id>" and runs fn there;
// returns fn's exit code, or the failure's.
int WithUserPath(Context& ctx, const OneUserArgs& args,
                 const std::function<int(ApiSession&, const std::string&)>& fn) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto base = ctx.CollectionBase(args.tenant);
  if (!base.has_value()) return ctx.Fail(base.error());
  auto path = UserPath(*api, *base, args.user);
  if (!path.has_value()) return ctx.Fail(path.error());
  return fn(*api, *path);
}

int Get(Context& ctx, const OneUserArgs& args) {
  return WithUserPath(ctx, args, [&](ApiSession& api, const std::string& path) {
    auto user = api.Get(path);
    if (!user.has_value()) return ctx.Fail(user.error());
    ctx.PrintObject(*user, kUserFieldOrder);
    return kExitOk;
  });
}

struct UpdateArgs {
  OneUserArgs which;
  std::string role;
  std::string state;
  std::string display_name;
  std::string email;
  bool password_stdin = false;
  bool current_password_stdin = false;
  CLI::Option* email_opt = nullptr;
};

int Update(Context& ctx, const UpdateArgs& args) {
  Json body = Json::object();
  if (!args.role.empty()) body["role"] = args.role;
  if (!args.state.empty()) body["state"] = args.state;
  if (!args.display_name.empty()) body["display_name"] = args.display_name;
  if (args.email_opt->count()) body["email"] = args.email;  // "" clears it
  if (body.empty() && !args.password_stdin) {
    return ctx.Usage(
        "nothing to update: give at least one of --role, --state, --display-name, "
        "--email, --password-stdin");
  }
  if (args.current_password_stdin && !args.password_stdin) {
    return ctx.Usage("--current-password-stdin goes with --password-stdin");
  }
  if (args.password_stdin) {
    auto password = ReadStdinSecret();
    if (!password.has_value()) return ctx.Usage(password.error().message);
    if (args.current_password_stdin) {
      // Your own password: the current one on the first line, the new one after.
      auto newline = password->find('\n');
      if (newline == std::string::npos) {
        return ctx.Usage(
            "--current-password-stdin: give the current password, then the new one, "
            "on two lines");
      }
      std::string current = password->substr(0, newline);
      if (!current.empty() && current.back() == '\r') current.pop_back();
      body["current_password"] = current;
      body["password"] = password->substr(newline + 1);
    } else {
      body["password"] = *password;
    }
  }
  return WithUserPath(ctx, args.which, [&](ApiSession& api, const std::string& path) {
    auto user = api.Patch(path, body);
    if (!user.has_value()) return ctx.Fail(user.error());
    ctx.PrintObject(*user, kUserFieldOrder);
    return kExitOk;
  });
}

int Delete(Context& ctx, const OneUserArgs& args) {
  return WithUserPath(ctx, args, [&](ApiSession& api, const std::string& path) {
    auto deleted = api.Delete(path);
    if (!deleted.has_value()) return ctx.Fail(deleted.error());
    if (ctx.json_output()) {
      ctx.PrintJson({{"deleted", args.user}});
    } else {
      ctx.out() << "Deleted user " << args.user << " with its keys and sessions.\n";
    }
    return kExitOk;
  });
}

void AddTenantOption(CLI::App* command, std::string& tenant) {
  command->add_option("--tenant", tenant,
                      "Tenant id or name (default: your own; platform staff: the platform)");
}

}  // namespace

void AddUserCommands(CLI::App& app, VerbTable& verbs) {
  CLI::App* user = AddGroup(app, "user", "Manage users and service accounts");

  auto create_args = std::make_shared<CreateArgs>();
  CLI::App* create = user->add_subcommand("create", "Create a user or service account");
  create->add_option("username", create_args->username, "Username")->required();
  create
      ->add_option("--role", create_args->role,
                   "Role, e.g. tenant-admin, tenant-member, tenant-viewer, platform-operator")
      ->required();
  AddTenantOption(create, create_args->tenant);
  create->add_flag("--service", create_args->service,
                   "A service account (no password; it uses API keys)");
  create->add_option("--display-name", create_args->display_name, "Name for people");
  create->add_option("--email", create_args->email, "E-mail address");
  create->add_flag("--password-stdin", create_args->password_stdin,
                   "Read the password from stdin (else prompt at a terminal)");
  verbs.Add(create, [create_args](Context& ctx) { return Create(ctx, *create_args); });

  auto list_args = std::make_shared<ListUserArgs>();
  CLI::App* list = user->add_subcommand("list", "List users");
  AddTenantOption(list, list_args->tenant);
  AddListOptions(list, list_args->list);
  verbs.Add(list, [list_args](Context& ctx) { return List(ctx, *list_args); });

  auto get_args = std::make_shared<OneUserArgs>();
  CLI::App* get = user->add_subcommand("get", "Show a user");
  get->add_option("user", get_args->user, "User id or username")->required();
  AddTenantOption(get, get_args->tenant);
  verbs.Add(get, [get_args](Context& ctx) { return Get(ctx, *get_args); });

  auto update_args = std::make_shared<UpdateArgs>();
  CLI::App* update = user->add_subcommand("update", "Change a user");
  update->add_option("user", update_args->which.user, "User id or username")->required();
  AddTenantOption(update, update_args->which.tenant);
  update->add_option("--role", update_args->role, "New role");
  update->add_option("--state", update_args->state, "active or disabled")
      ->check(CLI::IsMember({"active", "disabled"}));
  update->add_option("--display-name", update_args->display_name, "Name for people");
  update_args->email_opt = update->add_option("--email", update_args->email, "E-mail address");
  update->add_flag("--password-stdin", update_args->password_stdin,
                   "Set a new password read from stdin");
  update->add_flag("--current-password-stdin", update_args->current_password_stdin,
                   "Changing your own password: stdin holds the current password, then the new "
                   "one, on two lines (log in first: an API key cannot change it)");
  verbs.Add(update, [update_args](Context& ctx) { return Update(ctx, *update_args); });

  auto delete_args = std::make_shared<OneUserArgs>();
  CLI::App* remove = user->add_subcommand("delete", "Delete a user with its API keys and sessions");
  remove->add_option("user", delete_args->user, "User id or username")->required();
  AddTenantOption(remove, delete_args->tenant);
  verbs.Add(remove, [delete_args](Context& ctx) { return Delete(ctx, *delete_args); });
}

}  // namespace atrium::cli
