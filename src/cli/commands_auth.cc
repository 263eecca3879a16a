// login, logout, whoami.
#include <memory>

#include "cli/commands.h"
#include "cli/credentials.h"
#include "cli/terminal.h"

namespace atrium::cli {
namespace {

struct LoginArgs {
  std::string tenant;
  std::string username;
  std::string password;
  bool password_stdin = false;
};

// The password from --password-stdin, --password, or a hidden prompt.
Result<std::string> PasswordFrom(const std::string& flag_value, bool from_stdin) {
  if (from_stdin) return ReadStdinSecret();
  if (!flag_value.empty()) return flag_value;
  if (!IsInteractive()) {
    return Error::InvalidArgument("no password: pass --password-stdin (or run interactively)");
  }
  return ReadSecret("Password: ");
}

int Login(Context& ctx, const LoginArgs& args) {
  ApiSession* api = ctx.Connect(/*need_token=*/false);
  if (api == nullptr) return kExitUsage;
  auto password = PasswordFrom(args.password, args.password_stdin);
  if (!password.has_value()) return ctx.Usage(password.error().message);
  Json body = {{"username", args.username}, {"password", *password}};
  if (!args.tenant.empty()) body["tenant"] = args.tenant;
  auto answer = api->Post("/api/v1/auth/login", body);
  if (!answer.has_value()) return ctx.Fail(answer.error());

  Credentials credentials;
  credentials.server = api->server();
  credentials.token = StringAt(*answer, "access_token");
  credentials.username = args.username;
  credentials.tenant = args.tenant;
  credentials.expires_at = StringAt(*answer, "expires_at");
  if (credentials.token.empty()) return ctx.Fail(Error::Internal("login answer has no token"));
  auto path = DefaultCredentialsPath();
  if (!path.has_value()) return ctx.Fail(path.error());
  if (auto saved = SaveCredentials(*path, credentials); !saved.has_value()) {
    return ctx.Fail(saved.error());
  }
  Json user = FieldAt(*answer, "user");
  if (ctx.json_output()) {
    ctx.PrintJson({{"server", credentials.server},
                   {"user", user},
                   {"expires_at", credentials.expires_at},
                   {"credentials_file", *path}});
    return kExitOk;
  }
  ctx.out() << "Logged in to " << credentials.server << " as " << args.username
            << (args.tenant.empty() ? std::string(" (platform)") : " in tenant " + args.tenant)
            << ", role " << StringAt(user, "role") << ".\n"
            << "Token saved in " << *path << "; it expires at " << credentials.expires_at << ".\n";
  return kExitOk;
}

int Logout(Context& ctx) {
  auto path = DefaultCredentialsPath();
  if (!path.has_value()) return ctx.Fail(path.error());
  auto stored = LoadCredentials(*path);
  if (stored.has_value() && !stored->has_value()) {
    ctx.out() << "Not logged in.\n";
    return kExitOk;
  }
  // End the session on the server first; the file goes either way.
  std::optional<Error> server_error;
  if (stored.has_value()) {
    auto api = ApiSession::Open((*stored)->server, (*stored)->token);
    if (api.has_value()) {
      auto ended = (*api)->Post("/api/v1/auth/logout");
      // An expired or ended session needs no ending.
      if (!ended.has_value() && ended.error().code != ErrorCode::kUnauthenticated) {
        server_error = ended.error();
      }
    }
  }
  auto removed = RemoveCredentials(*path);
  if (!removed.has_value()) return ctx.Fail(removed.error());
  if (server_error) {
    return ctx.Fail(
        Error{server_error->code, "the server did not end the session: " + server_error->message +
                                      "; the local credentials are removed"});
  }
  ctx.out() << "Logged out.\n";
  return kExitOk;
}

int WhoAmI(Context& ctx) {
  ApiSession* api = ctx.Connect();
  if (api == nullptr) return kExitUsage;
  auto me = api->WhoAmI();
  if (!me.has_value()) return ctx.Fail(me.error());
  if (ctx.json_output()) {
    ctx.PrintJson(*me);
    return kExitOk;
  }
  Json user = FieldAt(*me, "user");
  Json tenant = FieldAt(*me, "tenant");
  Json view = {
      {"user", StringAt(user, "username") + " (" + StringAt(user, "id") + ")"},
      {"role", StringAt(*me, "role")},
      {"tenant", tenant.is_null() ? std::string("- (platform staff)")
                                  : StringAt(tenant, "name") + " (" + StringAt(tenant, "id") + ")"},
      {"credential", StringAt(*me, "credential")},
      {"server", api->server()}};
  ctx.out() << FormatDetail(view, {"user", "role", "tenant", "credential", "server"});
  return kExitOk;
}

}  // namespace

void AddAuthCommands(CLI::App& app, VerbTable& verbs) {
  auto login_args = std::make_shared<LoginArgs>();
  CLI::App* login = app.add_subcommand(
      "login", "Log in with a username and password and keep the token for later commands");
  login->add_option("--tenant", login_args->tenant, "Tenant name (omit for platform staff)");
  login->add_option("-u,--username", login_args->username, "Username")->required();
  auto* password = login->add_option(
      "--password", login_args->password,
      "Password (visible to other local users; prefer --password-stdin or the prompt)");
  login->add_flag("--password-stdin", login_args->password_stdin, "Read the password from stdin")
      ->excludes(password);
  verbs.Add(login, [login_args](Context& ctx) { return Login(ctx, *login_args); });

  CLI::App* logout =
      app.add_subcommand("logout", "End the stored login session and forget its token");
  verbs.Add(logout, Logout);

  CLI::App* whoami = app.add_subcommand("whoami", "Show who the credential in use belongs to");
  verbs.Add(whoami, WhoAmI);
}

}  // namespace atrium::cli
