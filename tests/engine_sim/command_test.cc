#include "engine_sim/command.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <regex>
#include <sstream>

#include "http/client.h"
#include "support/result_matchers.h"

namespace atrium::engine_sim {
namespace {

TEST(EngineSimCommandTest, ParseListen) {
  auto v4 = ParseListen("127.0.0.1:8000");
  ASSERT_OK(v4);
  EXPECT_EQ(v4->first, "127.0.0.1");
  EXPECT_EQ(v4->second, 8000);
  auto v6 = ParseListen("[::1]:0");
  ASSERT_OK(v6);
  EXPECT_EQ(v6->first, "[::1]");
  EXPECT_EQ(v6->second, 0);
  EXPECT_ERROR(ParseListen("8000"), ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseListen("host:"), ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseListen("host:70000"), ErrorCode::kInvalidArgument);
  EXPECT_ERROR(ParseListen("::1:80"), ErrorCode::kInvalidArgument);
}

TEST(EngineSimCommandTest, PrintsOneLineServesAndStops) {
  ServerOptions options;
  options.profile = "instant";
  std::ostringstream out, err;
  int status = -1;
  const int rc = RunEngineSim(options, out, err, [&] {
    std::smatch match;
    const std::string line = out.str();
    ASSERT_TRUE(std::regex_search(
        line, match,
        std::regex(R"(^engine-sim \(simulator\) listening on http://127\.0\.0\.1:(\d+) )"
                   R"(model=llama-3\.1-8b-instruct profile=instant\n$)")))
        << line;
    auto client = http::Client::Create("http://127.0.0.1:" + match[1].str());
    ASSERT_TRUE(client.has_value());
    auto response = (*client)->Send("GET", "/healthz");
    ASSERT_OK(response);
    status = response->status;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(status, 200);
  EXPECT_NE(err.str().find("simulator"), std::string::npos);
}

TEST(EngineSimCommandTest, CannotStartIsExitOne) {
  ServerOptions options;
  options.host = "203.0.113.1";  // TEST-NET-3: not an address of this host
  std::ostringstream out, err;
  bool waited = false;
  EXPECT_EQ(RunEngineSim(options, out, err, [&] { waited = true; }), 1);
  EXPECT_FALSE(waited);
  EXPECT_TRUE(out.str().empty());
  EXPECT_NE(err.str().find("cannot start"), std::string::npos);
}

TEST(EngineSimCommandTest, FlagsAreCheckedAtParseTime) {
  auto parse = [](std::vector<std::string> args) {
    CLI::App app{"test"};
    RegisterEngineSimCommand(app);
    std::reverse(args.begin(), args.end());
    app.parse(args);
  };
  EXPECT_THROW(parse({"engine-sim", "--listen", "nonsense"}), CLI::ValidationError);
  EXPECT_THROW(parse({"engine-sim", "--profile", "b200"}), CLI::ValidationError);
  EXPECT_THROW(parse({"engine-sim", "--threads", "0"}), CLI::ValidationError);
  CLI::App app{"test"};
  RegisterEngineSimCommand(app);
  const std::string help = app.get_subcommand("engine-sim")->help();
  EXPECT_NE(help.find("simulator"), std::string::npos);
  EXPECT_NE(help.find("h100-llama3-8b"), std::string::npos);
}

}  // namespace
}  // namespace atrium::engine_sim
