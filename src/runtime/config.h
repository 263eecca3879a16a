// Configuration of `atrium server`, read from a TOML file. Every key is
// declared here with its default; an unknown key or a wrong type is an error
// naming it, so a typo never silently falls back to a default.
#pragma once

#include <string>

#include "common/result.h"

namespace atrium {

struct Config {
  // [store]
  std::string store_url;  // sqlite:///path or postgresql://... (required)
  int store_pool_size = 4;
  // [api]
  std::string api_listen = "127.0.0.1:8080";
  int api_threads = 4;
  int64_t api_max_body_bytes = 1024 * 1024;
  int64_t api_read_timeout_ms = 30'000;
  int64_t api_idle_timeout_ms = 60'000;
  int64_t api_max_connections = 10'000;
  // [auth]
  int64_t access_token_ttl_s = 3600;
  // [log]
  std::string log_level = "info";
};

Result<Config> LoadConfigFile(const std::string& path);
Result<Config> ParseConfig(const std::string& toml_text, const std::string& source_name);

// "host:port" → parts; port 0 allowed (any free port).
Result<std::pair<std::string, int>> ParseListenAddress(const std::string& text);

}  // namespace atrium
