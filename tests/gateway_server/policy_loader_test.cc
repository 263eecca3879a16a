#include "gateway_server/policy_loader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gateway_server/load_reporter.h"
#include "gateway_server/policy_cache.h"
#include "support/result_matchers.h"
#include "support/test_directory.h"

namespace atrium::gateway_server {
namespace {

GatewayPolicyRows Rows(const std::string& deployment_id, int64_t marker) {
  GatewayPolicyRows rows;
  Tenant t;
  t.id = "tn_a";
  t.name = "acme";
  t.regions = {"eu-west"};
  t.weight = 3;
  t.labels = {{"env", "prod"}};
  t.state = "active";
  rows.tenants = {t};
  GatewayKeyRow key;
  key.key.id = "key1";
  key.key.tenant_id = "tn_a";
  key.key.role = "tenant-member";
  key.key.scopes = {"llama"};
  key.key.secret_hash = std::string(64, 'a');
  key.key.expires_at = 1'900'000'000'000;
  key.owner_state = "active";
  key.owner_role = "tenant-member";
  rows.keys = {key};
  DeploymentRecord d;
  d.id = deployment_id;
  d.model = "llama";
  d.endpoints = {{"http://10.0.0.5:8000", 32, 2, 8}};
  d.region = "eu-west";
  d.latency_tier = "interactive";
  d.visibility = "shared";
  rows.deployments = {d};
  rows.entitlements = {{"tn_a", "llama", 5}};
  rows.limits = {{"tn_a", "", {60, 10'000, 4, 8}, "", 7}};
  rows.marker = marker;
  return rows;
}

class PolicyCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDirectory("atrium-policy");
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "policy.snapshot").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(PolicyCacheTest, RoundTripsEveryRowAndIsTheOwnersOnly) {
  ASSERT_OK(SavePolicyRows(path_, Rows("dep_1", 42), 1'800'000'000'000));
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = LoadPolicyRows(path_);
  ASSERT_OK(loaded);
  EXPECT_EQ(loaded->saved_at, 1'800'000'000'000);
  const GatewayPolicyRows& r = loaded->rows;
  EXPECT_EQ(r.marker, 42);
  ASSERT_EQ(r.tenants.size(), 1u);
  EXPECT_EQ(r.tenants[0].regions, std::vector<std::string>{"eu-west"});
  EXPECT_EQ(r.tenants[0].weight, 3);
  EXPECT_EQ(r.tenants[0].labels.at("env"), "prod");
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0].key.secret_hash, std::string(64, 'a'));
  EXPECT_EQ(r.keys[0].key.scopes, std::vector<std::string>{"llama"});
  EXPECT_EQ(r.keys[0].key.expires_at, 1'900'000'000'000);
  EXPECT_EQ(r.keys[0].owner_state, "active");
  ASSERT_EQ(r.deployments.size(), 1u);
  EXPECT_EQ(r.deployments[0].endpoints, Rows("dep_1", 0).deployments[0].endpoints);
  EXPECT_EQ(r.deployments[0].visibility, "shared");
  ASSERT_EQ(r.entitlements.size(), 1u);
  EXPECT_EQ(r.entitlements[0].model, "llama");
  ASSERT_EQ(r.limits.size(), 1u);
  EXPECT_EQ(r.limits[0].limits.tokens_per_minute, 10'000);
  EXPECT_EQ(r.limits[0].limits.max_queued, 8);
}

TEST_F(PolicyCacheTest, AMissingOrDamagedFileIsAnError) {
  auto missing = LoadPolicyRows(path_);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  for (const std::string text : {"{not json", R"({"format":99,"rows":{}})", R"([1,2])",
                                 R"({"format":1,"rows":{"tenants":7}})"}) {
    std::ofstream(path_) << text;
    auto damaged = LoadPolicyRows(path_);
    ASSERT_FALSE(damaged.has_value()) << text;
    EXPECT_EQ(damaged.error().code, ErrorCode::kInvalidArgument) << text;
  }
}

TEST_F(PolicyCacheTest, AGatewayStartedWhileTheStoreIsDownServesOnTheSavedPolicy) {
  std::atomic<bool> down{false};
  std::atomic<int64_t> marker{1};
  std::atomic<int> version{1};
  PolicySource source{[&]() -> Result<int64_t> {
                        if (down) return Error::Unavailable("store down");
                        return marker.load();
                      },
                      [&]() -> Result<GatewayPolicyRows> {
                        if (down) return Error::Unavailable("store down");
                        return Rows("dep_" + std::to_string(version.load()), marker.load());
                      }};
  {
    PolicyLoader first(source, 10'000, path_);
    ASSERT_OK(first.Start());  // saves what it loaded
    first.Stop();
  }
  down = true;
  PolicyLoader without_cache(source, 10'000);
  EXPECT_FALSE(without_cache.Start().has_value());  // nothing to serve on

  PolicyLoader restarted(source, 10'000, path_);
  ASSERT_OK(restarted.Start());
  EXPECT_NE(restarted.Current()->Deployment("dep_1"), nullptr);
  // The store is back, with a change: the next poll serves it (and saves it).
  version = 2;
  marker = 2;
  down = false;
  ASSERT_OK(restarted.Refresh());
  EXPECT_EQ(restarted.Current()->Deployment("dep_1"), nullptr);
  EXPECT_NE(restarted.Current()->Deployment("dep_2"), nullptr);
  restarted.Stop();
  auto saved = LoadPolicyRows(path_);
  ASSERT_OK(saved);
  EXPECT_EQ(saved->rows.deployments[0].id, "dep_2");
}

TEST_F(PolicyCacheTest, ASavedPolicyIsUsedOnlyWhenTheStoreCannotBeRead) {
  ASSERT_OK(SavePolicyRows(path_, Rows("dep_old", 1), 1));
  PolicySource source{[]() -> Result<int64_t> { return 5; },
                      []() -> Result<GatewayPolicyRows> { return Rows("dep_new", 5); }};
  PolicyLoader loader(source, 10'000, path_);
  ASSERT_OK(loader.Start());
  EXPECT_NE(loader.Current()->Deployment("dep_new"), nullptr);
  EXPECT_EQ(loader.Current()->Deployment("dep_old"), nullptr);
  loader.Stop();
}

// The load reporter sends one report per managed deployment of the newest
// snapshot (zeros where this gateway has seen nothing of it), none for an
// external one, under its gateway's id.
TEST(LoadReporterTest, ReportsEveryManagedDeploymentAndNoExternalOne) {
  GatewayPolicyRows rows = Rows("dep_external", 1);
  DeploymentRecord busy = rows.deployments[0];
  busy.id = "dep_busy";
  busy.serving = R"({"template":"engine-sim"})";
  DeploymentRecord idle = busy;
  idle.id = "dep_idle";
  rows.deployments.push_back(busy);
  rows.deployments.push_back(idle);
  PolicyLoader loader(
      {[] { return Result<int64_t>(1); }, [rows]() -> Result<GatewayPolicyRows> { return rows; }},
      1'000);
  ASSERT_TRUE(loader.Start().has_value());
  Dispatcher dispatcher(DispatcherOptions{});
  ManualClock clock(5'000'000);
  auto snapshot = loader.Current();
  const DeploymentRecord* target = snapshot->Deployment("dep_busy");
  ASSERT_NE(target, nullptr);
  for (uint64_t id = 1; id <= 3; ++id) {
    SlotRequest r;
    r.id = id;
    r.tenant_id = "tn_a";
    r.key_id = "key1";
    r.deployment = target;
    r.input_tokens = 10;
    r.reserved_tokens = 20;
    (void)dispatcher.Admit(r, clock.NowMillis(), [] {});
  }
  clock.AdvanceMillis(700);
  std::vector<std::vector<DeploymentLoadReport>> sent;
  LoadReporter reporter(dispatcher, loader, clock, {.gateway_id = "gw_1", .interval_ms = 0},
                        [&](const std::vector<DeploymentLoadReport>& r) {
                          sent.push_back(r);
                          return OkStatus();
                        });
  ASSERT_TRUE(reporter.ReportNow().has_value());
  ASSERT_EQ(sent.size(), 1U);
  ASSERT_EQ(sent[0].size(), 2U);
  std::map<std::string, DeploymentLoadReport> by_id;
  for (const auto& r : sent[0]) {
    EXPECT_EQ(r.gateway_id, "gw_1");
    EXPECT_EQ(r.reported_at, clock.NowMillis());
    by_id[r.deployment_id] = r;
  }
  ASSERT_TRUE(by_id.count("dep_busy") && by_id.count("dep_idle"));
  // One slot on the busy deployment's endpoint (capacity 32): all three start.
  EXPECT_EQ(by_id["dep_busy"].in_flight + by_id["dep_busy"].queued, 3);
  EXPECT_EQ(by_id["dep_idle"].in_flight, 0);
  EXPECT_EQ(by_id["dep_idle"].queued, 0);
  EXPECT_EQ(by_id["dep_idle"].oldest_wait_ms, 0);
  loader.Stop();
}

}  // namespace
}  // namespace atrium::gateway_server
