#include "cli/context.h"

#include <cstdlib>

#include "cli/args.h"
#include "crypto/ids.h"

namespace atrium::cli {
namespace {

std::string EnvOr(const std::string& flag, const char* name) {
  if (!flag.empty()) return flag;
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

Context::Context(const CliOptions& options, std::ostream& out, std::ostream& err)
    : options_(options), out_(out), err_(err) {}

bool Context::LoadStoredCredentials() {
  if (credentials_loaded_) return true;
  credentials_loaded_ = true;
  auto path = DefaultCredentialsPath();
  if (!path.has_value()) return true;  // no HOME: nothing stored
  auto loaded = LoadCredentials(*path);
  if (!loaded.has_value()) {
    Usage(loaded.error().message);
    return false;
  }
  credentials_ = std::move(loaded).value();
  return true;
}

ApiSession* Context::Connect(bool need_token) {
  if (session_) return session_.get();
  std::string server = EnvOr(options_.server, "ATRIUM_SERVER");
  std::string token = need_token ? EnvOr(options_.token, "ATRIUM_TOKEN") : "";
  if (server.empty() || (need_token && token.empty())) {
    if (!LoadStoredCredentials()) return nullptr;
    // A stored token is only sent to the server it was issued by.
    if (credentials_ && (server.empty() || server == credentials_->server)) {
      if (server.empty()) server = credentials_->server;
      if (need_token && token.empty()) token = credentials_->token;
    }
  }
  while (server.size() > 1 && server.back() == '/') server.pop_back();
  if (server.empty()) {
    Usage("no server: pass --server URL, set ATRIUM_SERVER, or run `atrium login`");
    return nullptr;
  }
  if (need_token && token.empty()) {
    Usage("not logged in to " + server +
          ": pass --token, set ATRIUM_TOKEN, or run `atrium login --server " + server + "`");
    return nullptr;
  }
  auto session = ApiSession::Open(server, token);
  if (!session.has_value()) {
    Usage(session.error().message);
    return nullptr;
  }
  session_ = std::move(session).value();
  return session_.get();
}

int Context::Fail(const Error& error) {
  // Server messages may quote what a tenant typed.
  err_ << "atrium: " << EscapeForTerminal(error.message) << std::endl;
  return kExitFailed;
}

int Context::Usage(const std::string& message) {
  err_ << "atrium: " << EscapeForTerminal(message) << std::endl;
  return kExitUsage;
}

void Context::PrintJson(const Json& value) {
  out_ << EscapeJsonForTerminal(value.dump(2, ' ', false, Json::error_handler_t::replace)) << "\n";
}

void Context::PrintObject(const Json& object, const std::vector<std::string>& first) {
  if (json_output()) {
    PrintJson(object);
  } else {
    out_ << FormatDetail(object, first);
  }
}

Result<std::string> Context::TenantIdOf(const std::string& id_or_name) {
  if (id_or_name.empty() || IsWellFormedId(id_or_name, "tn")) return id_or_name;
  ApiSession* api = session_.get();
  if (api == nullptr) return Error::Internal("TenantIdOf before Connect");
  ATRIUM_ASSIGN_OR_RETURN(Json me, api->WhoAmI());
  Json own = FieldAt(me, "tenant");
  if (StringAt(own, "name") == id_or_name) return StringAt(own, "id");
  if (!own.is_null()) return Error::NotFound("no tenant named '" + id_or_name + "'");
  // Platform staff: names are unique, so the name filter answers directly.
  ATRIUM_ASSIGN_OR_RETURN(Json page,
                          api->Get(WithQuery("/api/v1/tenants", {{"name", id_or_name}})));
  Json items = FieldAt(page, "items");
  if (items.is_array() && !items.empty()) return StringAt(items[0], "id");
  return Error::NotFound("no tenant named '" + id_or_name + "'");
}

Result<std::string> Context::CollectionBase(const std::string& tenant_arg) {
  if (!tenant_arg.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(std::string id, TenantIdOf(tenant_arg));
    return "/api/v1/tenants/" + UrlEncode(id);
  }
  ApiSession* api = session_.get();
  if (api == nullptr) return Error::Internal("CollectionBase before Connect");
  ATRIUM_ASSIGN_OR_RETURN(Json me, api->WhoAmI());
  std::string tenant_id = StringAt(FieldAt(me, "tenant"), "id");
  if (tenant_id.empty()) return std::string("/api/v1/platform");
  return "/api/v1/tenants/" + UrlEncode(tenant_id);
}

Result<std::string> Context::TenantBase(const std::string& tenant_arg) {
  ATRIUM_ASSIGN_OR_RETURN(std::string base, CollectionBase(tenant_arg));
  if (base == "/api/v1/platform") {
    return Error::InvalidArgument("platform staff: name the tenant with --tenant");
  }
  return base;
}

int RunList(Context& ctx, ApiSession& api, const std::string& target, const ListArgs& args,
            const std::vector<Column>& columns) {
  if (args.limit < 0) return ctx.Usage("--limit must be positive");
  if (args.all && !args.cursor.empty()) return ctx.Usage("--all and --cursor do not mix");
  std::vector<Json> items;
  std::string next_cursor;
  if (args.all) {
    auto all = api.ListAll(target, args.limit);
    if (!all.has_value()) return ctx.Fail(all.error());
    items = std::move(all).value();
    if (ctx.json_output()) {
      ctx.PrintJson(Json(items));
      return kExitOk;
    }
  } else {
    auto page = api.Get(WithQuery(target, {{"limit", args.limit ? std::to_string(args.limit) : ""},
                                           {"cursor", args.cursor}}));
    if (!page.has_value()) return ctx.Fail(page.error());
    if (ctx.json_output()) {
      ctx.PrintJson(*page);
      return kExitOk;
    }
    Json list = FieldAt(*page, "items");
    if (list.is_array()) items.assign(list.begin(), list.end());
    next_cursor = StringAt(*page, "next_cursor");
  }
  ctx.out() << FormatObjects(columns, items);
  if (!next_cursor.empty()) {
    ctx.err() << "(more: add --cursor " << next_cursor << ", or --all for every page)" << std::endl;
  }
  return kExitOk;
}

}  // namespace atrium::cli
