// GPU usage through the API: the meter bills the world's running
// allocations and records its jobs' runs, and each tenant reads its own
// records and totals (platform staff any tenant's), time held and time run
// by jobs apart; another tenant's id answers like a tenant that does not
// exist, and another tenant's job id finds nothing; bad query parameters
// are refused naming the problem.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "api/api_fixture.h"
#include "metering/gpu_meter.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::World;

constexpr int64_t kHourMs = metering::kHourMs;

std::string ErrorMessage(const http::Response& r) {
  Json j = BodyOf(r);
  return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
}

class GpuUsageApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    harness_ = new ApiHarness();
    world_ = new World(harness_->BuildWorld());
    // Two hours and a bit of the world's allocations, metered.
    harness_->clock().AdvanceMillis(2 * kHourMs + 60'000);
    metering::GpuMeterOptions o;
    o.interval_ms = 0;
    o.open_lag_ms = 0;
    metering::GpuMeter meter(harness_->store(), harness_->clock(), o);
    meter.AddSource(std::make_unique<metering::AllocationSubjectSource>(harness_->store()));
    meter.AddSource(std::make_unique<metering::JobSubjectSource>(harness_->store()));
    auto round = meter.Tick();
    ASSERT_TRUE(round.has_value()) << round.error().message;
    ASSERT_GT(round->records, 0);
  }
  static void TearDownTestSuite() {
    delete world_;
    delete harness_;
  }
  void TearDown() override {
    const auto& v = harness_->error_shape_violations();
    EXPECT_TRUE(v.empty()) << "an error answer lacked the common shape: " << v.front();
  }

  ApiHarness& h() { return *harness_; }
  const World& w() { return *world_; }
  const std::string& Admin() { return w().platform.at(Role::kPlatformAdmin).key; }
  const Actor& Member() { return w().own.members.at(Role::kTenantMember); }
  const Actor& Viewer() { return w().own.members.at(Role::kTenantViewer); }
  std::string Gpu(const std::string& tenant_id) {
    return "/api/v1/tenants/" + tenant_id + "/usage/gpu";
  }

  // Every record of the answer's pages, walking the cursor.
  std::vector<Json> Walk(const std::string& path, const std::string& bearer) {
    std::vector<Json> out;
    std::string cursor;
    for (int guard = 0; guard < 100; ++guard) {
      const char sep = path.find('?') == std::string::npos ? '?' : '&';
      http::Response r = h().Call(
          "GET", path + sep + "limit=2" + (cursor.empty() ? "" : "&cursor=" + cursor), bearer);
      EXPECT_EQ(r.status, 200) << r.body;
      Json page = BodyOf(r);
      for (const auto& item : page["items"]) out.push_back(item);
      if (!page["next_cursor"].is_string()) break;
      cursor = page["next_cursor"];
    }
    return out;
  }

  static ApiHarness* harness_;
  static World* world_;
};
ApiHarness* GpuUsageApiTest::harness_ = nullptr;
World* GpuUsageApiTest::world_ = nullptr;

TEST_F(GpuUsageApiTest, TheTenantReadsWhatItsAllocationsHeldNewestFirst) {
  const std::vector<Json> records = Walk(Gpu(w().own.id), Member().key);
  std::map<std::string, int64_t> billed;
  std::string previous_from = "9999";
  for (const auto& r : records) {
    EXPECT_EQ(r["tenant_id"], w().own.id);
    EXPECT_LE(r["from"].get<std::string>(), previous_from) << "newest first";
    previous_from = r["from"];
    billed[r["subject_id"]] += r["gpu_milli_ms"].get<int64_t>();
    EXPECT_DOUBLE_EQ(r["gpu_seconds"].get<double>(), r["gpu_milli_ms"].get<int64_t>() / 1e6);
  }
  // The object's allocation: a 1-milli L40S share, held from its placement
  // to the last hour boundary before now.
  auto a = h().store().GetAllocation(TenantScope::Of(w().own.id), w().own.allocation_id);
  ASSERT_TRUE(a.has_value());
  ASSERT_GE(a->placed_ms, 0);
  const int64_t last_boundary = h().clock().NowMillis() / kHourMs * kHourMs;
  EXPECT_EQ(billed[w().own.allocation_id], a->charge_milli * (last_boundary - a->placed_ms));
  EXPECT_EQ(billed["al_past_" + w().own.name], 1000 * 60'000);
  // No record of the other tenant's allocation.
  EXPECT_EQ(billed.count(w().other.allocation_id), 0u);

  // Filters: model, project, time.
  for (const auto& r : Walk(Gpu(w().own.id) + "?model=L40S", Viewer().key)) {
    EXPECT_EQ(r["model"], "L40S");
    EXPECT_EQ(r["kind"], "share");
    EXPECT_TRUE(r["mig_profile"].is_null());
  }
  EXPECT_EQ(Walk(Gpu(w().own.id) + "?model=H100-80GB", Viewer().key).size(), 1u);
  EXPECT_TRUE(Walk(Gpu(w().own.id) + "?project=no-such-project", Viewer().key).empty());
  const std::string from = FormatTimestamp(last_boundary - kHourMs);
  for (const auto& r : Walk(Gpu(w().own.id) + "?from=" + from, Viewer().key)) {
    EXPECT_GE(r["from"].get<std::string>(), from);
  }
}

TEST_F(GpuUsageApiTest, TotalsAddUpPerModelAndKindAndPerProject) {
  // Held time (billed) and time run by jobs are summed apart, never together.
  int64_t sum = 0;
  for (const auto& r : Walk(Gpu(w().own.id) + "?subject_kind=allocation", Member().key)) {
    EXPECT_EQ(r["subject_kind"], "allocation");
    sum += r["gpu_milli_ms"].get<int64_t>();
  }
  int64_t ran = 0;
  for (const auto& r : Walk(Gpu(w().own.id) + "?subject_kind=job", Member().key)) {
    EXPECT_EQ(r["subject_kind"], "job");
    ran += r["gpu_milli_ms"].get<int64_t>();
  }
  EXPECT_GT(ran, 0);
  Json total = BodyOf(h().Call("GET", Gpu(w().own.id) + "/summary", Viewer().key));
  ASSERT_EQ(total["items"].size(), 1u) << total.dump();
  EXPECT_EQ(total["items"][0]["gpu_milli_ms"], sum);
  ASSERT_EQ(total["run_by_jobs"].size(), 1u) << total.dump();
  EXPECT_EQ(total["run_by_jobs"][0]["gpu_milli_ms"], ran);
  EXPECT_TRUE(total["group_by"].is_null());

  Json by_model =
      BodyOf(h().Call("GET", Gpu(w().own.id) + "/summary?group_by=model", Viewer().key));
  ASSERT_EQ(by_model["items"].size(), 2u) << by_model.dump();
  EXPECT_EQ(by_model["items"][0]["model"], "H100-80GB");
  EXPECT_EQ(by_model["items"][0]["kind"], "whole");
  EXPECT_EQ(by_model["items"][0]["gpu_milli_ms"], 1000 * 60'000);
  EXPECT_EQ(by_model["items"][1]["model"], "L40S");
  EXPECT_EQ(by_model["items"][1]["kind"], "share");
  EXPECT_EQ(by_model["items"][0]["gpu_milli_ms"].get<int64_t>() +
                by_model["items"][1]["gpu_milli_ms"].get<int64_t>(),
            sum);

  Json by_project =
      BodyOf(h().Call("GET", Gpu(w().own.id) + "/summary?group_by=project", Viewer().key));
  int64_t project_sum = 0;
  for (const auto& t : by_project["items"]) project_sum += t["gpu_milli_ms"].get<int64_t>();
  EXPECT_EQ(project_sum, sum);
}

// The world's tenants run no managed deployment: all their GPU time sums
// under a null deployment, and a deployment's filter finds none of it.
TEST_F(GpuUsageApiTest, TotalsPerDeploymentPutTheTenantsOwnWorkUnderNull) {
  Json total = BodyOf(h().Call("GET", Gpu(w().own.id) + "/summary", Viewer().key));
  Json per =
      BodyOf(h().Call("GET", Gpu(w().own.id) + "/summary?group_by=deployment", Viewer().key));
  EXPECT_EQ(per["group_by"], "deployment");
  ASSERT_EQ(per["items"].size(), 1u) << per.dump();
  EXPECT_TRUE(per["items"][0]["deployment_id"].is_null());
  EXPECT_EQ(per["items"][0]["gpu_milli_ms"], total["items"][0]["gpu_milli_ms"]);
  for (const auto& r : Walk(Gpu(w().own.id), Viewer().key)) {
    EXPECT_TRUE(r["deployment_id"].is_null()) << r.dump();
  }
  EXPECT_TRUE(Walk(Gpu(w().own.id) + "?deployment=dep_none", Viewer().key).empty());
  Json none =
      BodyOf(h().Call("GET", Gpu(w().own.id) + "/summary?deployment=dep_none", Viewer().key));
  EXPECT_EQ(none["items"][0]["gpu_milli_ms"], 0);
}

TEST_F(GpuUsageApiTest, AJobsRunsAreReadByItsIdAndOnlyByItsTenant) {
  // The member's job runs on the fake backend since the world was built:
  // one subject, attempt 1, "<job id>.1".
  const std::string job = Member().job_id;
  ASSERT_FALSE(job.empty());
  const std::vector<Json> records = Walk(Gpu(w().own.id) + "?job=" + job, Viewer().key);
  ASSERT_FALSE(records.empty());
  for (const auto& r : records) {
    EXPECT_EQ(r["subject_kind"], "job");
    EXPECT_EQ(r["subject_id"], job + ".1");
    EXPECT_EQ(r["tenant_id"], w().own.id);
  }
  // Another tenant's member: 404 on the owner's path, nothing on its own.
  const Actor& intruder = w().other.members.at(Role::kTenantAdmin);
  for (const std::string& suffix : std::vector<std::string>{"?job=" + job, "?subject_kind=job"}) {
    http::Response r = h().Call("GET", Gpu(w().own.id) + suffix, intruder.key);
    EXPECT_EQ(r.status, 404) << suffix << ": " << r.body;
    EXPECT_EQ(ErrorMessage(r),
              ErrorMessage(h().Call("GET", Gpu("tn_nope") + suffix, intruder.key)));
  }
  EXPECT_TRUE(Walk(Gpu(w().other.id) + "?job=" + job, intruder.key).empty());
  // Platform staff read the owner's.
  EXPECT_EQ(Walk(Gpu(w().own.id) + "?job=" + job, Admin()).size(), records.size());
}

TEST_F(GpuUsageApiTest, AnotherTenantsUsageAnswersLikeATenantThatDoesNotExist) {
  for (const std::string suffix :
       {"", "/summary", "?deployment=dep_1", "/summary?group_by=deployment"}) {
    http::Response other = h().Call("GET", Gpu(w().other.id) + suffix, Member().key);
    EXPECT_EQ(other.status, 404) << suffix;
    EXPECT_EQ(ErrorMessage(other),
              ErrorMessage(h().Call("GET", Gpu("tn_nope") + suffix, Member().key)));
  }
  // Platform staff read any tenant's, and only that tenant's.
  const std::vector<Json> others = Walk(Gpu(w().other.id), Admin());
  ASSERT_FALSE(others.empty());
  for (const auto& r : others) EXPECT_EQ(r["tenant_id"], w().other.id);
}

TEST_F(GpuUsageApiTest, BadQueryParametersAreRefusedNamingTheProblem) {
  struct Probe {
    std::string query;
    std::string says;
  };
  const std::vector<Probe> list_probes = {
      {"?from=yesterday", "from"},
      {"?to=2026-02-30T00:00:00Z", "to"},
      {"?from=2000&to=1000", "'to' must be after 'from'"},
      {"?cursor=garbage", "cursor"},
      {"?cursor=12.", "cursor"},
      {"?limit=0", "limit"},
      {"?model=" + std::string(201, 'm'), "at most 200"},
      {"?project=" + std::string(201, 'p'), "at most 200"},
      {"?group_by=model", "group_by"},  // a summary parameter, not a list one
      {"?subject_kind=node", "subject_kind must be allocation or job"},
      {"?job=job_1.1", "'job' must be a job id"},
      {"?job=job_1%25", "'job' must be a job id"},
      {"?job=" + std::string(201, 'j'), "'job' must be a job id"},
      {"?job=job_1&subject_kind=allocation", "subject_kind must be job"},
      {"?deployment=dep.1", "'deployment' must be a deployment id"},
      {"?deployment=" + std::string(201, 'd'), "'deployment' must be a deployment id"},
  };
  for (const auto& p : list_probes) {
    http::Response r = h().Call("GET", Gpu(w().own.id) + p.query, Member().key);
    EXPECT_EQ(r.status, 400) << p.query;
    EXPECT_NE(ErrorMessage(r).find(p.says), std::string::npos) << p.query << ": " << r.body;
  }
  const std::vector<Probe> summary_probes = {
      {"?group_by=key", "group_by must be model, project or deployment"},
      {"?group_by=tenant", "group_by must be model, project or deployment"},
      {"?deployment=dep_1%27%20OR%201=1", "'deployment' must be a deployment id"},
      {"?from=2000&to=1000", "'to' must be after 'from'"},
      {"?limit=5", "limit"},
      {"?job=job_1", "job"},  // a list parameter, not a summary one
  };
  for (const auto& p : summary_probes) {
    http::Response r = h().Call("GET", Gpu(w().own.id) + "/summary" + p.query, Member().key);
    EXPECT_EQ(r.status, 400) << p.query;
    EXPECT_NE(ErrorMessage(r).find(p.says), std::string::npos) << p.query << ": " << r.body;
  }
}

}  // namespace
}  // namespace atrium::api
