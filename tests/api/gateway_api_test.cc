// Behaviour of the inference gateway's control-plane routes beyond who may
// call them (that is the isolation matrix): deployments, entitlements,
// gateway limits and usage — input validation, what each kind of caller
// sees, and the rules tenant admins work within.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/api_fixture.h"
#include "api/gateway_validation.h"
#include "api/handler_util.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::World;

std::string ErrorMessage(const http::Response& r) {
  Json j = BodyOf(r);
  return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> IdsOf(const Json& page) {
  std::vector<std::string> ids;
  if (!page.is_object() || !page.contains("items")) return ids;
  for (const auto& item : page["items"]) ids.push_back(item.value("id", ""));
  return ids;
}

bool Has(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// --- pure rules

TEST(GatewayValidationTest, EndpointUrls) {
  for (const char* good : {"http://10.0.0.5:8000", "https://gpu-1.internal", "http://[::1]:8000",
                           "http://host/v1/prefix", "http://my_host:1", "https://h:65535/"}) {
    EXPECT_TRUE(ValidateEndpointUrl(good).has_value()) << good;
  }
  for (const char* bad :
       {"", "ftp://host", "10.0.0.5:8000", "http://", "http://user:pw@host", "http://host?x=1",
        "http://host/#frag", "http://host:0", "http://host:70000", "http://host:80x",
        "http://ho st", "http://[zz]:80", "http://:8000", "HTTP://host", "http://host\n"}) {
    EXPECT_FALSE(ValidateEndpointUrl(bad).has_value()) << bad;
  }
}

TEST(GatewayValidationTest, ModelNames) {
  EXPECT_TRUE(ValidateModelName("llama-3.1-8b-instruct", "model").has_value());
  EXPECT_TRUE(ValidateModelName("gpt-4o:2024@x", "model").has_value());
  EXPECT_TRUE(ValidateModelName(std::string(200, 'm'), "model").has_value());
  for (const std::string& bad :
       {std::string(), std::string(201, 'm'), std::string("meta-llama/Llama-3"),
        std::string("has space"), std::string("tab\t"), std::string("caf\xc3\xa9")}) {
    EXPECT_FALSE(ValidateModelName(bad, "model").has_value()) << bad;
  }
}

// --- through the API

class GatewayApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    harness_ = new ApiHarness();
    world_ = new World(harness_->BuildWorld());
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
  const std::string& Operator() { return w().platform.at(Role::kPlatformOperator).key; }
  const Actor& TenantAdmin() { return w().own.members.at(Role::kTenantAdmin); }
  const Actor& Member() { return w().own.members.at(Role::kTenantMember); }
  const Actor& Viewer() { return w().own.members.at(Role::kTenantViewer); }
  std::string TenantPath() { return "/api/v1/tenants/" + w().own.id; }

  int64_t DeploymentCount() {
    auto page = h().store().ListDeploymentsForPlatform({}, {"", 1000});
    return page.has_value() ? static_cast<int64_t>(page->items.size()) : -1;
  }

  static Json Endpoints(const std::string& url) { return Json::array({{{"url", url}}}); }
  static Json DeploymentBody(const std::string& model) {
    return {
        {"model", model}, {"endpoints", Endpoints("http://10.0.0.5:8000")}, {"region", "local"}};
  }

  static ApiHarness* harness_;
  static World* world_;
};
ApiHarness* GatewayApiTest::harness_ = nullptr;
World* GatewayApiTest::world_ = nullptr;

TEST_F(GatewayApiTest, BadDeploymentsAreRefusedNamingTheProblemAndCreateNothing) {
  struct Probe {
    Json body;
    std::string says;
  };
  auto with = [](const char* field, Json value) {
    Json b = DeploymentBody("m");
    b[field] = std::move(value);
    return b;
  };
  auto without = [](const char* field) {
    Json b = DeploymentBody("m");
    b.erase(field);
    return b;
  };
  Json many = Json::array();
  for (int i = 0; i < 65; ++i) many.push_back({{"url", "http://h" + std::to_string(i) + ":80"}});
  std::vector<Probe> probes = {
      {without("model"), "missing required field 'model'"},
      {without("endpoints"), "needs 'endpoints' (servers someone else runs) or 'serving'"},
      {without("region"), "missing required field 'region'"},
      {with("model", ""), "model must be"},
      {with("model", "org/model"), "'/'"},
      {with("model", "two words"), "model must be"},
      {with("model", std::string(201, 'x')), "'model'"},
      {with("endpoints", Json::array()), "1 to 64"},
      {with("endpoints", many), "1 to 64"},
      {with("endpoints", "http://h:80"), "'endpoints'"},
      {with("endpoints", Json::array({"http://h:80"})), "endpoints[0]"},
      {with("endpoints", Endpoints("ftp://h")), "http:// or https://"},
      {with("endpoints", Endpoints("http://u:p@h")), "credentials"},
      {with("endpoints", Endpoints("http://h/?q=1")), "query"},
      {with("endpoints", Endpoints("http://h:99999")), "port"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"capacity", 0}}})), "capacity"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"capacity", 100001}}})),
       "capacity"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"weight", 1}}})), "weight"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"max_prefill", -1}}})),
       "max_prefill"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"max_prefill", 100001}}})),
       "max_prefill"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"max_prefill", "2"}}})),
       "max_prefill"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"burst", -1}}})), "burst"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"burst", 100001}}})), "burst"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}, {"burst", 1.5}}})), "burst"},
      {with("endpoints", Json::array({{{"url", "http://h:80"}}, {{"url", "http://h:80"}}})),
       "twice"},
      {with("region", ""), "region"},
      {with("latency_tier", "fast"), "latency_tier"},
      {with("visibility", "public"), "visibility"},
      {with("visibility", "dedicated"), "needs the tenant_id"},
      {with("tenant_id", "x"), "not found"},
      {with("color", "blue"), "color"},
  };
  Json shared_with_tenant = DeploymentBody("m");
  shared_with_tenant["visibility"] = "shared";
  shared_with_tenant["tenant_id"] = w().own.id;
  probes.push_back({shared_with_tenant, "omit tenant_id"});

  const int64_t before = DeploymentCount();
  for (const auto& p : probes) {
    http::Response r = h().CallJson("POST", "/api/v1/deployments", Admin(), p.body);
    EXPECT_TRUE(r.status == 400 || r.status == 404) << p.body.dump() << " -> " << r.status;
    EXPECT_TRUE(Contains(ErrorMessage(r), p.says))
        << p.body.dump() << ": '" << ErrorMessage(r) << "' lacks '" << p.says << "'";
  }
  EXPECT_EQ(DeploymentCount(), before);

  // An update may not move a deployment between tenants or visibilities.
  const std::string path = "/api/v1/deployments/" + w().own.deployment_id;
  for (const char* field : {"visibility", "tenant_id"}) {
    http::Response r = h().CallJson("PATCH", path, Admin(), {{field, "shared"}});
    EXPECT_EQ(r.status, 400) << field;
    EXPECT_TRUE(Contains(ErrorMessage(r), "fixed")) << ErrorMessage(r);
  }
  http::Response r = h().CallJson("PATCH", path, Admin(), {{"endpoints", Json::array()}});
  EXPECT_EQ(r.status, 400);
}

TEST_F(GatewayApiTest, TenantAdminsCreateDedicatedDeploymentsOfTheirOwnTenantOnly) {
  const std::string& key = TenantAdmin().key;
  Json body = DeploymentBody("tenant-model");
  http::Response created = h().CallJson("POST", "/api/v1/deployments", key, body);
  ASSERT_EQ(created.status, 201) << created.body;
  Json d = BodyOf(created);
  EXPECT_EQ(d["visibility"], "dedicated");
  EXPECT_EQ(d["tenant_id"], w().own.id);
  EXPECT_EQ(d["latency_tier"], "standard");
  EXPECT_EQ(d["endpoints"][0]["capacity"], 8) << "the default capacity";
  EXPECT_EQ(d["endpoints"][0]["max_prefill"], 0) << "no pacing unless asked for";
  EXPECT_EQ(d["endpoints"][0]["burst"], 0) << "no burst slots unless asked for";

  body["tenant_id"] = w().own.id;  // naming its own tenant is fine
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", key, body).status, 201);
  body["tenant_id"] = w().other.id;  // another answers like a missing one
  http::Response other = h().CallJson("POST", "/api/v1/deployments", key, body);
  EXPECT_EQ(other.status, 404);
  body["tenant_id"] = "tn_nope";
  EXPECT_EQ(ErrorMessage(h().CallJson("POST", "/api/v1/deployments", key, body)),
            ErrorMessage(other));
  body.erase("tenant_id");
  body["visibility"] = "shared";
  http::Response shared = h().CallJson("POST", "/api/v1/deployments", key, body);
  EXPECT_EQ(shared.status, 403);
  EXPECT_TRUE(Contains(ErrorMessage(shared), "platform staff")) << ErrorMessage(shared);
  body.erase("visibility");
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", Member().key, body).status, 403);
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", Viewer().key, body).status, 403);

  // The platform admin places a dedicated one for a tenant it names.
  body["tenant_id"] = w().other.id;
  http::Response placed = h().CallJson("POST", "/api/v1/deployments", Admin(), body);
  ASSERT_EQ(placed.status, 201) << placed.body;
  EXPECT_EQ(BodyOf(placed)["visibility"], "dedicated");
  EXPECT_EQ(BodyOf(placed)["tenant_id"], w().other.id);
}

// The issue: a tenant admin could aim its dedicated deployment at loopback,
// the cloud's metadata service, the platform's own listener or an
// operator's shared model server; the gateway POSTed there and relayed the
// answer.
TEST_F(GatewayApiTest, ATenantsDeploymentMustPassTheOperatorsEgressPolicy) {
  const std::string& key = TenantAdmin().key;
  h().CreateDeployment("egress-shared-model", "");  // the operator's server, 10.0.0.9:8000
  const int64_t before = DeploymentCount();
  struct Probe {
    const char* url;
    const char* says;
  };
  const Probe probes[] = {
      {"http://127.0.0.1:8000", "loopback"},
      {"http://localhost:8081", "loopback"},
      {"http://[::1]:8000", "loopback"},
      {"http://169.254.169.254/latest/meta-data", "link-local"},
      {"http://192.168.1.10:8000", "private"},
      {"http://100.64.0.1:8000", "CGNAT"},
      {"http://0.0.0.0:8000", "unspecified"},
      {"http://10.0.0.9:8000", "reserved for the platform"},  // the shared deployment's
      {"http://10.0.0.9:8000/v1", "reserved for the platform"},
      {"http://10.0.0.1:8080", "reserved for the platform"},  // the API's listener
  };
  for (const Probe& p : probes) {
    Json body = DeploymentBody("egress-model");
    body["endpoints"] = Json::array({{{"url", "http://203.0.113.5:8000"}}, {{"url", p.url}}});
    http::Response r = h().CallJson("POST", "/api/v1/deployments", key, body);
    EXPECT_EQ(r.status, 403) << p.url << ": " << r.body;
    EXPECT_TRUE(Contains(ErrorMessage(r), "egress policy")) << ErrorMessage(r);
    EXPECT_TRUE(Contains(ErrorMessage(r), p.says)) << p.url << ": " << ErrorMessage(r);
  }
  EXPECT_EQ(DeploymentCount(), before) << "a refused deployment is not stored";

  // Public addresses and the networks the operator opened pass.
  Json body = DeploymentBody("egress-model");
  body["endpoints"] = Json::array({{{"url", "http://203.0.113.5:8000"}},
                                   {{"url", "https://models.example.com"}},
                                   {{"url", "http://10.0.0.5:8000"}}});
  http::Response created = h().CallJson("POST", "/api/v1/deployments", key, body);
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string path = "/api/v1/deployments/" + BodyOf(created)["id"].get<std::string>();
  // An update is held to the same rules, and a refused one changes nothing.
  http::Response moved =
      h().CallJson("PATCH", path, key, {{"endpoints", Endpoints("http://169.254.169.254")}});
  EXPECT_EQ(moved.status, 403) << moved.body;
  EXPECT_EQ(BodyOf(h().Call("GET", path, key))["endpoints"].size(), 3u);
  // A dedicated deployment staff place for a tenant is the tenant's to
  // edit later: the same rules.
  Json placed = DeploymentBody("egress-model");
  placed["tenant_id"] = w().own.id;
  placed["endpoints"] = Endpoints("http://127.0.0.1:8000");
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", Admin(), placed).status, 403);
  // Shared deployments are the platform staff's own servers: not restricted.
  Json shared = DeploymentBody("egress-shared-loopback");
  shared["endpoints"] = Endpoints("http://127.0.0.1:8000");
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", Admin(), shared).status, 201);
}

// Where the operator requires it, a tenant's dedicated deployment serves
// only a model the tenant is entitled to.
TEST_F(GatewayApiTest, WhereTheOperatorRequiresItADedicatedDeploymentIsOfAnEntitledModel) {
  const std::string& key = TenantAdmin().key;
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", key, DeploymentBody("byo-model")).status,
            201)
      << "by default a dedicated deployment may serve what it names";
  h().Reconfigure([](Services& s) { s.dedicated_requires_entitlement = true; });
  const int64_t before = DeploymentCount();
  http::Response refused =
      h().CallJson("POST", "/api/v1/deployments", key, DeploymentBody("licensed-model"));
  EXPECT_EQ(refused.status, 403) << refused.body;
  EXPECT_TRUE(Contains(ErrorMessage(refused), "not entitled to model licensed-model"))
      << ErrorMessage(refused);
  EXPECT_EQ(DeploymentCount(), before);
  ASSERT_EQ(h().Call("PUT", TenantPath() + "/entitlements/licensed-model", Admin()).status, 200);
  http::Response created =
      h().CallJson("POST", "/api/v1/deployments", key, DeploymentBody("licensed-model"));
  EXPECT_EQ(created.status, 201) << created.body;
  // Renaming it to a model without an entitlement is refused too.
  const std::string path = "/api/v1/deployments/" + BodyOf(created)["id"].get<std::string>();
  EXPECT_EQ(h().CallJson("PATCH", path, key, {{"model", "other-licensed-model"}}).status, 403);
  h().Reconfigure([](Services& s) { s.dedicated_requires_entitlement = false; });
}

TEST_F(GatewayApiTest, ATenantsOwnDeploymentStaysInTheTenantsRegions) {
  http::Response tenant =
      h().CallJson("POST", "/api/v1/tenants", Admin(),
                   {{"name", "resident"}, {"regions", {"eu-west", "eu-north"}}});
  ASSERT_EQ(tenant.status, 201) << tenant.body;
  const std::string id = BodyOf(tenant)["id"];
  Json body = DeploymentBody("resident-model");
  body["tenant_id"] = id;
  body["region"] = "us-east";
  http::Response outside = h().CallJson("POST", "/api/v1/deployments", Admin(), body);
  EXPECT_EQ(outside.status, 400);
  EXPECT_EQ(ErrorMessage(outside),
            "region us-east is outside the tenant's regions (eu-west, eu-north): its data may "
            "not go there");
  body["region"] = "eu-north";
  http::Response inside = h().CallJson("POST", "/api/v1/deployments", Admin(), body);
  ASSERT_EQ(inside.status, 201) << inside.body;
  const std::string dep = BodyOf(inside)["id"];
  // Nor may it move out later; within the regions it may.
  EXPECT_EQ(
      h().CallJson("PATCH", "/api/v1/deployments/" + dep, Admin(), {{"region", "us-east"}}).status,
      400);
  EXPECT_EQ(
      h().CallJson("PATCH", "/api/v1/deployments/" + dep, Admin(), {{"region", "eu-west"}}).status,
      200);
  // Shared deployments serve many tenants: any region.
  Json shared = DeploymentBody("resident-model");
  shared["region"] = "us-east";
  shared["endpoints"] = Endpoints("http://10.0.0.6:8000");  // not a tenant's server
  EXPECT_EQ(h().CallJson("POST", "/api/v1/deployments", Admin(), shared).status, 201);
}

TEST_F(GatewayApiTest, AnEndpointsPrefillLimitAndBurstAreKeptAndChanged) {
  Json body = DeploymentBody("paced-model");
  body["endpoints"] = Json::array(
      {{{"url", "http://10.0.0.7:8000"}, {"capacity", 32}, {"max_prefill", 2}, {"burst", 4}}});
  http::Response created = h().CallJson("POST", "/api/v1/deployments", Admin(), body);
  ASSERT_EQ(created.status, 201) << created.body;
  const std::string path = "/api/v1/deployments/" + BodyOf(created)["id"].get<std::string>();
  Json read = BodyOf(h().Call("GET", path, Admin()));
  EXPECT_EQ(read["endpoints"][0]["capacity"], 32);
  EXPECT_EQ(read["endpoints"][0]["max_prefill"], 2) << "stored and read back";
  EXPECT_EQ(read["endpoints"][0]["burst"], 4) << "stored and read back";
  http::Response changed = h().CallJson(
      "PATCH", path, Admin(),
      {{"endpoints", Json::array({{{"url", "http://10.0.0.7:8000"}, {"capacity", 32}}})}});
  ASSERT_EQ(changed.status, 200) << changed.body;
  Json after = BodyOf(h().Call("GET", path, Admin()));
  EXPECT_EQ(after["endpoints"][0]["max_prefill"], 0);
  EXPECT_EQ(after["endpoints"][0]["burst"], 0);
}

TEST_F(GatewayApiTest, TenantsSeeWhatTheyMayUseAndNotTheOperatorsServers) {
  const std::string shared = h().CreateDeployment("entitle-me", "");
  const std::string path = "/api/v1/deployments/" + shared;
  const std::string& key = Member().key;
  const std::string missing = "/api/v1/deployments/dep_nope";

  // Not entitled: the shared deployment does not exist for the tenant.
  http::Response hidden = h().Call("GET", path, key);
  EXPECT_EQ(hidden.status, 404);
  EXPECT_EQ(ErrorMessage(hidden), ErrorMessage(h().Call("GET", missing, key)));
  EXPECT_FALSE(Has(IdsOf(BodyOf(h().Call("GET", "/api/v1/deployments?limit=1000", key))), shared));

  ASSERT_EQ(h().Call("PUT", TenantPath() + "/entitlements/entitle-me", Admin()).status, 200);
  http::Response seen = h().Call("GET", path, key);
  ASSERT_EQ(seen.status, 200) << seen.body;
  EXPECT_TRUE(BodyOf(seen)["endpoints"].is_null()) << "a tenant sees no operator URLs";
  EXPECT_EQ(BodyOf(seen)["endpoint_count"], 1);
  EXPECT_EQ(BodyOf(seen)["capacity"], 4);
  Json list = BodyOf(h().Call("GET", "/api/v1/deployments?limit=1000", key));
  EXPECT_TRUE(Has(IdsOf(list), shared));
  EXPECT_TRUE(Has(IdsOf(list), w().own.deployment_id));
  EXPECT_FALSE(Has(IdsOf(list), w().other.deployment_id));
  for (const auto& d : list["items"]) {
    EXPECT_EQ(d["endpoints"].is_null(), d["visibility"] == "shared") << d.dump();
  }
  EXPECT_TRUE(BodyOf(h().Call("GET", path, Admin()))["endpoints"].is_array());
  // The tenant's own dedicated deployment shows its URLs.
  EXPECT_TRUE(
      BodyOf(h().Call("GET", "/api/v1/deployments/" + w().own.deployment_id, key))["endpoints"]
          .is_array());
  // Another tenant's dedicated deployment answers like a missing one.
  http::Response others = h().Call("GET", "/api/v1/deployments/" + w().other.deployment_id, key);
  EXPECT_EQ(others.status, 404);
  EXPECT_EQ(ErrorMessage(others), ErrorMessage(h().Call("GET", missing, key)));

  // Visible, but the platform's: a tenant admin changes nothing.
  http::Response patch = h().CallJson("PATCH", path, TenantAdmin().key, {{"version", "x"}});
  EXPECT_EQ(patch.status, 403);
  EXPECT_EQ(h().Call("DELETE", path, TenantAdmin().key).status, 403);
  EXPECT_EQ(BodyOf(h().Call("GET", path, Admin()))["version"], "");

  // Platform staff list what a tenant may use with tenant_id; a tenant may
  // name only its own.
  Json as_tenant =
      BodyOf(h().Call("GET", "/api/v1/deployments?limit=1000&tenant_id=" + w().own.id, Operator()));
  EXPECT_EQ(IdsOf(as_tenant), IdsOf(list));
  EXPECT_EQ(h().Call("GET", "/api/v1/deployments?tenant_id=" + w().other.id, key).status, 404);
  Json by_model = BodyOf(h().Call("GET", "/api/v1/deployments?model=entitle-me", Admin()));
  EXPECT_EQ(IdsOf(by_model), std::vector<std::string>{shared});

  // Revoked: gone again.
  ASSERT_EQ(h().Call("DELETE", TenantPath() + "/entitlements/entitle-me", Admin()).status, 204);
  EXPECT_EQ(h().Call("GET", path, key).status, 404);
}

TEST_F(GatewayApiTest, DeploymentChangesAreAuditedInTheOwnersChain) {
  auto last_audit = [&]() -> AuditRecord {
    auto page = h().store().ListAudit(std::nullopt, {"", 1000});
    AuditRecord last;
    while (page.has_value() && !page->items.empty()) {
      last = page->items.back();
      if (page->next_cursor.empty()) break;
      page = h().store().ListAudit(std::nullopt, {page->next_cursor, 1000});
    }
    return last;
  };
  http::Response created =
      h().CallJson("POST", "/api/v1/deployments", TenantAdmin().key, DeploymentBody("audited"));
  ASSERT_EQ(created.status, 201);
  std::string id = BodyOf(created)["id"];
  AuditRecord a = last_audit();
  EXPECT_EQ(a.action, "deployment.create");
  EXPECT_EQ(a.outcome, "allowed");
  EXPECT_EQ(a.tenant_id, w().own.id);
  EXPECT_EQ(a.target, "tenant/" + w().own.id + "/deployment/" + id);

  Json shared_body = DeploymentBody("audited-shared");
  shared_body["endpoints"] = Endpoints("http://10.0.0.6:8000");  // not a tenant's server
  http::Response shared = h().CallJson("POST", "/api/v1/deployments", Admin(), shared_body);
  ASSERT_EQ(shared.status, 201);
  a = last_audit();
  EXPECT_EQ(a.tenant_id, "");
  EXPECT_EQ(a.target, "platform/deployment/" + BodyOf(shared)["id"].get<std::string>());

  ASSERT_EQ(h().Call("DELETE", "/api/v1/deployments/" + id, Admin()).status, 204);
  a = last_audit();
  EXPECT_EQ(a.action, "deployment.delete");
  EXPECT_EQ(a.tenant_id, w().own.id);
  EXPECT_EQ(h().Call("GET", "/api/v1/deployments/" + id, Admin()).status, 404);
}

TEST_F(GatewayApiTest, EntitlementsAreIdempotentAndNamesAreChecked) {
  const std::string path = TenantPath() + "/entitlements/";
  http::Response first = h().Call("PUT", path + "ent-model", Admin());
  ASSERT_EQ(first.status, 200) << first.body;
  h().clock().AdvanceSeconds(5);
  http::Response again = h().Call("PUT", path + "ent-model", Admin());
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(BodyOf(first)["created_at"], BodyOf(again)["created_at"]);
  Json list = BodyOf(h().Call("GET", TenantPath() + "/entitlements", Viewer().key));
  std::vector<std::string> models;
  for (const auto& e : list["items"]) models.push_back(e["model"]);
  EXPECT_TRUE(Has(models, "ent-model"));
  EXPECT_TRUE(Has(models, fixture::kSharedModel));

  EXPECT_EQ(h().Call("PUT", path + "two%20words", Admin()).status, 400);
  EXPECT_EQ(h().Call("PUT", path + std::string(201, 'x'), Admin()).status, 400);
  EXPECT_EQ(h().Call("DELETE", path + "never-granted", Admin()).status, 404);
  // Only the platform admin grants.
  EXPECT_EQ(h().Call("PUT", path + "mine", TenantAdmin().key).status, 403);
  EXPECT_EQ(h().Call("PUT", path + "mine", Operator()).status, 403);
}

TEST_F(GatewayApiTest, TenantAdminsNarrowKeysWithinTheTenantsLimits) {
  const std::string tenant_path = TenantPath() + "/gateway-limits";
  const std::string key_path = TenantPath() + "/keys/" + w().own.object.key_id + "/gateway-limits";
  auto limits = [](int64_t rpm, int64_t tpm, int64_t conc, int64_t queued) {
    return Json{{"requests_per_minute", rpm},
                {"tokens_per_minute", tpm},
                {"max_concurrent", conc},
                {"max_queued", queued}};
  };
  // Before anything is set: one all-zero tenant row.
  Json none = BodyOf(h().Call("GET", tenant_path, Viewer().key));
  ASSERT_EQ(none["items"].size(), 1u) << none.dump();
  EXPECT_TRUE(none["items"][0]["key_id"].is_null());
  EXPECT_EQ(none["items"][0]["requests_per_minute"], 0);
  EXPECT_TRUE(none["items"][0]["updated_at"].is_null());

  // The tenant-wide row is the operator's.
  http::Response refused = h().CallJson("PUT", tenant_path, TenantAdmin().key, limits(1, 1, 1, 1));
  EXPECT_EQ(refused.status, 403);
  EXPECT_TRUE(Contains(ErrorMessage(refused), "per key")) << ErrorMessage(refused);
  ASSERT_EQ(h().CallJson("PUT", tenant_path, Operator(), limits(600, 100000, 8, 0)).status, 200);

  // A key's limits stay within the tenant's non-zero ones.
  http::Response within = h().CallJson("PUT", key_path, TenantAdmin().key, limits(60, 0, 8, 1000));
  ASSERT_EQ(within.status, 200) << within.body;
  Json rows = BodyOf(within)["items"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["key_id"], w().own.object.key_id);
  EXPECT_EQ(rows[1]["max_queued"], 1000) << "the tenant has no queue limit";
  EXPECT_TRUE(rows[1]["priority"].is_null());
  for (const Json& above : {limits(601, 0, 0, 0), limits(0, 100001, 0, 0), limits(0, 0, 9, 0)}) {
    http::Response r = h().CallJson("PUT", key_path, TenantAdmin().key, above);
    EXPECT_EQ(r.status, 400) << above.dump();
    EXPECT_TRUE(Contains(ErrorMessage(r), "above the tenant's limit")) << ErrorMessage(r);
  }
  // Platform staff are held to the same rule.
  EXPECT_EQ(h().CallJson("PUT", key_path, Admin(), limits(601, 0, 0, 0)).status, 400);

  Json with_priority = limits(1, 2, 3, 4);
  with_priority["priority"] = "interactive";
  ASSERT_EQ(h().CallJson("PUT", key_path, TenantAdmin().key, with_priority).status, 200);
  with_priority["priority"] = "urgent";
  EXPECT_EQ(h().CallJson("PUT", key_path, TenantAdmin().key, with_priority).status, 400);
  Json tenant_priority = limits(600, 100000, 8, 0);
  tenant_priority["priority"] = "batch";
  EXPECT_EQ(h().CallJson("PUT", tenant_path, Admin(), tenant_priority).status, 400)
      << "priority is a key's";
  EXPECT_EQ(h().CallJson("PUT", key_path, TenantAdmin().key, {{"requests_per_minute", 1}}).status,
            400);
  EXPECT_EQ(h().CallJson("PUT", key_path, TenantAdmin().key, limits(-1, 0, 0, 0)).status, 400);
  EXPECT_EQ(h().CallJson("PUT", key_path, Member().key, limits(1, 0, 0, 0)).status, 403);
  // Another tenant's key under this tenant is simply not found.
  EXPECT_EQ(
      h().CallJson("PUT", TenantPath() + "/keys/" + w().other.object.key_id + "/gateway-limits",
                   Admin(), limits(1, 0, 0, 0))
          .status,
      404);
  Json shown = BodyOf(h().Call("GET", tenant_path, Member().key));
  ASSERT_EQ(shown["items"].size(), 2u);
  EXPECT_EQ(shown["items"][1]["priority"], "interactive");

  // All zeros and no priority remove the key's row.
  ASSERT_EQ(h().CallJson("PUT", key_path, TenantAdmin().key, limits(0, 0, 0, 0)).status, 200);
  EXPECT_EQ(BodyOf(h().Call("GET", tenant_path, Member().key))["items"].size(), 1u);
  ASSERT_EQ(h().CallJson("PUT", tenant_path, Admin(), limits(0, 0, 0, 0)).status, 200);
}

TEST_F(GatewayApiTest, UsageIsTheTenantsOwnNewestFirstAndFiltered) {
  const Actor& member = Member();
  h().clock().AdvanceSeconds(60);
  const int64_t start = h().clock().NowMillis();
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    h().clock().AdvanceMillis(1000);
    ids.push_back(h().AddUsage(member, i % 2 ? "m-odd" : "m-even"));
  }
  const std::string usage = TenantPath() + "/usage";
  const std::string from = "?from=" + std::to_string(start);

  // Newest first, in pages.
  std::vector<std::string> seen;
  std::string cursor;
  for (int guard = 0; guard < 10; ++guard) {
    http::Response r = h().Call(
        "GET", usage + from + "&limit=2" + (cursor.empty() ? "" : "&cursor=" + cursor), member.key);
    ASSERT_EQ(r.status, 200) << r.body;
    Json page = BodyOf(r);
    for (const auto& u : page["items"]) {
      seen.push_back(u["id"]);
      EXPECT_TRUE(u["endpoint"].is_null()) << "a tenant sees no upstream URL";
      EXPECT_EQ(u["tenant_id"], w().own.id);
    }
    if (page["next_cursor"].is_null()) break;
    cursor = page["next_cursor"];
  }
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));
  Json platform = BodyOf(h().Call("GET", usage + from, Admin()));
  ASSERT_FALSE(platform["items"].empty());
  EXPECT_EQ(platform["items"][0]["endpoint"], "http://10.0.0.9:8000");

  // Filters: RFC 3339 and milliseconds, model, key.
  const std::string second = FormatTimestamp(start + 2000);
  Json after = BodyOf(h().Call("GET", usage + "?from=" + second, member.key));
  EXPECT_EQ(IdsOf(after), (std::vector<std::string>{ids[4], ids[3], ids[2], ids[1]}));
  Json window = BodyOf(h().Call(
      "GET", usage + from + "&to=" + std::to_string(start + 3000) + "&model=m-even", member.key));
  EXPECT_EQ(IdsOf(window), std::vector<std::string>{ids[0]});
  Json by_key = BodyOf(h().Call("GET", usage + "?key_id=" + member.key_id, member.key));
  EXPECT_EQ(by_key["items"].size(), 5u);
  for (const char* bad :
       {"?from=yesterday", "?to=2026-02-30T00:00:00Z", "?cursor=garbage", "?from=2000&to=1000"}) {
    EXPECT_EQ(h().Call("GET", usage + bad, member.key).status, 400) << bad;
  }

  // Totals.
  Json total = BodyOf(h().Call("GET", usage + "/summary" + from, Viewer().key));
  ASSERT_EQ(total["items"].size(), 1u) << total.dump();
  EXPECT_TRUE(total["items"][0]["group"].is_null());
  EXPECT_EQ(total["items"][0]["requests"], 5);
  EXPECT_EQ(total["items"][0]["input_tokens"], 60);
  EXPECT_EQ(total["items"][0]["output_tokens"], 170);
  Json by_model =
      BodyOf(h().Call("GET", usage + "/summary" + from + "&group_by=model", member.key));
  ASSERT_EQ(by_model["items"].size(), 2u);
  EXPECT_EQ(by_model["items"][0]["group"], "m-even");
  EXPECT_EQ(by_model["items"][0]["requests"], 3);
  EXPECT_EQ(by_model["group_by"], "model");
  EXPECT_EQ(h().Call("GET", usage + "/summary?group_by=tenant", member.key).status, 400);
  // Per deployment that served, and only one deployment's.
  Json by_deployment =
      BodyOf(h().Call("GET", usage + "/summary" + from + "&group_by=deployment", member.key));
  ASSERT_EQ(by_deployment["items"].size(), 1u) << by_deployment.dump();
  EXPECT_EQ(by_deployment["items"][0]["group"], "dep_fixture");
  EXPECT_EQ(by_deployment["items"][0]["requests"], 5);
  // Every tenant of the fixture has usage on dep_fixture: the filter never
  // widens the caller's scope, and another tenant's path stays a 404.
  Json on_fixture = BodyOf(h().Call("GET", usage + from + "&deployment=dep_fixture", member.key));
  EXPECT_EQ(on_fixture["items"].size(), 5u);
  for (const auto& u : on_fixture["items"]) EXPECT_EQ(u["tenant_id"], w().own.id);
  for (const char* path : {"/usage?deployment=dep_fixture",
                           "/usage/summary?group_by=deployment&deployment=dep_fixture"}) {
    EXPECT_EQ(h().Call("GET", "/api/v1/tenants/" + w().other.id + path, member.key).status, 404)
        << path;
  }
  Json none =
      BodyOf(h().Call("GET", usage + "/summary" + from + "&deployment=dep_other", member.key));
  EXPECT_EQ(none["items"][0]["requests"], 0);
  http::Response long_filter =
      h().Call("GET", usage + "?deployment=" + std::string(201, 'd'), member.key);
  EXPECT_EQ(long_filter.status, 400);
  EXPECT_NE(ErrorMessage(long_filter).find("'deployment' is at most 200"), std::string::npos);
  // Refusals have no deployment: the parameter is not theirs.
  EXPECT_EQ(h().Call("GET", usage + "/refusals?deployment=dep_fixture", member.key).status, 400);

  // Another tenant's usage answers like a tenant that does not exist.
  http::Response other = h().Call("GET", "/api/v1/tenants/" + w().other.id + "/usage", member.key);
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(ErrorMessage(other),
            ErrorMessage(h().Call("GET", "/api/v1/tenants/tn_nope/usage", member.key)));
  Json others = BodyOf(h().Call("GET", "/api/v1/tenants/" + w().other.id + "/usage", Admin()));
  for (const auto& u : others["items"]) EXPECT_EQ(u["tenant_id"], w().other.id);
}

// Issue 15 #7: a record a model server made hold the int64 maximum turned
// every summary of the tenant into a 500 ("integer overflow"), for the
// tenant and for staff.
TEST_F(GatewayApiTest, AnImplausibleUsageRecordDoesNotBreakTheSummary) {
  fixture::TenantSeed t = h().CreateTenant("huge-usage");
  Actor user = h().CreateActor(t.id, t.name, Role::kTenantMember, /*human=*/false);
  for (int i = 0; i < 2; ++i) {
    UsageRecord u;
    u.id = "req_huge_" + std::to_string(i);
    u.tenant_id = t.id;
    u.key_id = user.key_id;
    u.model = "m";
    u.api = "chat.completions";
    u.output_tokens = INT64_MAX;
    u.status = "completed";
    u.http_status = 200;
    u.created_at = h().clock().NowMillis();
    ASSERT_TRUE(h().store().InsertUsageRecords({u}).has_value());
  }
  const std::string path = "/api/v1/tenants/" + t.id + "/usage";
  for (const std::string& caller : {user.key, Admin()}) {
    http::Response r = h().Call("GET", path + "/summary", caller);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(BodyOf(r)["items"][0]["output_tokens"], 2 * kMaxRecordTokens);
  }
  Json records = BodyOf(h().Call("GET", path, user.key));
  ASSERT_EQ(records["items"].size(), 2u);
  EXPECT_EQ(records["items"][0]["flag"], kUsageOverBound);
}

// Issue 15 #10: refusals are counted, not recorded; the tenant reads the
// counts per key and reason, and only its own.
TEST_F(GatewayApiTest, RefusalsAreReadAsCountsPerKeyAndReason) {
  const Actor& member = Member();
  const int64_t minute = h().clock().NowMillis() / 60'000 * 60'000;
  ASSERT_TRUE(h().store()
                  .AddGatewayRefusals(
                      {{w().own.id, member.key_id, "rate_limit_exceeded", minute, 40},
                       {w().own.id, member.key_id, "rate_limit_exceeded", minute + 60'000, 2},
                       {w().other.id, "key_x", "model_not_found", minute, 9}})
                  .has_value());
  const std::string path = TenantPath() + "/usage/refusals";
  http::Response r = h().Call("GET", path, Viewer().key);
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = BodyOf(r);
  ASSERT_EQ(body["items"].size(), 1u) << body.dump();
  EXPECT_EQ(body["items"][0]["key_id"], member.key_id);
  EXPECT_EQ(body["items"][0]["reason"], "rate_limit_exceeded");
  EXPECT_EQ(body["items"][0]["count"], 42);
  EXPECT_EQ(body["items"][0]["first_minute_at"], FormatTimestamp(minute));
  EXPECT_EQ(body["items"][0]["last_minute_at"], FormatTimestamp(minute + 60'000));
  Json later =
      BodyOf(h().Call("GET", path + "?from=" + std::to_string(minute + 60'000), member.key));
  ASSERT_EQ(later["items"].size(), 1u);
  EXPECT_EQ(later["items"][0]["count"], 2);
  EXPECT_EQ(h().Call("GET", path + "?from=yesterday", member.key).status, 400);
  // Numbers the caller chose: refused or an empty answer, never a 500.
  for (const char* from : {"9223372036854775807", "99999999999999999999", "-1", "0x10"}) {
    SCOPED_TRACE(from);
    http::Response odd = h().Call("GET", path + "?from=" + from, member.key);
    if (odd.status == 200) {
      EXPECT_TRUE(BodyOf(odd)["items"].empty()) << odd.body;
    } else {
      EXPECT_EQ(odd.status, 400) << odd.body;
    }
  }
  EXPECT_EQ(
      h().Call("GET", "/api/v1/tenants/" + w().other.id + "/usage/refusals", member.key).status,
      404);
}

TEST_F(GatewayApiTest, EvictionTakesTheTenantsGatewayRowsButKeepsItsUsage) {
  fixture::TenantSeed t = h().CreateTenant("evict-gw");
  Actor user = h().CreateActor(t.id, t.name, Role::kTenantAdmin, /*human=*/false);
  std::string dep = h().CreateDeployment("evict-model", t.id);
  ASSERT_EQ(h().Call("PUT", "/api/v1/tenants/" + t.id + "/entitlements/x", Admin()).status, 200);
  h().AddUsage(user, "x");
  auto before = h().store().GatewayPolicyMarkerForGateway();
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(h().Call("POST", "/api/v1/tenants/" + t.id + "/evict", Admin()).status, 200);
  EXPECT_EQ(h().Call("GET", "/api/v1/deployments/" + dep, Admin()).status, 404);
  EXPECT_TRUE(h().store().ListEntitlements(TenantScope::Of(t.id))->empty());
  auto after = h().store().GatewayPolicyMarkerForGateway();
  ASSERT_TRUE(after.has_value());
  EXPECT_NE(*after, *before);
  // Usage is a billing record: it stays, and platform staff read it (and
  // its totals) under the evicted tenant's id. It used to be deleted.
  http::Response usage = h().Call("GET", "/api/v1/tenants/" + t.id + "/usage", Admin());
  ASSERT_EQ(usage.status, 200) << usage.body;
  ASSERT_EQ(BodyOf(usage)["items"].size(), 1u);
  EXPECT_EQ(BodyOf(usage)["items"][0]["tenant_id"], t.id);
  http::Response totals = h().Call("GET", "/api/v1/tenants/" + t.id + "/usage/summary", Admin());
  EXPECT_EQ(totals.status, 200) << totals.body;
  // Usage the gateway ships after the eviction is kept too.
  h().AddUsage(user, "x");
  EXPECT_EQ(BodyOf(h().Call("GET", "/api/v1/tenants/" + t.id + "/usage", Admin()))["items"].size(),
            2u);
}

}  // namespace
}  // namespace atrium::api
