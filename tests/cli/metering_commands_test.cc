// The GPU usage verbs: registered under `usage`, what they refuse (exit 2)
// before calling the server, and the exact GPU-seconds text of the tables.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/commands.h"

namespace atrium::cli {
namespace {

int RunAtrium(std::vector<std::string> args) {
  CLI::App app{"atrium"};
  CliOptions options;
  RegisterCommands(app, options);
  args.insert(args.begin(), "atrium");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  testing::internal::CaptureStderr();
  int code = -1;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    code = RunSelected(app, options);
  } catch (const CLI::ParseError& e) {
    code = e.get_exit_code() == 0 ? 0 : 2;
  }
  testing::internal::GetCapturedStderr();
  return code;
}

TEST(MeteringCommandsTest, GpuVerbsAreRegisteredUnderUsage) {
  CLI::App app{"atrium"};
  CliOptions options;
  RegisterCommands(app, options);
  for (const char* verb : {"gpu", "gpu-summary", "summary", "list", "refusals"}) {
    EXPECT_NO_THROW(app.get_subcommand("usage")->get_subcommand(verb)) << verb;
  }
}

TEST(MeteringCommandsTest, BadArgumentsExit2BeforeAnyCall) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"usage", "gpu-summary", "--group-by", "key"},
           {"usage", "gpu-summary", "--group-by", "tenant"},
           {"usage", "gpu", "--limit", "0"},
           {"usage", "gpu", "--limit", "1001"},
           {"usage", "gpu", "--all", "--cursor", "x"},
           {"usage", "gpu", "--key", "k_1"},  // GPU time has no API key
           {"usage", "gpu", "--of", "node"},
           {"usage", "gpu-summary", "--job", "job_1"},  // a listing filter only
           {"usage", "summary", "--group-by", "tenant"},
           {"usage", "refusals", "--deployment", "dep_1"},  // refusals have no deployment
       }) {
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_EQ(RunAtrium(args), 2) << line;
  }
}

TEST(MeteringCommandsTest, GpuSecondsAreExactToTheThousandth) {
  EXPECT_EQ(GpuSecondsText(0), "0.000");
  EXPECT_EQ(GpuSecondsText(999), "0.000");  // truncated, never rounded up
  EXPECT_EQ(GpuSecondsText(1000), "0.001");
  EXPECT_EQ(GpuSecondsText(1'234'567), "1.234");
  EXPECT_EQ(GpuSecondsText(3'600'000'000), "3600.000");  // one GPU for an hour
  EXPECT_EQ(GpuSecondsText(INT64_MAX), "9223372036854.775");
  EXPECT_EQ(GpuSecondsText(INT64_MIN), "-9223372036854.775");
}

TEST(MeteringCommandsTest, TotalsRowsNameTheirGroupAndRefuseAMissingAmount) {
  Json summary = Json::parse(R"({"items": [
      {"model": "H100-80GB", "kind": "whole", "records": 3, "gpu_milli_ms": 7200000000},
      {"model": "L40S", "kind": "share", "records": 1, "gpu_milli_ms": 250000}]})");
  auto rows = GpuTotalsRows(summary, "model");
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<std::vector<std::string>>{{"H100-80GB", "whole", "3", "7200.000"},
                                                          {"L40S", "share", "1", "0.250"}}));
  EXPECT_EQ(GpuTotalsHeader("model").size(), rows->front().size());
  Json total = Json::parse(R"({"items": [{"records": 2, "gpu_milli_ms": 5}]})");
  rows = GpuTotalsRows(total, "");
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->front().front(), "total");
  Json per_deployment = Json::parse(R"({"items": [
      {"deployment_id": null, "records": 1, "gpu_milli_ms": 1000},
      {"deployment_id": "dep_chat", "records": 2, "gpu_milli_ms": 2000000}]})");
  rows = GpuTotalsRows(per_deployment, "deployment");
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(*rows, (std::vector<std::vector<std::string>>{{"-", "1", "0.001"},
                                                          {"dep_chat", "2", "2.000"}}));
  EXPECT_EQ(GpuTotalsHeader("deployment").front(), "DEPLOYMENT");
  Json broken = Json::parse(R"({"items": [{"records": 2, "gpu_seconds": 1.5}]})");
  EXPECT_FALSE(GpuTotalsRows(broken, "").has_value());
}

TEST(MeteringCommandsTest, TheSummaryShowsTimeHeldAndTimeRunByJobsApart) {
  Json summary = Json::parse(R"({"items": [{"records": 3, "gpu_milli_ms": 7200000000}],
      "run_by_jobs": [{"records": 2, "gpu_milli_ms": 1500000}]})");
  auto text = GpuSummaryText(summary, "");
  ASSERT_TRUE(text.has_value()) << text.error().message;
  const size_t held = text->find("GPU time held (billed):");
  const size_t jobs = text->find("GPU time run by jobs (within the time held above; not billed");
  ASSERT_NE(held, std::string::npos) << *text;
  ASSERT_NE(jobs, std::string::npos) << *text;
  EXPECT_LT(held, jobs);
  EXPECT_LT(text->find("7200.000"), jobs) << *text;
  EXPECT_GT(text->find("1.500"), jobs) << *text;
  // No job ran: said so; an older server without run_by_jobs: held only.
  summary["run_by_jobs"] = Json::array();
  EXPECT_NE(GpuSummaryText(summary, "")->find("not billed on top):\nnone\n"), std::string::npos);
  summary.erase("run_by_jobs");
  EXPECT_EQ(GpuSummaryText(summary, "")->find("run by jobs"), std::string::npos);
  summary["run_by_jobs"] = Json::parse(R"([{"records": 1}])");
  EXPECT_FALSE(GpuSummaryText(summary, "").has_value());
}

}  // namespace
}  // namespace atrium::cli
