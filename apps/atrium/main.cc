// The one binary. Only argument parsing and start-up live here; everything
// else is in the libraries under src/ that the tests use too.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/cli.h"
#include "runtime/config.h"
#include "runtime/platform.h"

namespace {

using atrium::Config;
using atrium::Platform;

// Writes the bootstrap admin key to path with mode 0600, keeping an existing
// one if it still authenticates.
bool EnsureAdminToken(Platform& platform, const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string existing;
  if (in && std::getline(in, existing) && platform.identity().IsValidCredential(existing)) {
    return true;
  }
  auto key = platform.identity().BootstrapAdminKey("bootstrap-admin");
  if (!key.has_value()) {
    spdlog::error("cannot create the bootstrap admin key: {}", key.error().message);
    return false;
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    spdlog::error("cannot write {}", path.string());
    return false;
  }
  ::fchmod(fd, 0600);
  std::string line = *key + "\n";
  bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  return ok;
}

int RunPlatform(Config config, const std::filesystem::path* data_dir) {
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  Platform platform(std::move(config));
  auto url = platform.Start();
  if (!url.has_value()) {
    std::cerr << "atrium: cannot start: " << url.error().message << "\n";
    return 1;
  }
  if (data_dir && !EnsureAdminToken(platform, *data_dir / "admin.token")) return 1;
  std::cout << "API: " << *url << std::endl;
  if (data_dir) {
    std::cout << "Admin token: " << (*data_dir / "admin.token").string() << std::endl;
  }
  int sig = atrium::WaitForStopSignal();
  spdlog::info("signal {}: draining requests and stopping", sig);
  platform.Stop();
  spdlog::info("stopped cleanly");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, so that only WaitForStopSignal sees them.
  atrium::BlockStopSignals();

  CLI::App app{"Atrium: a multi-tenant GPU cloud platform"};
  app.require_subcommand(1);

  std::string data_dir = ".atrium";
  std::string api_listen = "127.0.0.1:8080";
  auto* dev = app.add_subcommand("dev", "Run every role in one process on an embedded store");
  dev->add_option("--data", data_dir, "State directory (kept across restarts)")
      ->capture_default_str();
  dev->add_option("--api-listen", api_listen, "API listen address HOST:PORT (port 0: any free)")
      ->capture_default_str();

  std::string config_path;
  auto* server = app.add_subcommand("server", "Run the control plane from a configuration file");
  server->add_option("--config", config_path, "TOML configuration file")->required();

  atrium::cli::CliOptions cli_options;
  atrium::cli::RegisterCommands(app, cli_options);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (dev->parsed()) {
    std::error_code ec;
    std::filesystem::create_directories(data_dir, ec);
    if (ec) {
      std::cerr << "atrium: cannot create " << data_dir << ": " << ec.message() << "\n";
      return 1;
    }
    ::chmod(data_dir.c_str(), 0700);
    std::filesystem::path dir = std::filesystem::absolute(data_dir);
    Config config;
    config.store_url = "sqlite://" + (dir / "atrium.db").string();
    config.api_listen = api_listen;
    if (auto listen = atrium::ParseListenAddress(api_listen); !listen.has_value()) {
      std::cerr << "atrium: " << listen.error().message << "\n";
      return 2;
    }
    return RunPlatform(std::move(config), &dir);
  }
  if (server->parsed()) {
    auto config = atrium::LoadConfigFile(config_path);
    if (!config.has_value()) {
      std::cerr << "atrium: " << config.error().message << "\n";
      return 2;
    }
    return RunPlatform(std::move(*config), nullptr);
  }
  return atrium::cli::RunSelected(app, cli_options);
}
