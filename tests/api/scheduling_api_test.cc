// The capacity, quota, project and allocation routes: strict input that
// changes nothing when refused, 201/202/409 for allocations, explanations,
// tenant visibility on the fleet, and eviction releasing what a tenant holds.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "api/api_fixture.h"

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
  EXPECT_EQ(
      h_.CallJson("PUT", "/api/v1/nodes/h100-80gb-0/gpus/x/health", op.key, {{"healthy", false}})
          .status,
      404);
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
