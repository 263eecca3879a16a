// The gateway verbs' argument handling: what they refuse (exit 2) before
// they ever call the server, and that every verb is registered.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli.h"

namespace atrium::cli {
namespace {

struct Outcome {
  int exit_code = -1;
  std::string err;
};

// Parses and runs `args` as `atrium` would; parse errors exit 2 as in main.
Outcome RunAtrium(std::vector<std::string> args) {
  CLI::App app{"atrium"};
  CliOptions options;
  RegisterCommands(app, options);
  args.insert(args.begin(), "atrium");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  Outcome out;
  testing::internal::CaptureStderr();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    out.exit_code = RunSelected(app, options);
  } catch (const CLI::ParseError& e) {
    out.exit_code = e.get_exit_code() == 0 ? 0 : 2;
  }
  out.err = testing::internal::GetCapturedStderr();
  return out;
}

TEST(GatewayCommandsTest, EveryVerbIsRegistered) {
  for (const char* group : {"deployment", "entitlement", "limit", "usage"}) {
    CLI::App app{"atrium"};
    CliOptions options;
    RegisterCommands(app, options);
    EXPECT_NO_THROW(app.get_subcommand(group)) << group;
  }
  CLI::App app{"atrium"};
  CliOptions options;
  RegisterCommands(app, options);
  for (const char* verb : {"create", "list", "get", "update", "delete"}) {
    EXPECT_NO_THROW(app.get_subcommand("deployment")->get_subcommand(verb)) << verb;
  }
  for (const char* verb : {"grant", "revoke", "list"}) {
    EXPECT_NO_THROW(app.get_subcommand("entitlement")->get_subcommand(verb)) << verb;
  }
  for (const char* verb : {"get", "set"}) {
    EXPECT_NO_THROW(app.get_subcommand("limit")->get_subcommand(verb)) << verb;
  }
  for (const char* verb : {"list", "summary", "refusals"}) {
    EXPECT_NO_THROW(app.get_subcommand("usage")->get_subcommand(verb)) << verb;
  }
}

TEST(GatewayCommandsTest, UsageErrorsExit2BeforeAnyCall) {
  struct Case {
    std::vector<std::string> args;
    std::string says;  // in stderr ("" = any)
  };
  const std::vector<Case> cases = {
      {{"deployment", "create", "--model", "m", "--region", "r"}, ""},  // no --endpoint
      {{"deployment", "create", "--model", "m", "--region", "r", "--endpoint", "http://h=0"},
       "capacity"},
      {{"deployment", "update", "dep_x", "--endpoint", "http://h=8:100001"}, "max_prefill"},
      {{"deployment", "update", "dep_x", "--endpoint", "http://h=8:2:100001"}, "burst"},
      {{"deployment", "create", "--model", "m", "--region", "r", "--endpoint", "http://h",
        "--latency-tier", "fast"},
       ""},
      {{"deployment", "create", "--model", "m", "--region", "r", "--endpoint", "http://h",
        "--visibility", "public"},
       ""},
      {{"deployment", "update", "dep_x"}, "nothing to change"},
      {{"deployment", "get"}, ""},
      {{"entitlement", "grant", "acme"}, ""},
      {{"limit", "set", "acme"}, "nothing to set"},
      {{"limit", "set", "acme", "--priority", "batch"}, "--key"},
      {{"limit", "set", "acme", "--rpm", "-1"}, ""},
      {{"limit", "set", "acme", "--key", "k", "--priority", "urgent"}, ""},
      {{"usage", "summary", "--group-by", "tenant"}, ""},
      {{"usage", "list", "--limit", "0"}, ""},
  };
  for (const auto& c : cases) {
    Outcome o = RunAtrium(c.args);
    std::string line;
    for (const auto& a : c.args) line += a + " ";
    EXPECT_EQ(o.exit_code, 2) << line << "\n" << o.err;
    if (!c.says.empty()) {
      EXPECT_NE(o.err.find(c.says), std::string::npos) << line << ": " << o.err;
    }
  }
}

}  // namespace
}  // namespace atrium::cli
