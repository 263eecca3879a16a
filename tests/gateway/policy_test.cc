#include "gateway/policy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "identity/api_key.h"
#include "support/result_matchers.h"

namespace atrium::gateway {
namespace {

constexpr int64_t kNow = 1'700'000'000'000;

Tenant MakeTenant(std::string id, std::vector<std::string> regions, int64_t weight = 1,
                  std::string state = "active") {
  Tenant t;
  t.id = std::move(id);
  t.name = t.id;
  t.regions = std::move(regions);
  t.weight = weight;
  t.state = std::move(state);
  return t;
}

DeploymentRecord MakeDeployment(std::string id, std::string model, std::string region,
                                std::string tenant = "") {
  DeploymentRecord d;
  d.id = std::move(id);
  d.model = std::move(model);
  d.region = std::move(region);
  d.visibility = tenant.empty() ? "shared" : "dedicated";
  d.tenant_id = std::move(tenant);
  d.endpoints = {{"http://" + d.id + ":8000", 8}};
  return d;
}

class PolicyTest : public ::testing::Test {
 protected:
  // Adds a key; returns its text.
  std::string AddKey(const std::string& tenant, const std::string& role,
                     const std::string& owner_role = "", const std::string& owner_state = "active",
                     std::vector<std::string> scopes = {}) {
    GeneratedApiKey generated = GenerateApiKey();
    GatewayKeyRow row;
    row.key.id = generated.key_id;
    row.key.tenant_id = tenant;
    row.key.owner_user_id = "usr_" + generated.key_id;
    row.key.role = role;
    row.key.scopes = std::move(scopes);
    row.key.secret_hash = generated.secret_hash;
    row.owner_state = owner_state;
    row.owner_role = owner_role.empty() ? role : owner_role;
    rows_.keys.push_back(row);
    return generated.text;
  }
  GatewayKeyRow& LastKey() { return rows_.keys.back(); }

  void SetUp() override {
    rows_.tenants = {MakeTenant("tn_eu", {"eu-west"}, 3), MakeTenant("tn_any", {}),
                     MakeTenant("tn_off", {}, 1, "suspended")};
    rows_.deployments = {
        MakeDeployment("dep_b", "llama", "us-east"),
        MakeDeployment("dep_a", "llama", "eu-west"),
        MakeDeployment("dep_c", "private", "eu-west", "tn_eu"),
        // Dedicated to the eu-west tenant but placed in us-east: residency
        // keeps its requests out.
        MakeDeployment("dep_g", "offshore", "us-east", "tn_eu"),
        MakeDeployment("dep_d", "mistral", "us-east"),
        MakeDeployment("dep_e", "llama", "us-east", "tn_any"),
        MakeDeployment("dep_f", "qwen", "eu-west"),
    };
    rows_.entitlements = {{"tn_eu", "llama", 0},
                          {"tn_eu", "mistral", 0},
                          {"tn_any", "llama", 0},
                          {"tn_any", "mistral", 0},
                          {"tn_off", "llama", 0}};
    rows_.limits = {{"tn_eu", "", {600, 100'000, 10, 50}, "", 0}};
  }

  std::shared_ptr<const PolicySnapshot> Build() { return PolicySnapshot::Build(rows_, 7); }

  Caller MustAuthenticate(const PolicySnapshot& policy, const std::string& key) {
    auto caller = policy.Authenticate("Bearer " + key, kNow);
    EXPECT_TRUE(caller.has_value()) << caller.error().message;
    return caller.has_value() ? **caller : Caller{};
  }

  std::vector<std::string> Route(const PolicySnapshot& policy, const Caller& caller,
                                 const std::string& model) {
    auto route = policy.Resolve(caller, model);
    if (!route.has_value()) return {"error: " + route.error().message};
    std::vector<std::string> ids;
    for (const DeploymentRecord* d : route->deployments) ids.push_back(d->id);
    return ids;
  }

  GatewayPolicyRows rows_;
};

TEST_F(PolicyTest, AuthenticatesATenantKey) {
  std::string key = AddKey("tn_eu", "tenant-member");
  std::string key_id = LastKey().key.id;
  rows_.limits.push_back({"tn_eu", key_id, {60, 1000, 2, 5}, "batch", 0});
  auto policy = Build();
  EXPECT_EQ(policy->version(), 7);
  Caller caller = MustAuthenticate(*policy, key);
  EXPECT_EQ(caller.tenant_id, "tn_eu");
  EXPECT_EQ(caller.key_id, key_id);
  EXPECT_EQ(caller.role, "tenant-member");
  EXPECT_DOUBLE_EQ(caller.weight, 3);
  EXPECT_EQ(caller.priority, Priority::kBatch);
  EXPECT_EQ(caller.regions, std::vector<std::string>{"eu-west"});
  ASSERT_EQ(caller.subjects.size(), 2u);
  EXPECT_EQ(caller.subjects[0].name, "tenant:tn_eu");
  EXPECT_EQ(caller.subjects[0].limits.requests_per_minute, 600);
  EXPECT_EQ(caller.subjects[0].limits.max_queued, 50);
  EXPECT_EQ(caller.subjects[1].name, "key:" + key_id);
  EXPECT_EQ(caller.subjects[1].limits.tokens_per_minute, 1000);
  EXPECT_EQ(caller.subjects[1].limits.max_concurrent, 2);
}

TEST_F(PolicyTest, AConnectionsKeyMemoSkipsTheHashButNotTheChecks) {
  std::string key = AddKey("tn_any", "tenant-member");
  LastKey().key.expires_at = kNow + 1000;
  std::string other = AddKey("tn_any", "tenant-member");
  auto policy = Build();
  PolicySnapshot::KeyMemo memo;

  // A failure fills nothing.
  EXPECT_FALSE(policy->Authenticate("Bearer " + key + "x", kNow, &memo).has_value());
  EXPECT_EQ(memo.snapshot, 0u);

  auto first = policy->Authenticate("Bearer " + key, kNow, &memo);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(memo.snapshot, policy->serial());
  EXPECT_EQ(memo.key_id, (*first)->key_id);
  auto again = policy->Authenticate("Bearer " + key, kNow, &memo);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ((*again)->key_id, (*first)->key_id);

  // Expiry is checked on every request, remembered or not.
  auto late = policy->Authenticate("Bearer " + key, kNow + 1000, &memo);
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().message, "API key expired");

  // Another header is verified afresh (and a wrong secret still fails).
  std::string wrong = key;
  wrong.back() = wrong.back() == 'a' ? 'b' : 'a';
  EXPECT_FALSE(policy->Authenticate("Bearer " + wrong, kNow, &memo).has_value());
  auto switched = policy->Authenticate("Bearer " + other, kNow, &memo);
  ASSERT_TRUE(switched.has_value());
  EXPECT_NE((*switched)->key_id, (*first)->key_id);
  EXPECT_EQ(memo.key_id, (*switched)->key_id);

  // A new snapshot does not trust the old one's memo: there the key id has
  // another secret, and the remembered header fails.
  rows_.keys.back().key.secret_hash = rows_.keys.front().key.secret_hash;
  auto next = Build();
  EXPECT_NE(next->serial(), policy->serial());
  auto stale = next->Authenticate("Bearer " + other, kNow, &memo);
  ASSERT_FALSE(stale.has_value());
  EXPECT_EQ(stale.error().message, "invalid API key");
}

TEST_F(PolicyTest, KeysWithoutLimitRecordsAreUnlimitedAndInteractive) {
  std::string key = AddKey("tn_any", "tenant-admin");
  Caller caller = MustAuthenticate(*Build(), key);
  EXPECT_EQ(caller.priority, Priority::kInteractive);
  EXPECT_DOUBLE_EQ(caller.weight, 1);
  ASSERT_EQ(caller.subjects.size(), 2u);
  EXPECT_EQ(caller.subjects[0].limits.requests_per_minute, 0);
  EXPECT_EQ(caller.subjects[1].limits.max_concurrent, 0);
}

TEST_F(PolicyTest, IgnoresAKeyLimitRecordOfAnotherTenant) {
  std::string key = AddKey("tn_any", "tenant-member");
  rows_.limits.push_back({"tn_eu", LastKey().key.id, {1, 1, 1, 1}, "batch", 0});
  Caller caller = MustAuthenticate(*Build(), key);
  EXPECT_EQ(caller.subjects[1].limits.requests_per_minute, 0);
  EXPECT_EQ(caller.priority, Priority::kInteractive);
}

TEST_F(PolicyTest, AcceptsTheBearerSchemeInAnyCase) {
  std::string key = AddKey("tn_any", "tenant-member");
  auto policy = Build();
  EXPECT_OK(policy->Authenticate("bearer " + key, kNow));
  EXPECT_OK(policy->Authenticate("  BEARER   " + key + "  ", kNow));
}

TEST_F(PolicyTest, RefusesMissingOrMalformedCredentials) {
  std::string key = AddKey("tn_any", "tenant-member");
  auto policy = Build();
  for (const std::string& header :
       {std::string(), std::string("   "), std::string("Bearer"), std::string("Bearer   "),
        "Basic " + key, key, "Bearerx " + key, std::string("Bearer sk-not-ours"),
        "Bearer " + key.substr(0, key.size() - 1), "Bearer " + key + "x"}) {
    EXPECT_ERROR(policy->Authenticate(header, kNow), ErrorCode::kUnauthenticated);
  }
}

TEST_F(PolicyTest, RefusesUnknownKeysAndWrongSecrets) {
  auto unknown = GenerateApiKey();
  std::string key = AddKey("tn_any", "tenant-member");
  LastKey().key.secret_hash = HashApiKeySecret("another secret");
  auto policy = Build();
  EXPECT_ERROR(policy->Authenticate("Bearer " + unknown.text, kNow), ErrorCode::kUnauthenticated);
  auto wrong = policy->Authenticate("Bearer " + key, kNow);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(wrong.error().message, "invalid API key");
}

TEST_F(PolicyTest, RefusesRevokedAndExpiredKeys) {
  std::string revoked = AddKey("tn_any", "tenant-member");
  LastKey().key.revoked_at = kNow - 1;
  std::string expiring = AddKey("tn_any", "tenant-member");
  LastKey().key.expires_at = kNow + 1000;
  auto policy = Build();
  EXPECT_ERROR(policy->Authenticate("Bearer " + revoked, kNow), ErrorCode::kUnauthenticated);
  EXPECT_OK(policy->Authenticate("Bearer " + expiring, kNow + 999));
  auto expired = policy->Authenticate("Bearer " + expiring, kNow + 1000);
  ASSERT_FALSE(expired.has_value());
  EXPECT_EQ(expired.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(expired.error().message, "API key expired");
}

TEST_F(PolicyTest, RefusesDisabledOwnersAndKeysAboveTheirOwner) {
  std::string disabled = AddKey("tn_any", "tenant-member", "", "disabled");
  std::string above = AddKey("tn_any", "tenant-admin", "tenant-member");
  std::string bad_role = AddKey("tn_any", "superuser");
  auto policy = Build();
  EXPECT_ERROR(policy->Authenticate("Bearer " + disabled, kNow), ErrorCode::kUnauthenticated);
  EXPECT_ERROR(policy->Authenticate("Bearer " + above, kNow), ErrorCode::kUnauthenticated);
  EXPECT_ERROR(policy->Authenticate("Bearer " + bad_role, kNow), ErrorCode::kUnauthenticated);
}

TEST_F(PolicyTest, SuspendedAndUnknownTenantsAreUnauthenticated) {
  std::string suspended = AddKey("tn_off", "tenant-member");
  std::string gone = AddKey("tn_gone", "tenant-member");
  auto policy = Build();
  auto r = policy->Authenticate("Bearer " + suspended, kNow);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kUnauthenticated);
  EXPECT_EQ(r.error().message, "tenant is suspended");
  EXPECT_ERROR(policy->Authenticate("Bearer " + gone, kNow), ErrorCode::kUnauthenticated);
}

TEST_F(PolicyTest, RolesWithoutModelInvokeAndPlatformKeysAreForbidden) {
  std::string viewer = AddKey("tn_any", "tenant-viewer");
  std::string platform = AddKey("", "platform-admin");
  std::string member = AddKey("tn_any", "tenant-member");
  std::string admin = AddKey("tn_any", "tenant-admin");
  auto policy = Build();
  EXPECT_ERROR(policy->Authenticate("Bearer " + viewer, kNow), ErrorCode::kPermissionDenied);
  EXPECT_ERROR(policy->Authenticate("Bearer " + platform, kNow), ErrorCode::kPermissionDenied);
  EXPECT_OK(policy->Authenticate("Bearer " + member, kNow));
  EXPECT_OK(policy->Authenticate("Bearer " + admin, kNow));
}

TEST_F(PolicyTest, RoutesDedicatedFirstThenSharedInTheTenantsRegions) {
  std::string eu = AddKey("tn_eu", "tenant-member");
  std::string any = AddKey("tn_any", "tenant-member");
  auto policy = Build();
  Caller eu_caller = MustAuthenticate(*policy, eu);
  Caller any_caller = MustAuthenticate(*policy, any);
  // Data residency: only the eu-west deployment.
  EXPECT_EQ(Route(*policy, eu_caller, "llama"), std::vector<std::string>{"dep_a"});
  // A tenant's own deployment needs no entitlement.
  EXPECT_EQ(Route(*policy, eu_caller, "private"), std::vector<std::string>{"dep_c"});
  // No region limit: the dedicated one, then every shared one in id order.
  EXPECT_EQ(Route(*policy, any_caller, "llama"),
            (std::vector<std::string>{"dep_e", "dep_a", "dep_b"}));
  auto route = policy->Resolve(any_caller, "mistral");
  ASSERT_OK(route);
  EXPECT_EQ(route->model, "mistral");
  ASSERT_EQ(route->deployments.size(), 1u);
  EXPECT_EQ(route->deployments[0], policy->Deployment("dep_d"));
}

// Issue 15 #2: where the operator requires entitlement for dedicated
// deployments, the API refused new ones of a model the tenant may not use,
// but one made before (or whose entitlement was revoked since) was still
// routed to.
TEST_F(PolicyTest, WhereEntitlementIsRequiredAnUnentitledDedicatedDeploymentIsNotRouted) {
  std::string eu = AddKey("tn_eu", "tenant-member");
  std::string any = AddKey("tn_any", "tenant-member");
  auto policy = PolicySnapshot::Build(WithoutUnentitledDedicated(rows_), 7);
  Caller eu_caller = MustAuthenticate(*policy, eu);
  Caller any_caller = MustAuthenticate(*policy, any);
  // tn_eu is not entitled to "private": its dedicated deployment is gone.
  EXPECT_ERROR(policy->Resolve(eu_caller, "private"), ErrorCode::kNotFound);
  EXPECT_EQ(policy->Deployment("dep_c"), nullptr);
  // tn_any is entitled to "llama": its dedicated one still comes first.
  EXPECT_EQ(Route(*policy, any_caller, "llama"),
            (std::vector<std::string>{"dep_e", "dep_a", "dep_b"}));
  // Shared deployments are untouched.
  EXPECT_NE(policy->Deployment("dep_f"), nullptr);
}

TEST_F(PolicyTest, UnknownAndForbiddenModelsGetTheSameAnswer) {
  std::string eu = AddKey("tn_eu", "tenant-member");
  std::string any = AddKey("tn_any", "tenant-member");
  auto policy = Build();
  Caller eu_caller = MustAuthenticate(*policy, eu);
  Caller any_caller = MustAuthenticate(*policy, any);
  auto expect_not_found = [&](const Caller& caller, const std::string& model) {
    auto r = policy->Resolve(caller, model);
    ASSERT_FALSE(r.has_value()) << model;
    EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(r.error().message,
              "The model `" + model + "` does not exist or you do not have access to it.");
  };
  expect_not_found(eu_caller, "no-such-model");
  expect_not_found(eu_caller, "mistral");   // entitled, but only in us-east
  expect_not_found(eu_caller, "qwen");      // in eu-west, but not entitled
  expect_not_found(any_caller, "private");  // another tenant's dedicated model
  expect_not_found(eu_caller, "offshore");  // its own, but outside its regions
}

TEST_F(PolicyTest, KeyScopesNarrowTheModels) {
  std::string scoped = AddKey("tn_any", "tenant-member", "", "active", {"mistral", "qwen"});
  auto policy = Build();
  Caller caller = MustAuthenticate(*policy, scoped);
  EXPECT_ERROR(policy->Resolve(caller, "llama"), ErrorCode::kNotFound);
  EXPECT_OK(policy->Resolve(caller, "mistral"));
  // A scope does not grant what the tenant lacks.
  EXPECT_ERROR(policy->Resolve(caller, "qwen"), ErrorCode::kNotFound);
  EXPECT_EQ(policy->ModelsFor(caller), std::vector<std::string>{"mistral"});
}

TEST_F(PolicyTest, ListsTheModelsACallerMayUse) {
  std::string eu = AddKey("tn_eu", "tenant-member");
  std::string any = AddKey("tn_any", "tenant-member");
  auto policy = Build();
  EXPECT_EQ(policy->ModelsFor(MustAuthenticate(*policy, eu)),
            (std::vector<std::string>{"llama", "private"}));
  EXPECT_EQ(policy->ModelsFor(MustAuthenticate(*policy, any)),
            (std::vector<std::string>{"llama", "mistral"}));
}

TEST_F(PolicyTest, DeploymentsWithAnUnknownVisibilityServeNoOne) {
  DeploymentRecord odd = MakeDeployment("dep_x", "odd", "eu-west");
  odd.visibility = "public";
  rows_.deployments.push_back(odd);
  rows_.entitlements.push_back({"tn_eu", "odd", 0});
  std::string eu = AddKey("tn_eu", "tenant-member");
  auto policy = Build();
  EXPECT_ERROR(policy->Resolve(MustAuthenticate(*policy, eu), "odd"), ErrorCode::kNotFound);
  // Still known by id, for records and diagnostics.
  ASSERT_NE(policy->Deployment("dep_x"), nullptr);
  EXPECT_EQ(policy->Deployment("dep_x")->model, "odd");
  EXPECT_EQ(policy->Deployment("dep_nope"), nullptr);
}

TEST_F(PolicyTest, ASnapshotOutlivesItsReplacement) {
  std::string eu = AddKey("tn_eu", "tenant-member");
  auto old_policy = Build();
  Caller caller = MustAuthenticate(*old_policy, eu);
  auto route = old_policy->Resolve(caller, "llama");
  ASSERT_OK(route);
  rows_.deployments.clear();
  auto new_policy = Build();
  EXPECT_ERROR(new_policy->Resolve(caller, "llama"), ErrorCode::kNotFound);
  // The request that started on the old snapshot still reads its deployment.
  EXPECT_EQ(route->deployments[0]->id, "dep_a");
}

// ------------------------------------------------------------- LoRA adapters

class AdapterPolicyTest : public PolicyTest {
 protected:
  void SetUp() override {
    PolicyTest::SetUp();
    // dep_a: shared llama in eu-west, managed; dep_c: tn_eu's own.
    for (DeploymentRecord& d : rows_.deployments) {
      if (d.id == "dep_a" || d.id == "dep_c" || d.id == "dep_b") d.serving = "{}";
    }
    rows_.adapters = {
        Ready("ad_1", "tn_eu", "dep_a", "support"), Ready("ad_2", "tn_any", "dep_a", "support"),
        Ready("ad_3", "tn_eu", "dep_c", "tuned"), Ready("ad_4", "tn_any", "dep_b", "us-only")};
  }
  static AdapterRecord Ready(std::string id, std::string tenant, std::string deployment,
                             std::string name) {
    AdapterRecord a;
    a.id = std::move(id);
    a.tenant_id = std::move(tenant);
    a.deployment_id = std::move(deployment);
    a.name = std::move(name);
    a.status = "ready";
    return a;
  }
};

TEST_F(AdapterPolicyTest, AnAdapterIsRoutedForItsTenantAloneToItsDeploymentAsItsId) {
  Caller eu = MustAuthenticate(*Build(), AddKey("tn_eu", "tenant-member"));
  Caller any = MustAuthenticate(*Build(), AddKey("tn_any", "tenant-member"));
  auto policy = Build();
  auto route = policy->Resolve(eu, "llama:support");
  ASSERT_OK(route);
  EXPECT_EQ(route->model, "llama:support");
  ASSERT_EQ(route->deployments.size(), 1u);
  EXPECT_EQ(route->deployments[0]->id, "dep_a");
  EXPECT_EQ(route->upstream_model, "ad_1");
  // The same name of another tenant is that tenant's own adapter.
  route = policy->Resolve(any, "llama:support");
  ASSERT_OK(route);
  EXPECT_EQ(route->upstream_model, "ad_2");
  // Another tenant's adapter answers like a model that does not exist.
  auto other = policy->Resolve(any, "private:tuned");
  ASSERT_FALSE(other.has_value());
  EXPECT_EQ(other.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(other.error().message,
            "The model `private:tuned` does not exist or you do not have access to it.");
  // The base model routes as before, sent as the client named it.
  route = policy->Resolve(eu, "llama");
  ASSERT_OK(route);
  EXPECT_EQ(route->upstream_model, "");
  EXPECT_EQ(Route(*policy, eu, "private:tuned"), std::vector<std::string>{"dep_c"});
}

TEST_F(AdapterPolicyTest, AnAdapterNeedsItsBaseDeploymentUsableAndReady) {
  Caller eu = MustAuthenticate(*Build(), AddKey("tn_eu", "tenant-member"));
  Caller any = MustAuthenticate(*Build(), AddKey("tn_any", "tenant-member"));
  // dep_b is in us-east: tn_any (no regions) may use it, so may its adapter.
  EXPECT_EQ(Route(*Build(), any, "llama:us-only"), std::vector<std::string>{"dep_b"});
  // An adapter whose tenant lost the entitlement is not routed.
  rows_.entitlements.erase(rows_.entitlements.begin());  // tn_eu, llama
  EXPECT_ERROR(Build()->Resolve(eu, "llama:support"), ErrorCode::kNotFound);
  // Nor one still loading, nor one on an external deployment.
  rows_.adapters[1].status = "loading";
  EXPECT_ERROR(Build()->Resolve(any, "llama:support"), ErrorCode::kNotFound);
  rows_.adapters[3].deployment_id = "dep_d";  // external
  EXPECT_ERROR(Build()->Resolve(any, "mistral:us-only"), ErrorCode::kNotFound);
}

TEST_F(AdapterPolicyTest, KeyScopesNameTheAdapterOrItsModelAndListsShowTheTenantsOwn) {
  std::string scoped_to_model = AddKey("tn_eu", "tenant-member", "", "active", {"llama"});
  std::string scoped_to_adapter = AddKey("tn_eu", "tenant-member", "", "active", {"private:tuned"});
  std::string scoped_elsewhere = AddKey("tn_eu", "tenant-member", "", "active", {"mistral"});
  std::string eu = AddKey("tn_eu", "tenant-member");
  auto policy = Build();
  EXPECT_OK(policy->Resolve(MustAuthenticate(*policy, scoped_to_model), "llama:support"));
  Caller adapter_only = MustAuthenticate(*policy, scoped_to_adapter);
  EXPECT_OK(policy->Resolve(adapter_only, "private:tuned"));
  EXPECT_ERROR(policy->Resolve(adapter_only, "private"), ErrorCode::kNotFound);
  EXPECT_ERROR(policy->Resolve(MustAuthenticate(*policy, scoped_elsewhere), "llama:support"),
               ErrorCode::kNotFound);
  EXPECT_EQ(policy->ModelsFor(MustAuthenticate(*policy, eu)),
            (std::vector<std::string>{"llama", "llama:support", "private", "private:tuned"}));
  EXPECT_EQ(policy->ModelsFor(adapter_only), std::vector<std::string>{"private:tuned"});
}

}  // namespace
}  // namespace atrium::gateway
