#include "cli/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/atomic_file.h"
#include "common/json_reader.h"

namespace atrium::cli {
namespace {

std::string StringField(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

Error OsError(const std::string& what, const std::string& path) {
  return Error::Internal(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

Result<std::string> CredentialsPath(const char* xdg_config_home, const char* home) {
  if (xdg_config_home != nullptr && xdg_config_home[0] == '/') {
    return std::string(xdg_config_home) + "/atrium/credentials";
  }
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.config/atrium/credentials";
  return Error::FailedPrecondition("cannot place the credentials file: HOME is not set");
}

Result<std::string> DefaultCredentialsPath() {
  return CredentialsPath(std::getenv("XDG_CONFIG_HOME"), std::getenv("HOME"));
}

Result<std::optional<Credentials>> LoadCredentials(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return std::optional<Credentials>();
    return OsError("cannot read", path);
  }
  std::stringstream text;
  text << in.rdbuf();
  auto json = ParseJson(text.str());
  if (!json.has_value() || !json->is_object()) {
    return Error::InvalidArgument(path + " is not a credentials file; run `atrium login` again");
  }
  Credentials c;
  c.server = StringField(*json, "server");
  c.token = StringField(*json, "token");
  c.username = StringField(*json, "username");
  c.tenant = StringField(*json, "tenant");
  c.expires_at = StringField(*json, "expires_at");
  if (c.server.empty() || c.token.empty()) {
    return Error::InvalidArgument(path + " has no server or token; run `atrium login` again");
  }
  return std::optional<Credentials>(std::move(c));
}

Status SaveCredentials(const std::string& path, const Credentials& c) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error::Internal("cannot create " + dir.string() + ": " + ec.message());
  ::chmod(dir.c_str(), 0700);
  Json j = {{"server", c.server},
            {"token", c.token},
            {"username", c.username},
            {"tenant", c.tenant},
            {"expires_at", c.expires_at}};
  return ReplaceFileAtomically(path, j.dump(2, ' ', false, Json::error_handler_t::replace) + "\n");
}

Result<bool> RemoveCredentials(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  return OsError("cannot remove", path);
}

}  // namespace atrium::cli
