#include "sim/sim_command.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

namespace atrium::sim {
namespace {

struct SimOutput {
  int status;
  std::string out, err;
};

SimOutput RunSim(SimCommandOptions options) {
  std::ostringstream out, err;
  const int status = RunSimCommand(options, out, err);
  return {status, out.str(), err.str()};
}

TEST(SimCommandTest, JsonReportsEveryRequestedPolicy) {
  SimCommandOptions options;
  options.policies = "best-fit,atrium";
  options.seeds = 2;
  options.jobs = 2;
  options.json = true;
  const SimOutput run = RunSim(options);
  ASSERT_EQ(run.status, 0) << run.err;
  const auto doc = nlohmann::json::parse(run.out);
  EXPECT_EQ(doc["seeds"], 2);
  ASSERT_EQ(doc["policies"].size(), 2u);
  EXPECT_EQ(doc["policies"][0]["policy"], "best-fit");
  EXPECT_EQ(doc["policies"][1]["policy"], "atrium");
  for (const auto& p : doc["policies"]) {
    EXPECT_EQ(p["runs"], 2);
    const double at100 = p["alloc_pct"]["100"].get<double>();
    EXPECT_GT(at100, 85.0);
    EXPECT_LE(at100, 100.0);
    EXPECT_NEAR(p["unalloc_pct_at_100"].get<double>(), 100 - at100, 1e-9);
  }
}

TEST(SimCommandTest, TablePrintsAHeaderAndOneRowPerPolicy) {
  SimCommandOptions options;
  options.policies = "fgd";
  options.seeds = 1;
  const SimOutput run = RunSim(options);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("1213 nodes, 6212 GPUs"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("unalloc@100"), std::string::npos);
  EXPECT_NE(run.out.find("\nfgd "), std::string::npos);
}

TEST(SimCommandTest, BadOptionsExitTwoWithAReason) {
  SimCommandOptions unknown;
  unknown.policies = "fgd,fastest";
  SimOutput run = RunSim(unknown);
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("fastest"), std::string::npos) << run.err;
  EXPECT_TRUE(run.out.empty());

  SimCommandOptions seeds;
  seeds.seeds = 0;
  EXPECT_EQ(RunSim(seeds).status, 2);

  SimCommandOptions tune;
  tune.tune_ratio = -1;
  EXPECT_EQ(RunSim(tune).status, 2);

  SimCommandOptions missing;
  missing.pods = "/nonexistent/pods.csv";
  run = RunSim(missing);
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("/nonexistent/pods.csv"), std::string::npos);

  SimCommandOptions empty;
  empty.policies = ",";
  EXPECT_EQ(RunSim(empty).status, 2);
}

}  // namespace
}  // namespace atrium::sim
