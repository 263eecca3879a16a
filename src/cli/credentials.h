// The credentials file `atrium login` writes and later commands read when
// neither --token nor ATRIUM_TOKEN is given: a JSON object with the server
// URL and an access token, mode 0600 in a 0700 directory.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"

namespace atrium::cli {

struct Credentials {
  std::string server;      // base URL the token belongs to
  std::string token;       // bearer credential
  std::string username;    // for people: who logged in
  std::string tenant;      // tenant name, "" for platform staff
  std::string expires_at;  // RFC 3339, as the server reported it
};

// $XDG_CONFIG_HOME/atrium/credentials when that variable is set to an
// absolute path, else $HOME/.config/atrium/credentials. Pure: the caller
// passes the variables (nullptr = unset). Errors: kFailedPrecondition when
// neither gives a usable directory.
Result<std::string> CredentialsPath(const char* xdg_config_home, const char* home);
// CredentialsPath over this process's environment.
Result<std::string> DefaultCredentialsPath();

// nullopt when the file does not exist. Errors: kInvalidArgument for a file
// that is not a credentials object; kInternal when it cannot be read.
Result<std::optional<Credentials>> LoadCredentials(const std::string& path);
// Creates the directory (0700) and replaces the file atomically (0600).
Status SaveCredentials(const std::string& path, const Credentials& credentials);
// Returns whether a file was there to remove.
Result<bool> RemoveCredentials(const std::string& path);

}  // namespace atrium::cli
