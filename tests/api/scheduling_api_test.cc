// The capacity, quota, project and allocation routes: strict input that
// changes nothing when refused, 201/202/409 for allocations, explanations,
// tenant visibility on the fleet, and eviction releasing what a tenant holds.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "api/api_fixture.h"
#include "scheduler/allocation.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::TenantSeed;

class SchedulingApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = h_.CreateTenant("acme");
    b_ = h_.CreateTenant("bolt");
    alice_ = h_.CreateActor(a_.id, a_.name, Role::kTenantAdmin, /*human=*/false);
    bob_ = h_.CreateActor(b_.id, b_.name, Role::kTenantAdmin, /*human=*/false);
    SetQuota(a_.id, {{"model", "H100-80GB"},
                     {"kind", "gpu"},
                     {"guarantee_milli", 4000},
                     {"limit_milli", 4000}});
    SetQuota(a_.id, {{"model", "A100-80GB"},
                     {"kind", "mig"},
                     {"guarantee_milli", 1000},
                     {"limit_milli", 1000}});
  }

  void SetQuota(const std::string& tenant, const Json& body) {
    http::Response r =
        h_.CallJson("PUT", "/api/v1/tenants/" + tenant + "/quotas", h_.root_key(), body);
    ASSERT_EQ(r.status, 200) << r.body;
  }

  http::Response Allocate(const Actor& who, const Json& body) {
    return h_.CallJson("POST", "/api/v1/allocations", who.key, body);
  }

  int64_t Rows(const std::string& sql) {
    auto r = h_.store().database().Exec(sql, {});
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  ApiHarness h_;
  TenantSeed a_, b_;
  Actor alice_, bob_;
};

TEST_F(SchedulingApiTest, BadAllocationRequestsAreRefusedAndChangeNothing) {
  const int64_t allocations = Rows("SELECT COUNT(*) FROM allocations");
  const int64_t audit = Rows("SELECT COUNT(*) FROM audit_log WHERE action LIKE 'scheduler.%'");
  struct Case {
    Json body;
    int status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"colour", "red"}}, 400, "colour"},
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", "two"}}, 400, "'gpus'"},
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 9}}, 400, "'gpus'"},
      {{{"kind", "tpu"}, {"model", "H100-80GB"}}, 400, "kind must be one of"},
      {{{"kind", "gpu"}, {"model", "B300"}}, 400, "unknown GPU model"},
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"nodes", 2}}, 400, "kind gang"},
      {{{"kind", "gang"}, {"model", "H100-80GB"}}, 400, "'nodes'"},
      {{{"kind", "mig"}, {"model", "A100-80GB"}}, 400, "mig_profile"},
      {{{"kind", "mig"}, {"model", "A100-80GB"}, {"mig_profile", "9g.99gb"}}, 400, "9g.99gb"},
      {{{"kind", "share"},
        {"model", "L40S"},
        {"milli", 250},
        {"gpu_memory_mib", 1024},
        {"gpus", 1}},
       400,
       "'gpus'"},
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"priority", "urgent"}}, 400, "urgent"},
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"project", "nope"}}, 400, "nope"},
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"tenant_id", b_.id}}, 404, "not found"},
      // Never fits: over the limit, and a class without quota.
      {{{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 8}}, 409, "never fit"},
      {{{"kind", "gpu"}, {"model", "L40S"}}, 409, "never fit"},
  };
  for (const auto& c : cases) {
    http::Response r = Allocate(alice_, c.body);
    EXPECT_EQ(r.status, c.status) << c.body.dump() << " -> " << r.body;
    EXPECT_NE(r.body.find(c.says), std::string::npos) << c.body.dump() << " -> " << r.body;
  }
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM allocations"), allocations);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM audit_log WHERE action LIKE 'scheduler.%'"), audit);
  // Platform staff must name the tenant.
  http::Response staff = h_.CallJson("POST", "/api/v1/allocations", h_.root_key(),
                                     {{"kind", "gpu"}, {"model", "L40S"}});
  EXPECT_EQ(staff.status, 400) << staff.body;
}

TEST_F(SchedulingApiTest, QueuedRequestsAnswer202AndExplainWhy) {
  http::Response placed = Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 4}});
  ASSERT_EQ(placed.status, 201) << placed.body;
  http::Response queued = Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 2}});
  ASSERT_EQ(queued.status, 202) << queued.body;
  Json q = BodyOf(queued);
  EXPECT_EQ(q["state"], "pending");
  const std::string id = q["id"].get<std::string>();
  http::Response why = h_.Call("GET", "/api/v1/allocations/" + id + "/why", alice_.key);
  ASSERT_EQ(why.status, 200) << why.body;
  EXPECT_NE(BodyOf(why)["explanation"].get<std::string>().find("quota"), std::string::npos)
      << why.body;
  // Releasing the first makes room within the quota: the second runs.
  const std::string first = BodyOf(placed)["id"].get<std::string>();
  http::Response released = h_.Call("DELETE", "/api/v1/allocations/" + first, alice_.key);
  ASSERT_EQ(released.status, 200) << released.body;
  EXPECT_EQ(BodyOf(released)["state"], "released");
  Json now = BodyOf(h_.Call("GET", "/api/v1/allocations/" + id, alice_.key));
  EXPECT_EQ(now["state"], "running") << now.dump();
  // The release was the caller's; the placement it allowed, the scheduler's.
  auto rows = h_.store().database().Exec(
      "SELECT actor FROM audit_log WHERE action = 'scheduler.placed' AND target LIKE $1",
      {"%" + id});
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_EQ(rows->rows[0].Text(0), scheduling::kSchedulerActor);
  // Releasing again is a conflict, not a second release.
  EXPECT_EQ(h_.Call("DELETE", "/api/v1/allocations/" + first, alice_.key).status, 409);
}

TEST_F(SchedulingApiTest, TenantsSeeOnlyTheirOwnAllocationsOnTheFleet) {
  SetQuota(
      b_.id,
      {{"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", 1000}, {"limit_milli", 1000}});
  SetQuota(
      a_.id,
      {{"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", 1000}, {"limit_milli", 1000}});
  Json share = {{"kind", "share"},
                {"model", "L40S"},
                {"milli", 100},
                {"gpu_memory_mib", 1024},
                {"pool", "default"}};
  Json mine = BodyOf(Allocate(alice_, share));
  Json theirs = BodyOf(Allocate(bob_, share));
  ASSERT_EQ(mine["state"], "running") << mine.dump();
  ASSERT_EQ(theirs["state"], "running") << theirs.dump();
  const std::string node = mine["placement"][0]["node"].get<std::string>();
  ASSERT_EQ(theirs["placement"][0]["node"], node) << "shares of shared tenants pack together";
  auto ids_on = [&](const std::string& key) {
    std::set<std::string> ids;
    Json n = BodyOf(h_.Call("GET", "/api/v1/nodes/" + node, key));
    for (const auto& g : n["gpus"]) {
      for (const auto& a : g["allocations"]) ids.insert(a["id"].get<std::string>());
    }
    return ids;
  };
  EXPECT_EQ(ids_on(alice_.key), std::set<std::string>{mine["id"].get<std::string>()});
  EXPECT_EQ(ids_on(h_.root_key()).size(), 2u);
  Json list = BodyOf(h_.Call("GET", "/api/v1/nodes?model=l40s", bob_.key));
  for (const auto& n : list["items"]) {
    for (const auto& id : n["allocations"]) EXPECT_EQ(id, theirs["id"]);
  }
  // Tenant lists: the caller's own; staff filter by tenant.
  Json a_list = BodyOf(h_.Call("GET", "/api/v1/allocations", alice_.key));
  ASSERT_EQ(a_list["items"].size(), 1u);
  EXPECT_EQ(h_.Call("GET", "/api/v1/allocations?tenant_id=" + b_.id, alice_.key).status, 404);
  Json b_list = BodyOf(h_.Call("GET", "/api/v1/allocations?tenant_id=" + b_.id, h_.root_key()));
  ASSERT_EQ(b_list["items"].size(), 1u);
  EXPECT_EQ(b_list["items"][0]["id"], theirs["id"]);
}

TEST_F(SchedulingApiTest, QuotaAndProjectInputIsStrict) {
  const std::string q = "/api/v1/tenants/" + a_.id + "/quotas";
  Json before = BodyOf(h_.Call("GET", q, alice_.key));
  for (const Json& bad :
       {Json{{"model", "H100-80GB"},
             {"kind", "gpu"},
             {"guarantee_milli", 5000},
             {"limit_milli", 4000}},
        Json{{"model", "B300"}, {"kind", "gpu"}, {"guarantee_milli", 1}, {"limit_milli", 1}},
        Json{{"model", "H100-80GB"}, {"kind", "gang"}, {"guarantee_milli", 1}, {"limit_milli", 1}},
        Json{{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", -1}, {"limit_milli", 1}},
        Json{{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 1}}}) {
    http::Response r = h_.CallJson("PUT", q, h_.root_key(), bad);
    EXPECT_EQ(r.status, 400) << bad.dump() << " -> " << r.body;
  }
  EXPECT_EQ(BodyOf(h_.Call("GET", q, alice_.key)), before);
  // Tenant admins may not set their own quota, only split it.
  EXPECT_EQ(
      h_.CallJson(
            "PUT", q, alice_.key,
            {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 1}, {"limit_milli", 1}})
          .status,
      403);
  const std::string p = "/api/v1/tenants/" + a_.id + "/projects";
  EXPECT_EQ(h_.CallJson("POST", p, alice_.key, {{"name", "Bad Name"}}).status, 400);
  ASSERT_EQ(h_.CallJson("POST", p, alice_.key, {{"name", "ml"}}).status, 201);
  EXPECT_EQ(h_.CallJson("POST", p, alice_.key, {{"name", "ml"}}).status, 409);
  http::Response over = h_.CallJson(
      "PUT", p + "/ml/quotas", alice_.key,
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 5000}, {"limit_milli", 5000}});
  EXPECT_EQ(over.status, 400) << over.body;
  http::Response split = h_.CallJson(
      "PUT", p + "/ml/quotas", alice_.key,
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 2000}, {"limit_milli", 4000}});
  ASSERT_EQ(split.status, 200) << split.body;
  EXPECT_EQ(BodyOf(split)["quotas"][0]["resource_class"], "H100-80GB/gpu");
  Json a = BodyOf(Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"project", "ml"}}));
  ASSERT_EQ(a["state"], "running") << a.dump();
  EXPECT_EQ(h_.Call("DELETE", p + "/ml", alice_.key).status, 409);
  Json quotas = BodyOf(h_.Call("GET", q, alice_.key));
  EXPECT_EQ(quotas["items"][1]["resource_class"], "H100-80GB/gpu");
  EXPECT_EQ(quotas["items"][1]["used_milli"], 1000) << quotas.dump();
}

// Regression (issue 16, item 5): changing a shared tenant to dedicated-gpu
// answered 200 while its share still sat on a GPU beside another tenant's.
// The change is refused (409) naming the allocation, and nothing changes;
// once the other tenant's share is gone it is accepted.
TEST_F(SchedulingApiTest, RaisingTheTierIsRefusedWhileTheTenantSharesAGpu) {
  for (const std::string& tenant : {a_.id, b_.id}) {
    SetQuota(
        tenant,
        {{"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", 1000}, {"limit_milli", 1000}});
  }
  const Json share = {{"kind", "share"}, {"model", "L40S"}, {"milli", 300}, {"gpu_memory_mib", 16}};
  Json mine = BodyOf(Allocate(alice_, share));
  ASSERT_EQ(mine["state"], "running") << mine.dump();
  Json theirs = BodyOf(Allocate(bob_, share));
  ASSERT_EQ(theirs["state"], "running") << theirs.dump();
  ASSERT_EQ(mine["placement"], theirs["placement"]) << "the shares should pack onto one GPU";

  const std::string tenant = "/api/v1/tenants/" + a_.id;
  http::Response refused =
      h_.CallJson("PATCH", tenant, h_.root_key(), {{"tier", "dedicated-gpu"}, {"weight", 3}});
  EXPECT_EQ(refused.status, 409) << refused.body;
  EXPECT_NE(refused.body.find(mine["id"].get<std::string>()), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("share a GPU with other tenants"), std::string::npos) << refused.body;
  Json row = BodyOf(h_.Call("GET", tenant, h_.root_key()));
  EXPECT_EQ(row["tier"], "shared");
  EXPECT_EQ(row["weight"], 1) << "a refused change changes nothing";

  ASSERT_EQ(
      h_.Call("DELETE", "/api/v1/allocations/" + theirs["id"].get<std::string>(), bob_.key).status,
      200);
  http::Response accepted =
      h_.CallJson("PATCH", tenant, h_.root_key(), {{"tier", "dedicated-gpu"}});
  ASSERT_EQ(accepted.status, 200) << accepted.body;
  EXPECT_EQ(BodyOf(accepted)["tier"], "dedicated-gpu");
  // The new tier holds: bolt's next share does not land beside acme's.
  Json next = BodyOf(Allocate(bob_, share));
  ASSERT_EQ(next["state"], "running") << next.dump();
  EXPECT_NE(next["placement"], mine["placement"]);
}

// Regression (issue 16, item 8): a project quota of 0/0 removed the
// project's row, so the project was limited by the tenant's quota only,
// while the same body for a tenant denies the class. A 0/0 project row now
// denies the class to the project; DELETE of the row goes back to "limited
// by the tenant's quota only".
TEST_F(SchedulingApiTest, ProjectQuotaOfZeroDeniesTheClassUntilTheRowIsRemoved) {
  const std::string p = "/api/v1/tenants/" + a_.id + "/projects";
  ASSERT_EQ(h_.CallJson("POST", p, alice_.key, {{"name", "ml"}}).status, 201);
  http::Response zero = h_.CallJson(
      "PUT", p + "/ml/quotas", alice_.key,
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 0}, {"limit_milli", 0}});
  ASSERT_EQ(zero.status, 200) << zero.body;
  Json view = BodyOf(zero);
  ASSERT_EQ(view["quotas"].size(), 1u) << view.dump();
  EXPECT_EQ(view["quotas"][0]["limit_milli"], 0);
  const Json gpu = {{"kind", "gpu"}, {"model", "H100-80GB"}, {"project", "ml"}};
  http::Response denied = Allocate(alice_, gpu);
  EXPECT_EQ(denied.status, 409) << denied.body;
  EXPECT_NE(denied.body.find("no quota for H100-80GB/gpu"), std::string::npos) << denied.body;
  EXPECT_NE(denied.body.find("project ml"), std::string::npos) << denied.body;

  EXPECT_EQ(h_.Call("DELETE", p + "/ml/quotas/H100-80GB/mig", alice_.key).status, 404);
  EXPECT_EQ(h_.Call("DELETE", p + "/nope/quotas/H100-80GB/gpu", alice_.key).status, 404);
  EXPECT_EQ(h_.Call("DELETE", p + "/ml/quotas/H100-80GB/gpu", bob_.key).status, 404);
  http::Response cleared = h_.Call("DELETE", p + "/ml/quotas/H100-80GB/gpu", alice_.key);
  ASSERT_EQ(cleared.status, 200) << cleared.body;
  EXPECT_TRUE(BodyOf(cleared)["quotas"].empty()) << cleared.body;
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM audit_log WHERE action = 'project.quota.clear' AND "
                 "outcome = 'allowed'"),
            1);
  Json placed = BodyOf(Allocate(alice_, gpu));
  EXPECT_EQ(placed["state"], "running") << placed.dump();
}

// Regression (issue 16, item 9): the operator could not lower or remove a
// tenant's quota below the tenant admin's project split (400 naming the
// project). The operator's change wins: the admin's rows stay, the split
// the scheduler enforces is clamped, and the admin is told (views, the
// answer, the audit record in the tenant's chain).
TEST_F(SchedulingApiTest, OperatorLowersTheTenantQuotaBelowTheProjectSplit) {
  const std::string p = "/api/v1/tenants/" + a_.id + "/projects";
  const std::string q = "/api/v1/tenants/" + a_.id + "/quotas";
  for (const char* name : {"ml", "web"}) {
    ASSERT_EQ(h_.CallJson("POST", p, alice_.key, {{"name", name}}).status, 201);
  }
  auto split = [&](const std::string& project, int64_t g, int64_t l) {
    return h_.CallJson(
        "PUT", p + "/" + project + "/quotas", alice_.key,
        {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", g}, {"limit_milli", l}});
  };
  ASSERT_EQ(split("ml", 2000, 4000).status, 200);
  ASSERT_EQ(split("web", 2000, 2000).status, 200);

  http::Response lowered = h_.CallJson(
      "PUT", q, h_.root_key(),
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 2000}, {"limit_milli", 3000}});
  ASSERT_EQ(lowered.status, 200) << lowered.body;
  EXPECT_EQ(BodyOf(lowered)["clamped_projects"], Json::array({"ml", "web"})) << lowered.body;
  auto audit = h_.store().database().Exec(
      "SELECT target FROM audit_log WHERE action = 'quota.set' AND tenant_id = $1 "
      "ORDER BY seq DESC LIMIT 1",
      {a_.id});
  ASSERT_TRUE(audit.has_value());
  ASSERT_EQ(audit->rows.size(), 1u);
  EXPECT_NE(audit->rows[0].Text(0).find("clamps projects ml,web"), std::string::npos)
      << audit->rows[0].Text(0);

  // ml: limit 3000, guarantee floor(2000 × 2000 / 4000) = 1000.
  Json ml = BodyOf(h_.Call("GET", p + "/ml", alice_.key));
  ASSERT_EQ(ml["quotas"].size(), 1u) << ml.dump();
  EXPECT_EQ(ml["quotas"][0]["guarantee_milli"], 1000) << ml.dump();
  EXPECT_EQ(ml["quotas"][0]["limit_milli"], 3000);
  EXPECT_EQ(ml["quotas"][0]["over_committed"], true);
  EXPECT_EQ(ml["quotas"][0]["requested"]["guarantee_milli"], 2000);
  EXPECT_EQ(ml["quotas"][0]["requested"]["limit_milli"], 4000);
  // The scheduler enforces the clamped figures.
  const Json two = {{"kind", "gpu"}, {"model", "H100-80GB"}, {"project", "ml"}, {"gpus", 2}};
  http::Response over = Allocate(alice_, two);
  EXPECT_EQ(over.status, 409) << over.body;
  EXPECT_NE(over.body.find("guarantee 1000"), std::string::npos) << over.body;
  Json one = BodyOf(Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"project", "ml"}}));
  EXPECT_EQ(one["state"], "running") << one.dump();

  // The admin may not raise a project beyond what the tenant has, but may
  // shrink an over-committed split.
  http::Response raise = split("ml", 2500, 4000);
  EXPECT_EQ(raise.status, 400) << raise.body;
  EXPECT_NE(raise.body.find("project ml"), std::string::npos) << raise.body;
  ASSERT_EQ(split("web", 0, 1000).status, 200);
  ml = BodyOf(h_.Call("GET", p + "/ml", alice_.key));
  EXPECT_EQ(ml["quotas"][0]["guarantee_milli"], 2000) << ml.dump();
  EXPECT_EQ(ml["quotas"][0]["limit_milli"], 3000);

  // Removing the tenant's class denies it to every project.
  ASSERT_EQ(
      h_.CallJson(
            "PUT", q, h_.root_key(),
            {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 0}, {"limit_milli", 0}})
          .status,
      200);
  http::Response none = Allocate(
      alice_,
      {{"kind", "gpu"}, {"model", "H100-80GB"}, {"project", "web"}, {"priority", "preemptible"}});
  EXPECT_EQ(none.status, 409) << none.body;
  EXPECT_NE(none.body.find("no quota"), std::string::npos) << none.body;
  Json web = BodyOf(h_.Call("GET", p + "/web", alice_.key));
  EXPECT_EQ(web["quotas"][0]["limit_milli"], 0) << web.dump();
  EXPECT_EQ(web["quotas"][0]["over_committed"], true);

  // Raised again: the admin's split applies as they set it.
  SetQuota(
      a_.id,
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 4000}, {"limit_milli", 4000}});
  ml = BodyOf(h_.Call("GET", p + "/ml", alice_.key));
  EXPECT_EQ(ml["quotas"][0]["guarantee_milli"], 2000) << ml.dump();
  EXPECT_EQ(ml["quotas"][0]["limit_milli"], 4000);
  EXPECT_EQ(ml["quotas"][0]["over_committed"], false);
  Json quotas = BodyOf(h_.Call("GET", q, alice_.key));
  for (const Json& row : quotas["items"])
    EXPECT_TRUE(row["clamped_projects"].empty()) << row.dump();
}

// The state filter takes each state a stored allocation can be in (the
// scheduler's one list) and names them all when it refuses another.
TEST_F(SchedulingApiTest, TheStateFilterTakesEveryAllocationStateAndRefusesOthers) {
  Json running = BodyOf(Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}}));
  ASSERT_EQ(running["state"], "running") << running.dump();
  Json released = BodyOf(Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}}));
  ASSERT_EQ(
      h_.Call("DELETE", "/api/v1/allocations/" + released["id"].get<std::string>(), alice_.key)
          .status,
      200);
  for (const std::string& state : sched::AllAllocationStateNames()) {
    http::Response listed = h_.Call("GET", "/api/v1/allocations?state=" + state, alice_.key);
    ASSERT_EQ(listed.status, 200) << state << " -> " << listed.body;
    for (const auto& item : BodyOf(listed)["items"]) EXPECT_EQ(item["state"], state);
    const size_t expected = state == "running" || state == "released" ? 1 : 0;
    EXPECT_EQ(BodyOf(listed)["items"].size(), expected) << state << " -> " << listed.body;
  }
  http::Response bogus = h_.Call("GET", "/api/v1/allocations?state=paused", alice_.key);
  EXPECT_EQ(bogus.status, 400) << bogus.body;
  EXPECT_NE(bogus.body.find(
                "state must be one of pending, running, preempting, released, preempted, rejected"),
            std::string::npos)
      << bogus.body;
}

TEST_F(SchedulingApiTest, EvictionReleasesEverythingTheTenantHoldsAndKeepsItsHistory) {
  Json a = BodyOf(
      Allocate(alice_, {{"kind", "mig"}, {"model", "A100-80GB"}, {"mig_profile", "1g.10gb"}}));
  ASSERT_EQ(a["state"], "running") << a.dump();
  http::Response evicted = h_.Call("POST", "/api/v1/tenants/" + a_.id + "/evict", h_.root_key());
  ASSERT_EQ(evicted.status, 200) << evicted.body;
  EXPECT_EQ(BodyOf(evicted)["kept"]["allocations"], 1);
  // The allocation history stays, ended, for staff to read (accounting);
  // it used to be deleted with the tenant.
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM allocations WHERE tenant_id = '" + a_.id +
                 "' AND state = 'released'"),
            1);
  http::Response listed = h_.Call("GET", "/api/v1/allocations?tenant_id=" + a_.id, h_.root_key());
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(BodyOf(listed)["items"].size(), 1u);
  EXPECT_EQ(BodyOf(listed)["items"][0]["id"], a["id"]);
  EXPECT_EQ(BodyOf(listed)["items"][0]["state"], "released");
  http::Response one =
      h_.Call("GET", "/api/v1/allocations/" + a["id"].get<std::string>(), h_.root_key());
  EXPECT_EQ(one.status, 200) << one.body;
  // Another tenant still finds nothing of it.
  EXPECT_EQ(h_.Call("GET", "/api/v1/allocations/" + a["id"].get<std::string>(), bob_.key).status,
            404);
  auto rows = h_.store().database().Exec(
      "SELECT actor FROM audit_log WHERE action = 'scheduler.released' AND tenant_id = $1",
      {a_.id});
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->rows.size(), 1u);
  EXPECT_NE(rows->rows[0].Text(0), scheduling::kSchedulerActor);
  Json gpu = BodyOf(h_.Call("GET", "/api/v1/gpus?node=a100-80gb-0", h_.root_key()));
  for (const auto& g : gpu["items"]) EXPECT_TRUE(g["allocations"].empty()) << g.dump();
}

// Issue 15, item 5: a tenant read another tenant's allocation ids off a
// reclaim — preempted_for and the reason on its preempted allocation, the
// victim ids in the reclaimer's /why. Staff still see them.
TEST_F(SchedulingApiTest, AReclaimShowsNeitherTenantTheOthersAllocations) {
  SetQuota(
      b_.id,
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 0}, {"limit_milli", 8000}});
  std::vector<std::string> borrowed;
  for (int i = 0; i < 2; ++i) {
    http::Response r = Allocate(
        bob_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 4}, {"priority", "preemptible"}});
    ASSERT_EQ(r.status, 201) << r.body;
    borrowed.push_back(BodyOf(r)["id"].get<std::string>());
  }
  http::Response reclaim = Allocate(
      alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 4}, {"priority", "interactive"}});
  ASSERT_EQ(reclaim.status, 202) << reclaim.body;
  const std::string a_id = BodyOf(reclaim)["id"].get<std::string>();

  std::string victim;
  for (const std::string& id : borrowed) {
    Json seen = BodyOf(h_.Call("GET", "/api/v1/allocations/" + id, bob_.key));
    if (seen["state"] != "preempting") continue;
    victim = id;
    EXPECT_TRUE(seen["preempted_for"].is_null()) << seen.dump();
    EXPECT_EQ(seen["reason"].get<std::string>().find(a_id), std::string::npos) << seen.dump();
    EXPECT_EQ(seen["reason"].get<std::string>().find(a_.id), std::string::npos) << seen.dump();
    Json staff = BodyOf(h_.Call("GET", "/api/v1/allocations/" + id, h_.root_key()));
    EXPECT_EQ(staff["preempted_for"], a_id) << staff.dump();
    Json listed = BodyOf(h_.Call("GET", "/api/v1/allocations?state=preempting", bob_.key));
    ASSERT_EQ(listed["items"].size(), 1u);
    EXPECT_TRUE(listed["items"][0]["preempted_for"].is_null()) << listed.dump();
    Json why = BodyOf(h_.Call("GET", "/api/v1/allocations/" + id + "/why", bob_.key));
    EXPECT_EQ(why["explanation"].get<std::string>().find(a_id), std::string::npos) << why.dump();
  }
  ASSERT_FALSE(victim.empty());
  Json why = BodyOf(h_.Call("GET", "/api/v1/allocations/" + a_id + "/why", alice_.key));
  EXPECT_EQ(why["explanation"].get<std::string>().find(victim), std::string::npos) << why.dump();
  EXPECT_NE(why["explanation"].get<std::string>().find("waits for reclaim of borrowed capacity"),
            std::string::npos)
      << why.dump();
  Json staff_why = BodyOf(h_.Call("GET", "/api/v1/allocations/" + a_id + "/why", h_.root_key()));
  EXPECT_NE(staff_why["explanation"].get<std::string>().find(victim), std::string::npos)
      << staff_why.dump();
}

// Issue 15, item 11: every submission was accepted, however many of the
// tenant's requests already waited. A project holds at most 500 pending
// requests by default; the next is refused with 429 and the reason, and
// nothing is stored or audited for it.
TEST_F(SchedulingApiTest, PendingRequestsBeyondTheProjectCapAreRefused) {
  ASSERT_EQ(
      h_.CallJson("POST", "/api/v1/tenants/" + a_.id + "/projects", alice_.key, {{"name", "flood"}})
          .status,
      201);
  const Json body = {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 4}, {"project", "flood"}};
  ASSERT_EQ(Allocate(alice_, body).status, 201);  // takes the whole quota; the rest wait
  for (int i = 0; i < 500; ++i) {
    http::Response r = Allocate(alice_, body);
    ASSERT_EQ(r.status, 202) << i << ": " << r.body;
  }
  const int64_t rows = Rows("SELECT COUNT(*) FROM allocations");
  const int64_t audit = Rows("SELECT COUNT(*) FROM audit_log WHERE action LIKE 'scheduler.%'");
  http::Response refused = Allocate(alice_, body);
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_NE(refused.body.find("project flood already has 500 pending allocation requests"),
            std::string::npos)
      << refused.body;
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM allocations"), rows);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM audit_log WHERE action LIKE 'scheduler.%'"), audit);
  // Another tenant is not held back by it.
  SetQuota(
      b_.id,
      {{"model", "H100-80GB"}, {"kind", "gpu"}, {"guarantee_milli", 1000}, {"limit_milli", 1000}});
  EXPECT_EQ(Allocate(bob_, {{"kind", "gpu"}, {"model", "H100-80GB"}}).status, 201);
}

TEST_F(SchedulingApiTest, CapacityCountsFreeGpusAndMigRoom) {
  Json before = BodyOf(h_.Call("GET", "/api/v1/capacity?model=A100-80GB", alice_.key));
  ASSERT_EQ(before["items"].size(), 1u);
  EXPECT_EQ(before["items"][0]["gpus_free"], 8);
  ASSERT_EQ(Allocate(alice_, {{"kind", "mig"}, {"model", "A100-80GB"}, {"mig_profile", "3g.40gb"}})
                .status,
            201);
  Json after = BodyOf(h_.Call("GET", "/api/v1/capacity?model=A100-80GB", alice_.key));
  EXPECT_EQ(after["items"][0]["gpus_free"], 7);
  int seven = -1;
  for (const auto& m : after["items"][0]["mig"]) {
    if (m["profile"] == "7g.80gb") seven = m["free_instances"].get<int>();
  }
  EXPECT_EQ(seven, 7);
  EXPECT_EQ(h_.Call("GET", "/api/v1/capacity?model=B300", alice_.key).status, 400);
  // Cordoning takes a node out of the usable count.
  ASSERT_EQ(h_.Call("POST", "/api/v1/nodes/a100-80gb-0/cordon", h_.root_key()).status, 200);
  Json cordoned = BodyOf(h_.Call("GET", "/api/v1/capacity?model=A100-80GB", alice_.key));
  EXPECT_EQ(cordoned["items"][0]["gpus_usable"], 0);
  EXPECT_EQ(h_.Call("POST", "/api/v1/nodes/no-such-node/cordon", h_.root_key()).status, 404);
}

// Issue 16 item 11: GPU health had no way in, and after a GPU was marked
// unhealthy by hand and the server restarted, its allocation kept running
// with no move request. Operators set health through the API (strictly
// read, audited); work on an unhealthy GPU is asked to move (preemptible
// work is preempted at once), and the request is stored with the
// allocation: a restart shows it, asks for the ones nobody asked for yet,
// and asks for each only once.
TEST_F(SchedulingApiTest, GpuHealthComesInThroughTheApiAndItsMoveRequestsSurviveARestart) {
  const Actor op = h_.CreateActor("", "", Role::kPlatformOperator, /*human=*/false);
  auto allocate = [&](const std::string& priority) {
    http::Response r = Allocate(
        alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 1}, {"priority", priority}});
    EXPECT_EQ(r.status, 201) << r.body;
    Json j = BodyOf(r);
    EXPECT_EQ(j.value("state", ""), "running") << r.body;
    return j;
  };
  const Json batch = allocate("batch");
  const Json spot = allocate("preemptible");
  const Json later = allocate("batch");
  auto gpu_of = [](const Json& a) { return a["placement"][0]["gpus"][0].get<int>(); };
  auto health_path = [](int gpu) {
    return "/api/v1/nodes/h100-80gb-0/gpus/" + std::to_string(gpu) + "/health";
  };
  auto get = [&](const Json& a) {
    return BodyOf(h_.Call("GET", "/api/v1/allocations/" + a.value("id", ""), alice_.key));
  };
  auto moves_audited = [&](const Json& a) {
    return Rows(
        "SELECT COUNT(*) FROM audit_log WHERE action = 'scheduler.move-requested' AND "
        "target LIKE '%/allocation/" +
        a.value("id", "") + "'");
  };
  const std::string path = health_path(gpu_of(batch));

  // Bad bodies, wrong callers and unknown GPUs change nothing.
  const std::string long_reason(257, 'x');
  for (const std::string& body :
       {std::string("{}"), std::string(R"({"healthy": "no"})"),
        std::string(R"({"healthy": false, "colour": "red"})"),
        std::string(R"({"healthy": false, "reason": 7})"),
        R"({"healthy": false, "reason": ")" + long_reason + R"("})", std::string("not json")}) {
    EXPECT_EQ(h_.Call("PUT", path, op.key, body).status, 400) << body;
  }
  EXPECT_EQ(h_.CallJson("PUT", path, alice_.key, {{"healthy", false}}).status, 403);
  EXPECT_EQ(h_.CallJson("PUT", health_path(99), op.key, {{"healthy", false}}).status, 404);
  // GPU indexes the caller chose: not a number, negative, past int64.
  for (const std::string gpu : {"x", "-1", "99999999999999999999999", "0x1", " 1"}) {
    EXPECT_EQ(h_.CallJson("PUT", "/api/v1/nodes/h100-80gb-0/gpus/" + gpu + "/health", op.key,
                          {{"healthy", false}})
                  .status,
              404)
        << gpu;
  }
  EXPECT_EQ(
      h_.CallJson("PUT", "/api/v1/nodes/no-such-node/gpus/0/health", op.key, {{"healthy", false}})
          .status,
      404);
  EXPECT_TRUE(get(batch)["move_requested"].is_null());
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM fleet_gpus WHERE healthy = 0"), 0);

  // The operator marks the batch allocation's GPU unhealthy: asked to move,
  // still running; the health change is audited on the GPU.
  http::Response marked =
      h_.CallJson("PUT", path, op.key, {{"healthy", false}, {"reason", "XID 79"}});
  ASSERT_EQ(marked.status, 200) << marked.body;
  EXPECT_EQ(BodyOf(marked)["gpus"][gpu_of(batch)]["healthy"], false) << marked.body;
  Json moved = get(batch);
  EXPECT_EQ(moved["state"], "running");
  ASSERT_TRUE(moved["move_requested"].is_object()) << moved.dump();
  EXPECT_EQ(moved["move_requested"]["reason"],
            "GPU " + std::to_string(gpu_of(batch)) + " of h100-80gb-0 is unhealthy (XID 79)");
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM audit_log WHERE action = 'gpu.health' AND status = 200 "
                 "AND target = 'node/h100-80gb-0/gpu/" +
                 std::to_string(gpu_of(batch)) + "'"),
            1);
  EXPECT_EQ(moves_audited(batch), 1);
  // Preemptible work on an unhealthy GPU goes at once.
  ASSERT_EQ(h_.CallJson("PUT", health_path(gpu_of(spot)), op.key, {{"healthy", false}}).status,
            200);
  EXPECT_EQ(get(spot)["state"], "preempted");

  // A GPU marked unhealthy behind the scheduler's back (in the store, as
  // before there was an API), then a restart: the request is made then,
  // once, and the earlier one is still shown.
  ASSERT_TRUE(h_.store()
                  .database()
                  .Exec("UPDATE fleet_gpus SET healthy = 0 WHERE node = $1 AND idx = $2",
                        {std::string("h100-80gb-0"), int64_t{gpu_of(later)}})
                  .has_value());
  EXPECT_TRUE(get(later)["move_requested"].is_null());
  h_.RestartScheduling();
  Json after = get(later);
  EXPECT_EQ(after["state"], "running");
  ASSERT_TRUE(after["move_requested"].is_object()) << after.dump();
  EXPECT_EQ(moves_audited(later), 1);
  EXPECT_EQ(get(batch)["move_requested"], moved["move_requested"]);
  h_.RestartScheduling();
  EXPECT_EQ(moves_audited(batch), 1);
  EXPECT_EQ(moves_audited(later), 1);
  http::Response why =
      h_.Call("GET", "/api/v1/allocations/" + batch.value("id", "") + "/why", alice_.key);
  EXPECT_NE(why.body.find("asked to move"), std::string::npos) << why.body;

  // Healthy again: the request is cleared, and stays cleared after a restart.
  ASSERT_EQ(h_.CallJson("PUT", path, op.key, {{"healthy", true}}).status, 200);
  EXPECT_TRUE(get(batch)["move_requested"].is_null());
  h_.RestartScheduling();
  EXPECT_TRUE(get(batch)["move_requested"].is_null());
}

}  // namespace
}  // namespace atrium::api

namespace atrium::api {
namespace {

// Issue 18: a GPU an allocation left shows "scrubbing" until its scrub
// finished, to every reader of the fleet; whose allocation it was is shown
// to platform staff only, never to a tenant (not even the one it was).
TEST_F(SchedulingApiTest, AScrubbingGpuShowsItsStateButNoTenantSeesWhoseItWas) {
  // The workloads are never gone, so the scrub waits and the state stays.
  h_.scheduling().SetWorkloadProbe([](const std::string&) { return false; });
  http::Response placed = Allocate(alice_, {{"kind", "gpu"}, {"model", "H100-80GB"}, {"gpus", 2}});
  ASSERT_EQ(placed.status, 201) << placed.body;
  Json a = BodyOf(placed);
  const std::string id = a["id"].get<std::string>();
  const std::string node = a["placement"][0]["node"].get<std::string>();
  ASSERT_EQ(h_.Call("DELETE", "/api/v1/allocations/" + id, alice_.key).status, 200);

  for (const Actor* who : {&alice_, &bob_}) {
    http::Response r = h_.Call("GET", "/api/v1/gpus?node=" + node, who->key);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.body.find(id), std::string::npos) << r.body;
    int scrubbing = 0;
    const Json body = BodyOf(r);
    for (const auto& g : body["items"]) {
      if (g["state"] != "scrubbing") continue;
      ++scrubbing;
      EXPECT_EQ(g["scrubbing"], true);
      EXPECT_EQ(g["free"], false);
      EXPECT_TRUE(g["scrubbing_for"].empty()) << g.dump();
      EXPECT_TRUE(g["allocations"].empty()) << g.dump();
    }
    EXPECT_EQ(scrubbing, 2) << r.body;
    EXPECT_EQ(h_.Call("GET", "/api/v1/nodes/" + node, who->key).body.find(id), std::string::npos);
  }
  Json staff = BodyOf(h_.Call("GET", "/api/v1/gpus?node=" + node, h_.root_key()));
  int named = 0;
  for (const auto& g : staff["items"]) {
    if (g["state"] == "scrubbing") {
      EXPECT_EQ(g["scrubbing_for"], Json::array({id})) << g.dump();
      ++named;
    }
  }
  EXPECT_EQ(named, 2);
}

}  // namespace
}  // namespace atrium::api
