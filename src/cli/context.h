// What every verb shares: the global options resolved against the
// environment and the credentials file, the API session, and output in the
// chosen format. Verbs return the process exit code: 0 success, 1 a failed
// call or check, 2 a usage error.
#pragma once

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/api_session.h"
#include "cli/cli.h"
#include "cli/credentials.h"
#include "cli/table.h"

namespace atrium::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

class Context {
 public:
  explicit Context(const CliOptions& options, std::ostream& out = std::cout,
                   std::ostream& err = std::cerr);

  bool json_output() const { return options_.output == "json"; }
  std::ostream& out() { return out_; }
  std::ostream& err() { return err_; }

  // The API session for the server (--server, else $ATRIUM_SERVER, else the
  // credentials file's) and the token (--token, else $ATRIUM_TOKEN, else the
  // credentials file's when it was issued by that server). With need_token
  // false (login) no token is looked up. On failure prints why and returns
  // nullptr; the verb then returns kExitUsage. The session lives as long as
  // this Context.
  ApiSession* Connect(bool need_token = true);

  // Prints "atrium: <message>" on stderr; returns kExitFailed.
  int Fail(const Error& error);
  // Prints "atrium: <message>" on stderr; returns kExitUsage.
  int Usage(const std::string& message);

  // Pretty JSON on stdout.
  void PrintJson(const Json& value);
  // A single object: JSON as is, or FormatDetail with `first` fields first.
  void PrintObject(const Json& object, const std::vector<std::string>& first);

  // The tenant id for an argument that is an id or a tenant name (a name is
  // looked up among the caller's own tenant, then the tenant list); "" for
  // "" (an optional --tenant that was not given).
  // Errors: kNotFound when no tenant has that name; the API's errors.
  Result<std::string> TenantIdOf(const std::string& id_or_name);
  // The collection prefix users and keys live under: /api/v1/tenants/{id}
  // for --tenant, else the caller's own (its tenant, or /api/v1/platform for
  // platform staff).
  Result<std::string> CollectionBase(const std::string& tenant_arg);
  // /api/v1/tenants/{id} for --tenant, else the caller's own tenant.
  // Platform staff must name one: kInvalidArgument otherwise.
  Result<std::string> TenantBase(const std::string& tenant_arg);

 private:
  // Loads the credentials file once; prints and returns false on a bad file.
  bool LoadStoredCredentials();

  const CliOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  bool credentials_loaded_ = false;
  std::optional<Credentials> credentials_;
  std::unique_ptr<ApiSession> session_;
};

// Shared by every list verb.
struct ListArgs {
  int limit = 0;  // page size; 0 = the server's default
  bool all = false;
  std::string cursor;
};

// GETs the list route `target` (filters already in its query) per `args`
// and prints it: for -o json the page as the API returns it (or, with
// --all, the array of every item); for tables the items under `columns`.
int RunList(Context& ctx, ApiSession& api, const std::string& target, const ListArgs& args,
            const std::vector<Column>& columns);

}  // namespace atrium::cli
