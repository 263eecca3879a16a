// The job verbs' argument handling: every verb is registered, and what they
// refuse (exit 2) before they ever call the server.
#include <gtest/gtest.h>

#include <fstream>
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
// No server is configured, so a verb that got past its checks would try to
// connect and exit otherwise.
Outcome RunAtrium(std::vector<std::string> args) {
  CLI::App app{"atrium"};
  CliOptions options;
  options.server = "http://127.0.0.1:1";
  options.token = "atr_test";
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

TEST(JobCommandsTest, EveryVerbIsRegistered) {
  CLI::App app{"atrium"};
  CliOptions options;
  RegisterCommands(app, options);
  for (const char* verb : {"submit", "list", "get", "cancel", "logs", "events", "why"}) {
    EXPECT_NO_THROW(app.get_subcommand("job")->get_subcommand(verb)) << verb;
  }
  EXPECT_NO_THROW(app.get_subcommand("job")->get_subcommand("logs")->get_option("-f"));
}

TEST(JobCommandsTest, UsageErrorsExit2BeforeAnyCall) {
  const std::string script = testing::TempDir() + "/job_commands_test.sh";
  std::ofstream(script) << "echo hi\n";
  struct Case {
    std::vector<std::string> args;
    std::string says;  // in stderr ("" = any)
  };
  const std::vector<Case> cases = {
      {{"job", "submit", "--model", "H100-80GB", "--", "true"}, ""},  // no --name
      {{"job", "submit", "--name", "n", "--", "true"}, ""},           // no --model
      {{"job", "submit", "--name", "n", "--model", "H100-80GB"}, "one of them"},
      {{"job", "submit", "--name", "n", "--model", "H100-80GB", "--script", script, "--", "true"},
       "one of them"},
      {{"job", "submit", "--name", "n", "--model", "H100-80GB", "--script", "/no/such/file"},
       "cannot read"},
      {{"job", "submit", "--name", "n", "--model", "H100-80GB", "--env", "NOVALUE", "--", "true"},
       "NAME=VALUE"},
      {{"job", "submit", "--name", "n", "--model", "L40S", "--kind", "share", "--", "true"},
       "--share"},
      {{"job", "submit", "--name", "n", "--model", "H100-80GB", "--kind", "gang", "--", "true"},
       ""},
      {{"job", "submit", "--name", "n", "--model", "H100-80GB", "--restart", "always", "--",
        "true"},
       ""},
      {{"job", "submit", "--name", "n", "--model", "H100-80GB", "--time-limit", "0", "--", "true"},
       ""},
      {{"job", "list", "--state", "done"}, ""},
      {{"job", "logs"}, ""},
      {{"job", "logs", "job_x", "--offset", "-1"}, ""},
      {{"job", "cancel"}, ""},
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
