// The `atrium` command-line verbs that talk to a running control plane:
// login, tenant, user, key, audit. Server and token come from --server /
// --token or ATRIUM_SERVER / ATRIUM_TOKEN; output is a table for people or
// JSON with -o json. Every failure prints a clear message and exits non-zero.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace atrium::cli {

struct CliOptions {
  std::string server;
  std::string token;
  std::string output = "table";  // table | json
};

// Adds the verbs as subcommands of `app`.
void RegisterCommands(CLI::App& app, CliOptions& options);
// Runs whichever verb was parsed; returns the process exit code.
int RunSelected(CLI::App& app, const CliOptions& options);

}  // namespace atrium::cli
