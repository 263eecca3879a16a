// /api/v1/tenants/{tenant_id}/adapters as tenants use it and as a hostile
// one tries it: an adapter is registered from the tenant's own archive,
// pinned by its digest, on a managed deployment the tenant may use and that
// allows adapters; another tenant's deployment, archive or adapter answers
// like a missing one; names, artifacts and digests that could mislead the
// platform are refused and change nothing; bounds hold; adapters go with
// their deployment and their tenant, and an evicted tenant's dedicated
// replicas stop with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "api/api_fixture.h"
#include "crypto/crypto.h"

namespace atrium::api {
namespace {

using fixture::BodyOf;

class AdapterApiTest : public fixture::TwoJobTenantsTest {
 protected:
  void SetUp() override {
    TwoJobTenantsTest::SetUp();
    // The tenant shared managed deployments run as.
    ASSERT_EQ(h_.CallJson("POST", "/api/v1/tenants", h_.root_key(),
                          {{"name", fixture::ApiHarness::kServingTenant}})
                  .status,
              201);
    acme_dep_ = Managed("tuned", a_.id, 2);
    shared_dep_ = Managed("llama", "", 8);
    archive_ = Upload(alice_);
    bob_archive_ = Upload(bob_);
  }
  // A managed deployment of `model` (tenant "" = shared) without replicas.
  std::string Managed(const std::string& model, const std::string& tenant, int max_adapters,
                      int replicas = 0) {
    Json serving = {{"template", "engine-sim"},
                    {"replicas", replicas},
                    {"min_replicas", 0},
                    {"max_replicas", 1},
                    {"resources", fixture::SmallShareBody()}};
    if (max_adapters > 0) serving["max_adapters"] = max_adapters;
    Json body = {{"model", model}, {"region", "local"}, {"serving", serving}};
    if (!tenant.empty()) body["tenant_id"] = tenant;
    http::Response r = h_.CallJson("POST", "/api/v1/deployments", h_.root_key(), body);
    EXPECT_EQ(r.status, 201) << r.body;
    return BodyOf(r).value("id", "");
  }
  std::string Upload(const fixture::Actor& who) { return h_.CreateArchive(who); }
  static std::string Sha() { return crypto::Sha256Hex(fixture::SmallArchive()); }
  Json Body(const std::string& name, const std::string& deployment, const std::string& archive) {
    return {{"name", name},
            {"deployment", deployment},
            {"artifact", "archive:" + archive},
            {"sha256", Sha()}};
  }
  http::Response Register(const fixture::Actor& who, const std::string& tenant, const Json& body) {
    return h_.CallJson("POST", "/api/v1/tenants/" + tenant + "/adapters", who.key, body);
  }
  std::string ErrorOf(const http::Response& r) {
    Json j = BodyOf(r);
    return j.is_object() && j.contains("error") ? j["error"].value("message", "") : r.body;
  }

  std::string acme_dep_, shared_dep_, archive_, bob_archive_;
};

TEST_F(AdapterApiTest, ATenantRegistersAnAdapterFromItsArchiveAndReadsItBack) {
  Json body = Body("support", acme_dep_, archive_);
  // Upper-case hex is the same digest.
  std::string upper = Sha();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  body["sha256"] = upper;
  http::Response made = Register(alice_, a_.id, body);
  ASSERT_EQ(made.status, 201) << made.body;
  Json a = BodyOf(made);
  EXPECT_EQ(a["name"], "support");
  EXPECT_EQ(a["model"], "tuned:support");
  EXPECT_EQ(a["deployment"], acme_dep_);
  EXPECT_EQ(a["artifact"], "archive:" + archive_);
  EXPECT_EQ(a["sha256"], Sha());
  EXPECT_EQ(a["status"], "loading");
  const std::string id = a["id"];
  EXPECT_EQ(id.rfind("ad_", 0), 0U);

  const std::string base = "/api/v1/tenants/" + a_.id + "/adapters";
  http::Response got = h_.Call("GET", base + "/" + id, alice_.key);
  ASSERT_EQ(got.status, 200);
  EXPECT_EQ(BodyOf(got), a);
  http::Response list = h_.Call("GET", base + "?deployment=" + acme_dep_, alice_.key);
  ASSERT_EQ(list.status, 200);
  EXPECT_EQ(BodyOf(list)["items"].size(), 1U);
  EXPECT_EQ(BodyOf(h_.Call("GET", base + "?deployment=dep_other", alice_.key))["items"].size(), 0U);
  // Platform staff read it; they do not register or delete a tenant's.
  EXPECT_EQ(h_.Call("GET", base + "/" + id, h_.root_key()).status, 200);
  EXPECT_EQ(
      Register(fixture::Actor{.key = h_.root_key()}, a_.id, Body("x", acme_dep_, archive_)).status,
      403);
  // The same name twice on one deployment: a conflict.
  EXPECT_EQ(Register(alice_, a_.id, Body("support", acme_dep_, archive_)).status, 409);
  ASSERT_EQ(h_.Call("DELETE", base + "/" + id, alice_.key).status, 204);
  EXPECT_EQ(h_.Call("GET", base + "/" + id, alice_.key).status, 404);
}

TEST_F(AdapterApiTest, AHostileTenantReachesNoOtherTenantsDeploymentArchiveOrAdapter) {
  http::Response made = Register(alice_, a_.id, Body("support", acme_dep_, archive_));
  ASSERT_EQ(made.status, 201);
  const std::string id = BodyOf(made)["id"];
  const int64_t before = Rows("SELECT COUNT(*) FROM adapters");

  // bob on acme's dedicated deployment, with his own archive: not found.
  http::Response r = Register(bob_, b_.id, Body("mine", acme_dep_, bob_archive_));
  EXPECT_EQ(r.status, 404) << r.body;
  // bob naming alice's archive on a deployment he may use: not found.
  ASSERT_EQ(
      h_.Call("PUT", "/api/v1/tenants/" + b_.id + "/entitlements/llama", h_.root_key()).status,
      200);
  r = Register(bob_, b_.id, Body("mine", shared_dep_, archive_));
  EXPECT_EQ(r.status, 404) << r.body;
  // bob in acme's path: not found, whatever he sends.
  EXPECT_EQ(Register(bob_, a_.id, Body("mine", acme_dep_, archive_)).status, 404);
  EXPECT_EQ(h_.Call("GET", "/api/v1/tenants/" + a_.id + "/adapters/" + id, bob_.key).status, 404);
  EXPECT_EQ(h_.Call("DELETE", "/api/v1/tenants/" + a_.id + "/adapters/" + id, bob_.key).status,
            404);
  // alice's adapter id in bob's path answers like a missing one.
  http::Response cross = h_.Call("GET", "/api/v1/tenants/" + b_.id + "/adapters/" + id, bob_.key);
  http::Response missing = h_.Call(
      "GET", "/api/v1/tenants/" + b_.id + "/adapters/ad_01nosuchadapter0000000000", bob_.key);
  EXPECT_EQ(cross.status, 404);
  EXPECT_EQ(ErrorOf(cross), ErrorOf(missing));
  EXPECT_EQ(h_.Call("DELETE", "/api/v1/tenants/" + b_.id + "/adapters/" + id, bob_.key).status,
            404);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM adapters"), before);

  // A shared deployment of a model bob is not entitled to is not his to use.
  ASSERT_EQ(
      h_.Call("DELETE", "/api/v1/tenants/" + b_.id + "/entitlements/llama", h_.root_key()).status,
      204);
  EXPECT_EQ(Register(bob_, b_.id, Body("mine", shared_dep_, bob_archive_)).status, 404);
  ASSERT_EQ(
      h_.Call("PUT", "/api/v1/tenants/" + b_.id + "/entitlements/llama", h_.root_key()).status,
      200);
  r = Register(bob_, b_.id, Body("mine", shared_dep_, bob_archive_));
  EXPECT_EQ(r.status, 201) << r.body;
  // The same name as another tenant's is that tenant's business.
  r = Register(alice_, a_.id, Body("mine", shared_dep_, archive_));
  EXPECT_EQ(r.status, 404) << "acme is not entitled to llama: " << r.body;
}

TEST_F(AdapterApiTest, AScopedKeyRegistersAndDeletesAdaptersOfItsModelsOnly) {
  ASSERT_EQ(
      h_.CallJson("PUT", "/api/v1/tenants/" + a_.id + "/entitlements/llama", h_.root_key(), nullptr)
          .status,
      200);
  auto key_scoped_to = [&](const std::string& model) {
    http::Response k = h_.CallJson("POST", "/api/v1/tenants/" + a_.id + "/keys", alice_.key,
                                   {{"name", "scoped-" + model},
                                    {"owner_user_id", alice_.user_id},
                                    {"scopes", Json::array({model})}});
    EXPECT_EQ(k.status, 201) << k.body;
    fixture::Actor scoped = alice_;
    scoped.key = BodyOf(k).value("key", "");
    return scoped;
  };
  const fixture::Actor llama_only = key_scoped_to("llama");
  const int64_t before = Rows("SELECT COUNT(*) FROM adapters");
  http::Response r = Register(llama_only, a_.id, Body("support", acme_dep_, archive_));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_NE(ErrorOf(r).find("scopes do not include the model `tuned`"), std::string::npos);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM adapters"), before);
  r = Register(llama_only, a_.id, Body("support", shared_dep_, archive_));
  EXPECT_EQ(r.status, 201) << r.body;
  // An adapter of another model is not its to delete either.
  http::Response tuned = Register(alice_, a_.id, Body("support", acme_dep_, archive_));
  ASSERT_EQ(tuned.status, 201) << tuned.body;
  const std::string id = BodyOf(tuned)["id"];
  EXPECT_EQ(
      h_.Call("DELETE", "/api/v1/tenants/" + a_.id + "/adapters/" + id, llama_only.key).status,
      403);
  EXPECT_EQ(
      h_.Call("DELETE", "/api/v1/tenants/" + a_.id + "/adapters/" + id, key_scoped_to("tuned").key)
          .status,
      204);
}

TEST_F(AdapterApiTest, WhatCouldMisleadThePlatformIsRefusedAndChangesNothing) {
  struct Bad {
    std::function<void(Json&)> change;
    int status;
    const char* words;
  };
  const std::vector<Bad> cases = {
      {[](Json& b) { b["name"] = "a:b"; }, 400, "'name'"},
      {[](Json& b) { b["name"] = "../x"; }, 400, "'name'"},
      {[](Json& b) { b["name"] = "Upper"; }, 400, "'name'"},
      {[](Json& b) { b["name"] = std::string(65, 'a'); }, 400, "name"},
      {[](Json& b) { b["name"] = 7; }, 400, "'name'"},
      {[](Json& b) { b["artifact"] = "https://evil.example/lora.tar"; }, 400, "'artifact'"},
      {[](Json& b) { b["artifact"] = "/etc/shadow"; }, 400, "'artifact'"},
      {[](Json& b) { b["artifact"] = "archive:arc_nosuch"; }, 404, "not found"},
      {[](Json& b) { b["sha256"] = std::string(64, '0'); }, 400, "is not the digest"},
      {[](Json& b) { b["sha256"] = "abc"; }, 400, "'sha256'"},
      {[](Json& b) { b["deployment"] = "dep_nosuch"; }, 404, "not found"},
      {[](Json& b) { b["extra"] = true; }, 400, "extra"},
      {[](Json& b) { b.erase("sha256"); }, 400, "'sha256'"},
  };
  const int64_t before = Rows("SELECT COUNT(*) FROM adapters");
  for (const Bad& bad : cases) {
    Json body = Body("support", acme_dep_, archive_);
    bad.change(body);
    http::Response r = Register(alice_, a_.id, body);
    EXPECT_EQ(r.status, bad.status) << body.dump() << ": " << r.body;
    EXPECT_NE(ErrorOf(r).find(bad.words), std::string::npos) << body.dump() << ": " << r.body;
  }
  EXPECT_EQ(
      h_.Call("POST", "/api/v1/tenants/" + a_.id + "/adapters", alice_.key, "{not json").status,
      400);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM adapters"), before);
}

TEST_F(AdapterApiTest, OnlyAManagedDeploymentAllowingAdaptersTakesThemAndOnlyAsManyAsItAllows) {
  // External, and managed without adapters: a conflict saying so.
  const std::string external = h_.CreateDeployment("ext", a_.id);
  http::Response r = Register(alice_, a_.id, Body("support", external, archive_));
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(ErrorOf(r).find("does not manage"), std::string::npos) << r.body;
  const std::string plain = Managed("plain", a_.id, 0);
  r = Register(alice_, a_.id, Body("support", plain, archive_));
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(ErrorOf(r).find("allows no adapters"), std::string::npos) << r.body;
  // A template that cannot load adapters cannot allow them.
  Json tgi = {{"model", "tgi-model"},
              {"region", "local"},
              {"tenant_id", a_.id},
              {"serving",
               {{"template", "tgi"},
                {"replicas", 0},
                {"min_replicas", 0},
                {"max_adapters", 2},
                {"resources", fixture::SmallShareBody()}}}};
  r = h_.CallJson("POST", "/api/v1/deployments", h_.root_key(), tgi);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(ErrorOf(r).find("cannot load adapters"), std::string::npos) << r.body;

  // acme's deployment allows two.
  ASSERT_EQ(Register(alice_, a_.id, Body("one", acme_dep_, archive_)).status, 201);
  ASSERT_EQ(Register(alice_, a_.id, Body("two", acme_dep_, archive_)).status, 201);
  r = Register(alice_, a_.id, Body("three", acme_dep_, archive_));
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(ErrorOf(r).find("the most it allows"), std::string::npos) << r.body;
  // Its spec cannot drop below what it holds.
  Json patch = {{"serving",
                 {{"template", "engine-sim"},
                  {"replicas", 0},
                  {"min_replicas", 0},
                  {"max_replicas", 1},
                  {"max_adapters", 1},
                  {"resources", fixture::SmallShareBody()}}}};
  r = h_.CallJson("PATCH", "/api/v1/deployments/" + acme_dep_, alice_.key, patch);
  EXPECT_EQ(r.status, 409) << r.body;
  patch["serving"]["max_adapters"] = 4;
  r = h_.CallJson("PATCH", "/api/v1/deployments/" + acme_dep_, alice_.key, patch);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Register(alice_, a_.id, Body("three", acme_dep_, archive_)).status, 201);
  // Deleting the deployment deletes its adapters.
  ASSERT_EQ(h_.Call("DELETE", "/api/v1/deployments/" + acme_dep_, alice_.key).status, 204);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM adapters"), 0);
}

TEST_F(AdapterApiTest, EvictingATenantStopsItsDedicatedReplicasAndRemovesItsAdapters) {
  const std::string serving = Managed("served", a_.id, 2, /*replicas=*/1);
  ASSERT_EQ(Register(alice_, a_.id, Body("support", serving, archive_)).status, 201);
  ASSERT_EQ(
      h_.CallJson("PUT", "/api/v1/tenants/" + b_.id + "/entitlements/llama", h_.root_key(), nullptr)
          .status,
      200);
  ASSERT_EQ(Register(bob_, b_.id, Body("bobs", shared_dep_, bob_archive_)).status, 201);
  // The controller starts acme's replica: a job of acme's.
  ASSERT_TRUE(h_.serving().Tick().has_value());
  ASSERT_TRUE(h_.scheduling().Tick().has_value());
  ASSERT_TRUE(h_.jobs().Tick().has_value());
  ASSERT_EQ(Rows("SELECT COUNT(*) FROM deployment_replicas WHERE tenant_id = '" + a_.id + "'"), 1);
  auto jobs = h_.store().database().Exec(
      "SELECT job_id FROM deployment_replicas WHERE tenant_id = $1", {a_.id});
  ASSERT_TRUE(jobs.has_value());
  const std::string job_id = jobs->rows.at(0).Text(0);
  ASSERT_FALSE(job_id.empty());
  auto job = h_.store().GetJob(TenantScope::Of(a_.id), job_id);
  ASSERT_TRUE(job.has_value());
  const std::string workload = job->workload_id();
  EXPECT_EQ(h_.backend().Get(workload).status.phase, exec::WorkloadPhase::kRunning);

  http::Response evicted = h_.Call("POST", "/api/v1/tenants/" + a_.id + "/evict", h_.root_key());
  ASSERT_EQ(evicted.status, 200) << evicted.body;
  // Its replica's process is stopped, its rows gone; bob's adapter stays.
  EXPECT_TRUE(!h_.backend().Knows(workload) ||
              h_.backend().Get(workload).status.phase != exec::WorkloadPhase::kRunning);
  auto gone = h_.backend().released();
  for (const auto& id : h_.backend().forgotten()) gone.push_back(id);
  EXPECT_NE(std::find(gone.begin(), gone.end(), workload), gone.end());
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM deployment_replicas WHERE tenant_id = '" + a_.id + "'"), 0);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM deployments WHERE tenant_id = '" + a_.id + "'"), 0);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM adapters WHERE tenant_id = '" + a_.id + "'"), 0);
  EXPECT_EQ(Rows("SELECT COUNT(*) FROM adapters WHERE tenant_id = '" + b_.id + "'"), 1);
}

}  // namespace
}  // namespace atrium::api
