// The inference gateway's rows — deployments, entitlements, gateway limits,
// usage records — and the gateway's policy read and change marker, on SQLite
// and PostgreSQL (see test_databases.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/clock.h"
#include "crypto/ids.h"
#include "store/fault_injecting_connection.h"
#include "store/store.h"
#include "store/test_databases.h"
#include "support/result_matchers.h"

namespace atrium {
namespace {

using testdb::Backend;
using testdb::BackendName;

class GatewayStoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
  }
  void TearDown() override {
    store_.reset();
    database_.Drop();
  }

  std::string NextId(std::string_view prefix) {
    clock_.AdvanceMillis(1);
    return NewId(prefix, clock_);
  }

  Tenant MakeTenant(const std::string& name) {
    Tenant t;
    t.id = NextId("tn");
    t.name = name;
    t.display_name = name;
    t.tier = "shared";
    t.regions = {"local"};
    t.weight = 3;
    t.state = "active";
    t.created_at = t.updated_at = clock_.NowMillis();
    EXPECT_OK(store_->CreateTenant(t));
    return t;
  }

  User MakeUser(const std::string& tenant_id, const std::string& username,
                const std::string& role = "tenant-member") {
    User u;
    u.id = NextId("usr");
    u.tenant_id = tenant_id;
    u.username = username;
    u.role = role;
    u.kind = "service";
    u.state = "active";
    u.created_at = u.updated_at = clock_.NowMillis();
    EXPECT_OK(store_->CreateUser(u));
    return u;
  }

  ApiKey MakeKey(const User& owner) {
    ApiKey k;
    k.id = NextId("key");
    k.tenant_id = owner.tenant_id;
    k.owner_user_id = owner.id;
    k.name = "key";
    k.role = owner.role;
    k.scopes = {"model-a"};
    k.secret_hash = std::string(64, 'b');
    k.created_at = clock_.NowMillis();
    EXPECT_OK(store_->CreateApiKey(k));
    return k;
  }

  // A shared deployment (tenant "") or a tenant's dedicated one.
  DeploymentRecord MakeDeployment(const std::string& model, const std::string& tenant_id = "") {
    DeploymentRecord d;
    d.id = NextId("dep");
    d.model = model;
    d.version = "v1";
    d.endpoints = {{"http://10.0.0.5:8000", 16}, {"https://gpu-2.internal/v1", 4}};
    d.region = "local";
    d.latency_tier = "interactive";
    d.visibility = tenant_id.empty() ? "shared" : "dedicated";
    d.tenant_id = tenant_id;
    d.created_at = d.updated_at = clock_.NowMillis();
    EXPECT_OK(store_->CreateDeployment(d));
    return d;
  }

  static UsageRecord Usage(const std::string& id, const std::string& tenant, int64_t at,
                           const std::string& model = "m1", const std::string& key = "key_1") {
    UsageRecord u;
    u.id = id;
    u.tenant_id = tenant;
    u.key_id = key;
    u.model = model;
    u.deployment_id = "dep_1";
    u.endpoint = "http://10.0.0.5:8000";
    u.api = "chat.completions";
    u.stream = true;
    u.input_tokens = 10;
    u.output_tokens = 20;
    u.cached_tokens = 3;
    u.queue_ms = 4;
    u.ttft_ms = 50;
    u.total_ms = 900;
    u.status = "completed";
    u.http_status = 200;
    u.created_at = at;
    return u;
  }

  int64_t Count(const std::string& sql) {
    auto r = store_->database().Exec(sql);
    EXPECT_TRUE(r.has_value()) << sql << ": " << r.error().message;
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  int64_t Marker() {
    auto m = store_->GatewayPolicyMarkerForGateway();
    EXPECT_TRUE(m.has_value()) << m.error().message;
    return m.has_value() ? *m : -1;
  }

  ManualClock clock_;
  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
};

std::vector<std::string> Ids(const auto& items) {
  std::vector<std::string> ids;
  for (const auto& item : items) ids.push_back(item.id);
  return ids;
}

// ---------------------------------------------------------------- deployments

TEST_P(GatewayStoreTest, DeploymentRoundTripsEveryField) {
  DeploymentRecord d = MakeDeployment("llama-3.1-8b-instruct");
  auto got = store_->GetDeploymentForPlatform(d.id);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  EXPECT_EQ(got->id, d.id);
  EXPECT_EQ(got->model, d.model);
  EXPECT_EQ(got->version, "v1");
  ASSERT_EQ(got->endpoints.size(), 2u);
  EXPECT_EQ(got->endpoints[0].url, "http://10.0.0.5:8000");
  EXPECT_EQ(got->endpoints[0].capacity, 16);
  EXPECT_EQ(got->endpoints[1].url, "https://gpu-2.internal/v1");
  EXPECT_EQ(got->endpoints[1].capacity, 4);
  EXPECT_EQ(got->region, "local");
  EXPECT_EQ(got->latency_tier, "interactive");
  EXPECT_EQ(got->visibility, "shared");
  EXPECT_EQ(got->tenant_id, "");
  EXPECT_EQ(got->created_at, d.created_at);
  EXPECT_EQ(got->updated_at, d.updated_at);
  EXPECT_ERROR(store_->CreateDeployment(d), ErrorCode::kAlreadyExists);
}

TEST_P(GatewayStoreTest, ATenantSeesItsDedicatedAndItsEntitledSharedDeploymentsOnly) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  DeploymentRecord shared_m1 = MakeDeployment("m1");
  DeploymentRecord shared_m2 = MakeDeployment("m2");
  DeploymentRecord own = MakeDeployment("m3", a.id);
  DeploymentRecord others = MakeDeployment("m1", b.id);
  ASSERT_OK(store_->GrantEntitlement(TenantScope::Of(a.id), "m1", clock_.NowMillis()));

  const TenantScope sa = TenantScope::Of(a.id);
  EXPECT_OK(store_->GetDeployment(sa, shared_m1.id));
  EXPECT_OK(store_->GetDeployment(sa, own.id));
  EXPECT_ERROR(store_->GetDeployment(sa, shared_m2.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->GetDeployment(sa, others.id), ErrorCode::kNotFound);
  // The platform scope holds the shared deployments only.
  EXPECT_OK(store_->GetDeployment(TenantScope::Platform(), shared_m2.id));
  EXPECT_ERROR(store_->GetDeployment(TenantScope::Platform(), own.id), ErrorCode::kNotFound);
  EXPECT_OK(store_->GetDeploymentForPlatform(others.id));

  auto listed = store_->ListDeployments(sa, {}, {});
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  EXPECT_EQ(Ids(listed->items), (std::vector<std::string>{shared_m1.id, own.id}));
  auto for_b = store_->ListDeployments(TenantScope::Of(b.id), {}, {});
  ASSERT_TRUE(for_b.has_value());
  EXPECT_EQ(Ids(for_b->items), std::vector<std::string>{others.id});
  auto platform = store_->ListDeployments(TenantScope::Platform(), {}, {});
  ASSERT_TRUE(platform.has_value());
  EXPECT_EQ(Ids(platform->items), (std::vector<std::string>{shared_m1.id, shared_m2.id}));
  auto all = store_->ListDeploymentsForPlatform({}, {});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->items.size(), 4u);
  auto m1 = store_->ListDeploymentsForPlatform({"m1"}, {});
  ASSERT_TRUE(m1.has_value());
  EXPECT_EQ(Ids(m1->items), (std::vector<std::string>{shared_m1.id, others.id}));

  // Revoking the entitlement hides the shared deployment again.
  ASSERT_OK(store_->RevokeEntitlement(sa, "m1"));
  EXPECT_ERROR(store_->GetDeployment(sa, shared_m1.id), ErrorCode::kNotFound);
}

TEST_P(GatewayStoreTest, DeploymentsPageWithoutGapsOrRepeats) {
  std::vector<std::string> want;
  for (int i = 0; i < 7; ++i) want.push_back(MakeDeployment("m" + std::to_string(i)).id);
  std::vector<std::string> got;
  ListOptions opts{"", 3};
  for (int guard = 0; guard < 10; ++guard) {
    auto page = store_->ListDeploymentsForPlatform({}, opts);
    ASSERT_TRUE(page.has_value()) << page.error().message;
    for (const auto& d : page->items) got.push_back(d.id);
    if (page->next_cursor.empty()) break;
    opts.after = page->next_cursor;
  }
  EXPECT_EQ(got, want);
}

TEST_P(GatewayStoreTest, OnlyTheOwningScopeUpdatesOrDeletesADeployment) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  DeploymentRecord own = MakeDeployment("m1", a.id);
  DeploymentRecord shared = MakeDeployment("m2");
  DeploymentRecord changed = own;
  changed.model = "m9";
  changed.version = "v2";
  changed.endpoints = {{"http://other:9000", 2}};
  changed.region = "eu";
  changed.latency_tier = "batch";
  changed.visibility = "shared";  // never changes
  changed.tenant_id = b.id;       // never changes
  changed.updated_at = own.updated_at + 100;
  EXPECT_ERROR(store_->UpdateDeployment(TenantScope::Of(b.id), changed), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->UpdateDeployment(TenantScope::Platform(), changed), ErrorCode::kNotFound);
  ASSERT_OK(store_->UpdateDeployment(TenantScope::Of(a.id), changed));
  auto got = store_->GetDeploymentForPlatform(own.id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->model, "m9");
  EXPECT_EQ(got->version, "v2");
  ASSERT_EQ(got->endpoints.size(), 1u);
  EXPECT_EQ(got->endpoints[0].url, "http://other:9000");
  EXPECT_EQ(got->region, "eu");
  EXPECT_EQ(got->latency_tier, "batch");
  EXPECT_EQ(got->visibility, "dedicated");
  EXPECT_EQ(got->tenant_id, a.id);
  EXPECT_EQ(got->created_at, own.created_at);
  EXPECT_EQ(got->updated_at, own.updated_at + 100);

  EXPECT_ERROR(store_->DeleteDeployment(TenantScope::Of(a.id), shared.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->DeleteDeployment(TenantScope::Of(b.id), own.id), ErrorCode::kNotFound);
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Platform(), shared.id));
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Of(a.id), own.id));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM deployments"), 0);
}

// ---------------------------------------------------------------- entitlements

TEST_P(GatewayStoreTest, EntitlementsAreIdempotentAndPerTenant) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  const TenantScope sa = TenantScope::Of(a.id);
  auto first = store_->GrantEntitlement(sa, "m2", 100);
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(first->tenant_id, a.id);
  EXPECT_EQ(first->created_at, 100);
  auto again = store_->GrantEntitlement(sa, "m2", 200);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->created_at, 100) << "a repeated grant keeps the first";
  ASSERT_OK(store_->GrantEntitlement(sa, "m1", 300));
  ASSERT_OK(store_->GrantEntitlement(TenantScope::Of(b.id), "m3", 300));

  auto listed = store_->ListEntitlements(sa);
  ASSERT_TRUE(listed.has_value());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].model, "m1");
  EXPECT_EQ((*listed)[1].model, "m2");
  EXPECT_ERROR(store_->RevokeEntitlement(sa, "m3"), ErrorCode::kNotFound);
  ASSERT_OK(store_->RevokeEntitlement(sa, "m2"));
  EXPECT_ERROR(store_->RevokeEntitlement(sa, "m2"), ErrorCode::kNotFound);
  auto b_list = store_->ListEntitlements(TenantScope::Of(b.id));
  ASSERT_TRUE(b_list.has_value());
  ASSERT_EQ(b_list->size(), 1u);
  EXPECT_EQ((*b_list)[0].model, "m3");
}

// ---------------------------------------------------------------- gateway limits

TEST_P(GatewayStoreTest, GatewayLimitsArePerTenantAndKeysMustBelongToIt) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  ApiKey a_key = MakeKey(MakeUser(a.id, "alice"));
  ApiKey b_key = MakeKey(MakeUser(b.id, "bob"));
  const TenantScope sa = TenantScope::Of(a.id);
  EXPECT_ERROR(store_->GetGatewayLimit(sa, ""), ErrorCode::kNotFound);

  GatewayLimitRecord tenant_row;
  tenant_row.tenant_id = b.id;  // ignored: the scope decides
  tenant_row.limits = {600, 100'000, 8, 32};
  tenant_row.updated_at = 10;
  ASSERT_OK(store_->SetGatewayLimit(sa, tenant_row));
  GatewayLimitRecord key_row;
  key_row.key_id = a_key.id;
  key_row.limits = {60, 0, 2, 0};
  key_row.priority = "batch";
  key_row.updated_at = 11;
  ASSERT_OK(store_->SetGatewayLimit(sa, key_row));
  // Another tenant's key, or one that does not exist, is not found.
  key_row.key_id = b_key.id;
  EXPECT_ERROR(store_->SetGatewayLimit(sa, key_row), ErrorCode::kNotFound);
  key_row.key_id = "key_nope";
  EXPECT_ERROR(store_->SetGatewayLimit(sa, key_row), ErrorCode::kNotFound);

  auto rows = store_->ListGatewayLimits(sa);
  ASSERT_TRUE(rows.has_value()) << rows.error().message;
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0].key_id, "");
  EXPECT_EQ((*rows)[0].tenant_id, a.id);
  EXPECT_EQ((*rows)[0].limits.requests_per_minute, 600);
  EXPECT_EQ((*rows)[0].limits.tokens_per_minute, 100'000);
  EXPECT_EQ((*rows)[0].limits.max_concurrent, 8);
  EXPECT_EQ((*rows)[0].limits.max_queued, 32);
  EXPECT_EQ((*rows)[0].updated_at, 10);
  EXPECT_EQ((*rows)[1].key_id, a_key.id);
  EXPECT_EQ((*rows)[1].priority, "batch");
  EXPECT_EQ((*rows)[1].limits.requests_per_minute, 60);
  auto b_rows = store_->ListGatewayLimits(TenantScope::Of(b.id));
  ASSERT_TRUE(b_rows.has_value());
  EXPECT_TRUE(b_rows->empty());

  // Replacing keeps one row; all zeros and no priority remove it.
  tenant_row.limits.requests_per_minute = 700;
  ASSERT_OK(store_->SetGatewayLimit(sa, tenant_row));
  auto tenant = store_->GetGatewayLimit(sa, "");
  ASSERT_TRUE(tenant.has_value());
  EXPECT_EQ(tenant->limits.requests_per_minute, 700);
  ASSERT_OK(store_->SetGatewayLimit(sa, GatewayLimitRecord{}));
  EXPECT_ERROR(store_->GetGatewayLimit(sa, ""), ErrorCode::kNotFound);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM gateway_limits"), 1);
}

TEST_P(GatewayStoreTest, DeletingAUserDropsItsKeysLimits) {
  Tenant a = MakeTenant("a");
  User alice = MakeUser(a.id, "alice");
  User bob = MakeUser(a.id, "bob");
  ApiKey alice_key = MakeKey(alice);
  ApiKey bob_key = MakeKey(bob);
  const TenantScope sa = TenantScope::Of(a.id);
  for (const auto& key : {alice_key, bob_key}) {
    GatewayLimitRecord r;
    r.key_id = key.id;
    r.limits.max_concurrent = 1;
    ASSERT_OK(store_->SetGatewayLimit(sa, r));
  }
  ASSERT_OK(store_->DeleteUser(sa, alice.id));
  auto rows = store_->ListGatewayLimits(sa);
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].key_id, bob_key.id);
}

// ---------------------------------------------------------------- usage

TEST_P(GatewayStoreTest, UsageTimedOutsideTheWindowIsRefusedNamingIt) {
  Tenant a = MakeTenant("a");
  const int64_t now = 1'790'000'000'000;
  const Store::UsageWindow window{now};
  constexpr int64_t kDay = 86'400'000;
  for (int64_t at : {now - 35 * kDay - 1, now + 5 * 60'000 + 1}) {
    auto r = store_->InsertUsageRecords({Usage("req_ok", a.id, now), Usage("req_far", a.id, at)},
                                        window);
    ASSERT_FALSE(r.has_value()) << at;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("req_far"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("35 days back to 5 minutes ahead"), std::string::npos)
        << r.error().message;
  }
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 0);
  ASSERT_OK(store_->InsertUsageRecords(
      {Usage("req_old", a.id, now - 35 * kDay), Usage("req_soon", a.id, now + 5 * 60'000)},
      window));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 2);
}

TEST_P(GatewayStoreTest, UsageInsertIsIdempotentByRequestId) {
  Tenant a = MakeTenant("a");
  ASSERT_OK(store_->InsertUsageRecords(
      {Usage("req_1", a.id, 1000), Usage("req_2", a.id, 1001), Usage("req_3", a.id, 1002)}));
  // A re-shipped batch with a stored id under other figures (a buggy
  // re-ship): refused whole, naming the record, nothing merged or added.
  UsageRecord changed = Usage("req_2", a.id, 1001);
  changed.output_tokens = 9999;
  auto refused =
      store_->InsertUsageRecords({Usage("req_1", a.id, 1000), changed, Usage("req_4", a.id, 1003)});
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kAlreadyExists);
  EXPECT_NE(refused.error().message.find("req_2"), std::string::npos);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 3);
  // The same id twice in one batch with different figures: refused too.
  UsageRecord twin = Usage("req_9", a.id, 1009);
  twin.input_tokens = 1;
  EXPECT_EQ(store_->InsertUsageRecords({Usage("req_9", a.id, 1009), twin}).error().code,
            ErrorCode::kAlreadyExists);
  // A re-ship of the same records with new ones: the new are added, the
  // stored stay exactly as first written; the same new id twice counts once.
  ASSERT_OK(store_->InsertUsageRecords({Usage("req_1", a.id, 1000), Usage("req_2", a.id, 1001),
                                        Usage("req_4", a.id, 1003), Usage("req_5", a.id, 1004),
                                        Usage("req_5", a.id, 1004)}));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 5);
  auto page = store_->ListUsage(TenantScope::Of(a.id), {}, {});
  ASSERT_TRUE(page.has_value()) << page.error().message;
  ASSERT_EQ(page->items.size(), 5u);
  for (const auto& u : page->items) EXPECT_EQ(u.output_tokens, 20) << u.id;

  // Every field round-trips.
  const UsageRecord& r1 = page->items.back();
  UsageRecord want = Usage("req_1", a.id, 1000);
  EXPECT_EQ(r1.id, want.id);
  EXPECT_EQ(r1.tenant_id, want.tenant_id);
  EXPECT_EQ(r1.key_id, want.key_id);
  EXPECT_EQ(r1.model, want.model);
  EXPECT_EQ(r1.deployment_id, want.deployment_id);
  EXPECT_EQ(r1.endpoint, want.endpoint);
  EXPECT_EQ(r1.api, want.api);
  EXPECT_EQ(r1.stream, want.stream);
  EXPECT_EQ(r1.input_tokens, want.input_tokens);
  EXPECT_EQ(r1.output_tokens, want.output_tokens);
  EXPECT_EQ(r1.cached_tokens, want.cached_tokens);
  EXPECT_EQ(r1.queue_ms, want.queue_ms);
  EXPECT_EQ(r1.ttft_ms, want.ttft_ms);
  EXPECT_EQ(r1.total_ms, want.total_ms);
  EXPECT_EQ(r1.status, want.status);
  EXPECT_EQ(r1.http_status, want.http_status);
  EXPECT_EQ(r1.created_at, want.created_at);
  EXPECT_EQ(r1.flag, "");
  UsageRecord flagged = Usage("req_6", a.id, 1005);
  flagged.flag = kUsageOverBound;
  ASSERT_OK(store_->InsertUsageRecords({flagged}));
  auto newest = store_->ListUsage(TenantScope::Of(a.id), {}, {});
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->items.front().flag, kUsageOverBound);
}

// Issue 15 #7: a model server reported completion_tokens
// 18446744073709551615; the record held the int64 maximum and every summary
// of the tenant failed with "integer overflow" (a 500, for the tenant and
// for staff). Stored counts are bounded, so sums cannot overflow.
TEST_P(GatewayStoreTest, HugeTokenCountsAreBoundedAndSummariesDoNotOverflow) {
  Tenant a = MakeTenant("a");
  const TenantScope sa = TenantScope::Of(a.id);
  std::vector<UsageRecord> records;
  for (int i = 0; i < 3; ++i) {
    UsageRecord u = Usage("req_huge_" + std::to_string(i), a.id, 100 + i);
    u.input_tokens = INT64_MAX;
    u.output_tokens = INT64_MAX;
    u.cached_tokens = INT64_MAX;
    records.push_back(u);
  }
  records.push_back(Usage("req_normal", a.id, 200));
  ASSERT_OK(store_->InsertUsageRecords(records));
  for (const std::string group_by : {"", "model", "key"}) {
    auto totals = store_->SummarizeUsage(sa, {}, group_by);
    ASSERT_TRUE(totals.has_value()) << group_by << ": " << totals.error().message;
    ASSERT_EQ(totals->size(), 1u);
    EXPECT_EQ((*totals)[0].requests, 4);
    EXPECT_EQ((*totals)[0].input_tokens, 3 * kMaxRecordTokens + 10);
    EXPECT_EQ((*totals)[0].output_tokens, 3 * kMaxRecordTokens + 20);
    EXPECT_EQ((*totals)[0].cached_tokens, 3 * kMaxRecordTokens + 3);
  }
  auto page = store_->ListUsage(sa, {}, {});
  ASSERT_TRUE(page.has_value());
  for (const auto& u : page->items) {
    const bool huge = u.id != "req_normal";
    EXPECT_EQ(u.output_tokens, huge ? kMaxRecordTokens : 20) << u.id;
    EXPECT_EQ(u.flag, huge ? kUsageOverBound : "") << u.id;
  }
  // Negative counts (a corrupt record) are stored as 0.
  UsageRecord negative = Usage("req_negative", a.id, 300);
  negative.input_tokens = -5;
  ASSERT_OK(store_->InsertUsageRecords({negative}));
  auto total = store_->SummarizeUsage(sa, {}, "");
  ASSERT_TRUE(total.has_value());
  EXPECT_EQ((*total)[0].input_tokens, 3 * kMaxRecordTokens + 10);
}

// Issue 15 #10: every refused request was a usage row of its own; one key's
// flood of 535,000 refusals in 35 s grew the database by 162 MB. Refusals
// are counted per tenant, key, reason and minute: one row per minute.
TEST_P(GatewayStoreTest, RefusalsAreCountedPerKeyReasonAndMinute) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  const int64_t minute = 60'000;
  for (int round = 0; round < 50; ++round) {
    ASSERT_OK(store_->AddGatewayRefusals({{a.id, "key_1", "rate_limit_exceeded", 10 * minute, 1000},
                                          {a.id, "key_1", "model_not_found", 10 * minute, 1},
                                          {a.id, "key_2", "rate_limit_exceeded", 11 * minute, 7},
                                          {b.id, "key_9", "rate_limit_exceeded", 10 * minute, 5}}));
  }
  EXPECT_EQ(Count("SELECT COUNT(*) FROM gateway_refusals"), 4);
  auto totals = store_->SummarizeGatewayRefusals(TenantScope::Of(a.id), {});
  ASSERT_TRUE(totals.has_value()) << totals.error().message;
  ASSERT_EQ(totals->size(), 3u);
  EXPECT_EQ((*totals)[0].key_id, "key_1");
  EXPECT_EQ((*totals)[0].reason, "model_not_found");
  EXPECT_EQ((*totals)[0].count, 50);
  EXPECT_EQ((*totals)[1].reason, "rate_limit_exceeded");
  EXPECT_EQ((*totals)[1].count, 50'000);
  EXPECT_EQ((*totals)[1].first_minute_at, 10 * minute);
  EXPECT_EQ((*totals)[2].key_id, "key_2");
  EXPECT_EQ((*totals)[2].count, 350);
  // Filtered by time and key; another tenant's counts are never seen.
  auto late = store_->SummarizeGatewayRefusals(TenantScope::Of(a.id), {.from = 11 * minute});
  ASSERT_TRUE(late.has_value());
  ASSERT_EQ(late->size(), 1u);
  EXPECT_EQ((*late)[0].key_id, "key_2");
  auto key1 = store_->SummarizeGatewayRefusals(TenantScope::Of(a.id), {.key_id = "key_1"});
  ASSERT_TRUE(key1.has_value());
  EXPECT_EQ(key1->size(), 2u);
  auto of_b = store_->SummarizeGatewayRefusals(TenantScope::Of(b.id), {});
  ASSERT_TRUE(of_b.has_value());
  ASSERT_EQ(of_b->size(), 1u);
  EXPECT_EQ((*of_b)[0].count, 250);
  // A minute's count saturates instead of wrapping.
  ASSERT_OK(store_->AddGatewayRefusals({{a.id, "key_3", "x", 0, INT64_MAX}}));
  ASSERT_OK(store_->AddGatewayRefusals({{a.id, "key_3", "x", 0, INT64_MAX}}));
  auto key3 = store_->SummarizeGatewayRefusals(TenantScope::Of(a.id), {.key_id = "key_3"});
  ASSERT_TRUE(key3.has_value());
  EXPECT_EQ((*key3)[0].count, kMaxRecordTokens);
  // Bad counts store nothing; a gone tenant's counts are dropped.
  EXPECT_ERROR(store_->AddGatewayRefusals({{a.id, "key_1", "", 0, 1}}),
               ErrorCode::kInvalidArgument);
  EXPECT_ERROR(store_->AddGatewayRefusals({{a.id, "key_1", "x", 0, 0}}),
               ErrorCode::kInvalidArgument);
  ASSERT_OK(store_->AddGatewayRefusals({{"tn_gone", "key_1", "x", 0, 1}}));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM gateway_refusals WHERE tenant_id = 'tn_gone'"), 0);
  // Eviction takes them with the tenant.
  ASSERT_OK(store_->DeleteTenantAndData(a.id));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM gateway_refusals WHERE tenant_id = '" + a.id + "'"), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM gateway_refusals"), 1);
}

// Issue 15, item 16: a record whose model held a NUL byte (or text that is
// not UTF-8, which PostgreSQL refused as an internal error) must come back as
// kInvalidArgument, the one error that tells the gateway's shipper "this
// record can never be stored" rather than "the store is down".
TEST_P(GatewayStoreTest, UsageRecordWithUnstorableTextIsRefusedAsInvalid) {
  Tenant a = MakeTenant("a");
  UsageRecord nul = Usage("req_nul", a.id, 1);
  nul.model = std::string("p\0q", 3);
  UsageRecord not_utf8 = Usage("req_latin1", a.id, 2);
  not_utf8.model = "caf\xE9";
  UsageRecord overlong = Usage("req_overlong", a.id, 3);
  overlong.endpoint = "http://x/\xC0\xAF";
  for (const UsageRecord& bad : {nul, not_utf8, overlong}) {
    SCOPED_TRACE(bad.id);
    EXPECT_ERROR(store_->InsertUsageRecords({Usage("req_fine", a.id, 4), bad}),
                 ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 0);
  UsageRecord multilingual = Usage("req_utf8", a.id, 5);
  multilingual.model = "mod\xC3\xA8le-\xE6\xA8\xA1\xE5\x9E\x8B-\xF0\x9F\xA6\x99";
  ASSERT_OK(store_->InsertUsageRecords({multilingual}));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 1);
}

TEST_P(GatewayStoreTest, UsageBatchesLargerThanOneStatementAndBadRecords) {
  Tenant a = MakeTenant("a");
  std::vector<UsageRecord> batch;
  for (int i = 0; i < 123; ++i) batch.push_back(Usage("req_" + std::to_string(i), a.id, 5000 + i));
  ASSERT_OK(store_->InsertUsageRecords(batch));
  ASSERT_OK(store_->InsertUsageRecords(batch));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 123);

  // A record without id or tenant fails the whole batch; nothing is stored.
  std::vector<UsageRecord> bad = {Usage("req_new", a.id, 1), Usage("", a.id, 2)};
  EXPECT_ERROR(store_->InsertUsageRecords(bad), ErrorCode::kInvalidArgument);
  EXPECT_ERROR(store_->InsertUsageRecords({Usage("req_x", "", 1)}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 123);
  EXPECT_OK(store_->InsertUsageRecords({}));

  // Records of a tenant that does not exist (evicted meanwhile) are dropped.
  ASSERT_OK(
      store_->InsertUsageRecords({Usage("req_gone", "tn_gone", 1), Usage("req_ok", a.id, 1)}));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 124);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records WHERE tenant_id = 'tn_gone'"), 0);

  // Batches of every shape: full statements, the rest in powers of two.
  int64_t total = 124;
  int next = 0;
  for (int n : {1, 2, 3, 31, 49, 50, 51, 99, 127}) {
    std::vector<UsageRecord> more;
    for (int i = 0; i < n; ++i) {
      more.push_back(Usage("req_more_" + std::to_string(next++), a.id, 9000 + i));
    }
    ASSERT_OK(store_->InsertUsageRecords(more));
    total += n;
    EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), total) << n;
  }
}

TEST_P(GatewayStoreTest, ListUsagePagesNewestFirstFilteredAndScoped) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  std::vector<UsageRecord> batch;
  // 20 of A's, several sharing a millisecond (the id breaks the tie), and
  // some of B's at the same times.
  for (int i = 0; i < 20; ++i) {
    std::string model = i % 2 ? "m1" : "m2";
    std::string key = i % 3 ? "key_a" : "key_b";
    batch.push_back(Usage("req_a" + std::to_string(100 + i), a.id, 1000 + i / 3, model, key));
    if (i % 4 == 0) batch.push_back(Usage("req_b" + std::to_string(100 + i), b.id, 1000 + i / 3));
  }
  ASSERT_OK(store_->InsertUsageRecords(batch));
  std::vector<UsageRecord> a_records;
  for (const auto& u : batch) {
    if (u.tenant_id == a.id) a_records.push_back(u);
  }
  std::sort(a_records.begin(), a_records.end(), [](const UsageRecord& x, const UsageRecord& y) {
    return x.created_at != y.created_at ? x.created_at > y.created_at : x.id > y.id;
  });

  auto all_pages = [&](const UsageFilter& filter, int limit) {
    std::vector<std::string> ids;
    ListOptions opts{"", limit};
    for (int guard = 0; guard < 100; ++guard) {
      auto page = store_->ListUsage(TenantScope::Of(a.id), filter, opts);
      EXPECT_TRUE(page.has_value()) << page.error().message;
      if (!page.has_value()) break;
      for (const auto& u : page->items) {
        EXPECT_EQ(u.tenant_id, a.id);
        ids.push_back(u.id);
      }
      if (page->next_cursor.empty()) break;
      opts.after = page->next_cursor;
    }
    return ids;
  };
  EXPECT_EQ(all_pages({}, 7), Ids(a_records));
  EXPECT_EQ(all_pages({}, 1000), Ids(a_records));

  UsageFilter filter;
  filter.from = 1002;
  filter.to = 1005;
  filter.model = "m1";
  filter.key_id = "key_a";
  std::vector<std::string> want;
  for (const auto& u : a_records) {
    if (u.created_at >= 1002 && u.created_at < 1005 && u.model == "m1" && u.key_id == "key_a") {
      want.push_back(u.id);
    }
  }
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(all_pages(filter, 2), want);

  EXPECT_ERROR(store_->ListUsage(TenantScope::Of(a.id), {}, {"garbage", 10}),
               ErrorCode::kInvalidArgument);
  auto none = store_->ListUsage(TenantScope::Of("tn_nobody"), {}, {});
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->items.empty());
}

TEST_P(GatewayStoreTest, SummarizeUsageTotalsPerModelAndKey) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  ASSERT_OK(store_->InsertUsageRecords(
      {Usage("r1", a.id, 10, "m1", "k1"), Usage("r2", a.id, 20, "m1", "k2"),
       Usage("r3", a.id, 30, "m2", "k1"), Usage("r4", b.id, 30, "m1", "k9")}));
  const TenantScope sa = TenantScope::Of(a.id);
  auto total = store_->SummarizeUsage(sa, {}, "");
  ASSERT_TRUE(total.has_value()) << total.error().message;
  ASSERT_EQ(total->size(), 1u);
  EXPECT_EQ((*total)[0].group, "");
  EXPECT_EQ((*total)[0].requests, 3);
  EXPECT_EQ((*total)[0].input_tokens, 30);
  EXPECT_EQ((*total)[0].output_tokens, 60);
  EXPECT_EQ((*total)[0].cached_tokens, 9);

  auto by_model = store_->SummarizeUsage(sa, {}, "model");
  ASSERT_TRUE(by_model.has_value());
  ASSERT_EQ(by_model->size(), 2u);
  EXPECT_EQ((*by_model)[0].group, "m1");
  EXPECT_EQ((*by_model)[0].requests, 2);
  EXPECT_EQ((*by_model)[1].group, "m2");
  EXPECT_EQ((*by_model)[1].requests, 1);

  UsageFilter since;
  since.from = 20;
  auto by_key = store_->SummarizeUsage(sa, since, "key");
  ASSERT_TRUE(by_key.has_value());
  ASSERT_EQ(by_key->size(), 2u);
  EXPECT_EQ((*by_key)[0].group, "k1");
  EXPECT_EQ((*by_key)[0].requests, 1);
  EXPECT_EQ((*by_key)[1].group, "k2");

  auto empty = store_->SummarizeUsage(TenantScope::Of("tn_nobody"), {}, "");
  ASSERT_TRUE(empty.has_value());
  ASSERT_EQ(empty->size(), 1u);
  EXPECT_EQ((*empty)[0].requests, 0);
  EXPECT_EQ((*empty)[0].input_tokens, 0);
  auto empty_groups = store_->SummarizeUsage(TenantScope::Of("tn_nobody"), {}, "model");
  ASSERT_TRUE(empty_groups.has_value());
  EXPECT_TRUE(empty_groups->empty());
  EXPECT_ERROR(store_->SummarizeUsage(sa, {}, "tenant"), ErrorCode::kInvalidArgument);
}

// Each gateway's newest report per deployment; the fresh ones summed (the
// oldest wait the largest); stale ones forgotten; bad ones refused whole.
TEST_P(GatewayStoreTest, DeploymentLoadKeepsEachGatewaysNewestAndSumsTheFreshOnes) {
  auto report = [](const std::string& dep, const std::string& gw, int64_t queued, int64_t wait,
                   int64_t in_flight, int64_t at) {
    return DeploymentLoadReport{dep, gw, queued, wait, in_flight, at};
  };
  ASSERT_OK(store_->ReportDeploymentLoad(
      {report("dep_1", "gw_a", 5, 900, 8, 1'000), report("dep_1", "gw_b", 1, 2'000, 3, 1'000),
       report("dep_2", "gw_a", 7, 7, 7, 1'000)},
      0));
  ASSERT_OK(store_->ReportDeploymentLoad({report("dep_1", "gw_a", 2, 100, 4, 2'000)}, 0));
  auto both = store_->DeploymentLoadForServing("dep_1", 500);
  ASSERT_TRUE(both.has_value()) << both.error().message;
  EXPECT_EQ(both->gateways, 2);
  EXPECT_EQ(both->queued, 3);
  EXPECT_EQ(both->oldest_wait_ms, 2'000);
  EXPECT_EQ(both->in_flight, 7);
  auto fresh = store_->DeploymentLoadForServing("dep_1", 1'500);  // gw_b's is stale
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(fresh->gateways, 1);
  EXPECT_EQ(fresh->queued, 2);
  auto none = store_->DeploymentLoadForServing("dep_nope", 0);
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->gateways, 0);
  EXPECT_EQ(none->queued, 0);
  // Reports older than the bound go.
  ASSERT_OK(store_->ReportDeploymentLoad({report("dep_3", "gw_c", 0, 0, 0, 3'000)}, 1'500));
  EXPECT_EQ(store_->DeploymentLoadForServing("dep_1", 0)->gateways, 1);
  EXPECT_EQ(store_->DeploymentLoadForServing("dep_2", 0)->gateways, 0);
  // Refused whole: a negative count, one above the bound, an empty id.
  for (const auto& bad :
       {report("dep_4", "gw_a", -1, 0, 0, 4'000),
        report("dep_4", "gw_a", 0, Store::kMaxLoadCount + 1, 0, 4'000),
        report("", "gw_a", 0, 0, 0, 4'000), report("dep_4", "", 0, 0, 0, 4'000)}) {
    EXPECT_ERROR(store_->ReportDeploymentLoad({report("dep_4", "gw_z", 1, 1, 1, 4'000), bad}, 0),
                 ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(store_->DeploymentLoadForServing("dep_4", 0)->gateways, 0);
  std::vector<DeploymentLoadReport> too_many(Store::kMaxLoadReports + 1,
                                             report("dep_5", "gw_a", 0, 0, 0, 4'000));
  EXPECT_ERROR(store_->ReportDeploymentLoad(too_many, 0), ErrorCode::kInvalidArgument);
}

// A managed deployment's tokens: per deployment that served, or only one's.
TEST_P(GatewayStoreTest, SummarizeUsagePerDeploymentAndFilteredToOne) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  UsageRecord r1 = Usage("r1", a.id, 10);
  UsageRecord r2 = Usage("r2", a.id, 20);
  r2.deployment_id = "dep_2";
  UsageRecord refused = Usage("r3", a.id, 30);
  refused.deployment_id = "";
  UsageRecord other = Usage("r4", b.id, 30);
  other.deployment_id = "dep_2";
  ASSERT_OK(store_->InsertUsageRecords({r1, r2, refused, other}));
  const TenantScope sa = TenantScope::Of(a.id);
  auto per = store_->SummarizeUsage(sa, {}, "deployment");
  ASSERT_TRUE(per.has_value()) << per.error().message;
  ASSERT_EQ(per->size(), 3u);
  EXPECT_EQ((*per)[0].group, "");  // refused before routing
  EXPECT_EQ((*per)[1].group, "dep_1");
  EXPECT_EQ((*per)[2].group, "dep_2");
  EXPECT_EQ((*per)[2].requests, 1);  // tenant b's request on dep_2 is b's
  UsageFilter one;
  one.deployment_id = "dep_2";
  auto only = store_->SummarizeUsage(sa, one, "");
  ASSERT_TRUE(only.has_value());
  EXPECT_EQ((*only)[0].requests, 1);
  auto page = store_->ListUsage(sa, one, {});
  ASSERT_TRUE(page.has_value());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].id, "r2");
}

// ---------------------------------------------------------------- the gateway's view

TEST_P(GatewayStoreTest, LoadGatewayPolicyReadsEverythingTheGatewayNeeds) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  b.state = "suspended";
  b.updated_at = clock_.NowMillis();
  ASSERT_OK(store_->UpdateTenant(b));
  User alice = MakeUser(a.id, "alice", "tenant-admin");
  User bob = MakeUser(b.id, "bob");
  User staff = MakeUser("", "staff", "platform-admin");
  ApiKey live = MakeKey(alice);
  ApiKey revoked = MakeKey(alice);
  ASSERT_OK(store_->RevokeApiKey(TenantScope::Of(a.id), revoked.id, clock_.NowMillis()));
  ApiKey bobs = MakeKey(bob);
  MakeKey(staff);  // platform keys never call models
  alice.state = "disabled";
  ASSERT_OK(store_->UpdateUser(TenantScope::Of(a.id), alice));
  DeploymentRecord shared = MakeDeployment("m1");
  DeploymentRecord dedicated = MakeDeployment("m2", a.id);
  ASSERT_OK(store_->GrantEntitlement(TenantScope::Of(a.id), "m1", 5));
  GatewayLimitRecord limit;
  limit.key_id = live.id;
  limit.limits.requests_per_minute = 60;
  limit.priority = "interactive";
  ASSERT_OK(store_->SetGatewayLimit(TenantScope::Of(a.id), limit));

  auto rows = store_->LoadGatewayPolicyForGateway();
  ASSERT_TRUE(rows.has_value()) << rows.error().message;
  EXPECT_EQ(rows->marker, Marker());
  ASSERT_EQ(rows->tenants.size(), 2u);
  EXPECT_EQ(rows->tenants[0].id, a.id);
  EXPECT_EQ(rows->tenants[1].state, "suspended");
  EXPECT_EQ(rows->tenants[0].regions, std::vector<std::string>{"local"});
  EXPECT_EQ(rows->tenants[0].weight, 3);
  ASSERT_EQ(rows->keys.size(), 2u);
  EXPECT_EQ(rows->keys[0].key.id, live.id);
  EXPECT_EQ(rows->keys[0].key.tenant_id, a.id);
  EXPECT_EQ(rows->keys[0].key.secret_hash, live.secret_hash);
  EXPECT_EQ(rows->keys[0].key.scopes, live.scopes);
  EXPECT_EQ(rows->keys[0].owner_state, "disabled");
  EXPECT_EQ(rows->keys[0].owner_role, "tenant-admin");
  EXPECT_EQ(rows->keys[1].key.id, bobs.id);
  EXPECT_EQ(rows->keys[1].owner_state, "active");
  EXPECT_EQ(rows->keys[1].owner_role, "tenant-member");
  EXPECT_EQ(Ids(rows->deployments), (std::vector<std::string>{shared.id, dedicated.id}));
  EXPECT_EQ(rows->deployments[0].endpoints.size(), 2u);
  ASSERT_EQ(rows->entitlements.size(), 1u);
  EXPECT_EQ(rows->entitlements[0].tenant_id, a.id);
  EXPECT_EQ(rows->entitlements[0].model, "m1");
  ASSERT_EQ(rows->limits.size(), 1u);
  EXPECT_EQ(rows->limits[0].key_id, live.id);
  EXPECT_EQ(rows->limits[0].priority, "interactive");

  // The read leaves the connection usable for writes (its transaction ended).
  for (int i = 0; i < 8; ++i) ASSERT_OK(store_->LoadGatewayPolicyForGateway());
  MakeKey(bob);
}

TEST_P(GatewayStoreTest, MarkerChangesWithEveryPolicyInputAndOnlyThen) {
  int64_t last = Marker();
  auto changed = [&](const char* what) {
    int64_t now = Marker();
    EXPECT_NE(now, last) << what << " did not move the marker";
    last = now;
  };
  auto unchanged = [&](const char* what) {
    EXPECT_EQ(Marker(), last) << what << " moved the marker";
  };
  Tenant a = MakeTenant("a");
  changed("tenant create");
  User alice = MakeUser(a.id, "alice");
  ApiKey key = MakeKey(alice);
  changed("key create");
  ASSERT_OK(store_->RevokeApiKey(TenantScope::Of(a.id), key.id, clock_.NowMillis()));
  changed("key revoke");
  EXPECT_ERROR(store_->RevokeApiKey(TenantScope::Of(a.id), key.id, clock_.NowMillis()),
               ErrorCode::kNotFound);
  unchanged("a failed revoke");
  a.state = "suspended";
  ASSERT_OK(store_->UpdateTenant(a));
  changed("tenant suspend");
  alice.role = "tenant-admin";
  ASSERT_OK(store_->UpdateUser(TenantScope::Of(a.id), alice));
  changed("user role change");
  DeploymentRecord d = MakeDeployment("m1");
  changed("deployment create");
  d.version = "v2";
  ASSERT_OK(store_->UpdateDeployment(TenantScope::Platform(), d));
  changed("deployment update");
  ASSERT_OK(store_->GrantEntitlement(TenantScope::Of(a.id), "m1", 1));
  changed("entitlement grant");
  ASSERT_OK(store_->GrantEntitlement(TenantScope::Of(a.id), "m1", 2));
  unchanged("a repeated grant");
  ASSERT_OK(store_->RevokeEntitlement(TenantScope::Of(a.id), "m1"));
  changed("entitlement revoke");
  GatewayLimitRecord limit;
  limit.limits.max_queued = 5;
  ASSERT_OK(store_->SetGatewayLimit(TenantScope::Of(a.id), limit));
  changed("limit set");
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Platform(), d.id));
  changed("deployment delete");

  // Not policy: usage, audit, sessions.
  ASSERT_OK(store_->InsertUsageRecords({Usage("req_1", a.id, 1)}));
  AuditRecord audit;
  audit.tenant_id = a.id;
  audit.action = "tenant.update";
  audit.outcome = "allowed";
  ASSERT_OK(store_->AppendAudit(audit));
  ASSERT_OK(store_->CreateSession({NextId("ses"), a.id, alice.id, 1, 2}));
  unchanged("usage, audit and sessions");

  ASSERT_OK(store_->DeleteUser(TenantScope::Of(a.id), alice.id));
  changed("user delete");
  ASSERT_OK(store_->DeleteTenantAndData(a.id));
  changed("tenant eviction");
}

TEST_P(GatewayStoreTest, EvictionRemovesTheTenantsGatewayRowsButKeepsUsageEvenLateUsage) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  ApiKey a_key = MakeKey(MakeUser(a.id, "alice"));
  DeploymentRecord shared = MakeDeployment("m1");
  MakeDeployment("m2", a.id);
  MakeDeployment("m3", a.id);
  DeploymentRecord b_own = MakeDeployment("m2", b.id);
  for (const auto& t : {a, b}) {
    ASSERT_OK(store_->GrantEntitlement(TenantScope::Of(t.id), "m1", 1));
    GatewayLimitRecord l;
    l.limits.requests_per_minute = 10;
    ASSERT_OK(store_->SetGatewayLimit(TenantScope::Of(t.id), l));
  }
  GatewayLimitRecord key_limit;
  key_limit.key_id = a_key.id;
  key_limit.limits.requests_per_minute = 5;
  ASSERT_OK(store_->SetGatewayLimit(TenantScope::Of(a.id), key_limit));
  ASSERT_OK(store_->InsertUsageRecords(
      {Usage("r1", a.id, 1), Usage("r2", a.id, 2), Usage("r3", b.id, 3)}));

  auto summary = store_->DeleteTenantAndData(a.id);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->deployments, 2);
  EXPECT_EQ(summary->entitlements, 1);
  EXPECT_EQ(summary->gateway_limits, 2);
  EXPECT_EQ(summary->usage_records_kept, 2);
  for (const char* table : {"deployments", "entitlements", "gateway_limits"}) {
    EXPECT_EQ(
        Count(std::string("SELECT COUNT(*) FROM ") + table + " WHERE tenant_id = '" + a.id + "'"),
        0)
        << table;
  }
  // The shared deployment and tenant B's rows stay.
  EXPECT_OK(store_->GetDeploymentForPlatform(shared.id));
  EXPECT_OK(store_->GetDeploymentForPlatform(b_own.id));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM entitlements"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM gateway_limits"), 1);
  // Usage records are billing records: they outlive the tenant, under its
  // id (they used to be deleted), and so does a batch that arrives after
  // the eviction (it used to be dropped). Records of an id that never was a
  // tenant are still dropped.
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records WHERE tenant_id = '" + a.id + "'"), 2);
  ASSERT_OK(store_->InsertUsageRecords({Usage("r4", a.id, 4), Usage("r5", "tn_never", 5)}));
  auto kept = store_->ListUsage(TenantScope::Of(a.id), {}, {});
  ASSERT_TRUE(kept.has_value());
  ASSERT_EQ(kept->items.size(), 3u);
  EXPECT_EQ(kept->items[0].id, "r4");
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records WHERE tenant_id = 'tn_never'"), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 4);
  // Staff find the evicted tenant; its name is free for a new one.
  auto evicted = store_->GetEvictedTenantForPlatform(a.id);
  ASSERT_TRUE(evicted.has_value()) << evicted.error().message;
  EXPECT_EQ(evicted->state, "evicted");
  EXPECT_EQ(evicted->name, a.name);
  EXPECT_ERROR(store_->GetTenant(a.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->GetEvictedTenantForPlatform(b.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->DeleteTenantAndData(a.id), ErrorCode::kNotFound);
}

// A usage batch whose transaction fails part-way (one of its INSERTs, or the
// COMMIT itself) stores none of it; the shipper offers it again, and then
// each record is stored exactly once.
TEST_P(GatewayStoreTest, AUsageBatchThatFailsToCommitStoresNothingAndItsRetryStoresEachOnce) {
  Tenant a = MakeTenant("a");
  ASSERT_OK(store_->InsertUsageRecords({Usage("req_before", a.id, 999)}));
  testdb::SqlFaults faults;
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_, faults.Wrapper()));
  std::vector<UsageRecord> batch;
  for (int i = 0; i < 120; ++i) {  // several INSERT statements
    batch.push_back(Usage("req_" + std::to_string(i), a.id, 1000 + i));
  }
  auto stored = [&] {
    std::vector<std::string> ids;
    ListOptions page{"", 1000};
    auto usage = store_->ListUsage(TenantScope::Of(a.id), {}, page);
    EXPECT_TRUE(usage.has_value());
    if (usage.has_value()) {
      for (const auto& u : usage->items) ids.push_back(u.id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  const std::vector<std::string> before = stored();
  ASSERT_EQ(before, std::vector<std::string>{"req_before"});

  // The second INSERT of the batch fails: the first one's rows go too.
  faults.FailNth("INSERT INTO usage_records", 2);
  EXPECT_ERROR(store_->InsertUsageRecords(batch), ErrorCode::kUnavailable);
  EXPECT_EQ(stored(), before);
  // Every statement succeeds, the COMMIT fails: nothing either.
  faults.FailNth("COMMIT");
  EXPECT_ERROR(store_->InsertUsageRecords(batch), ErrorCode::kUnavailable);
  EXPECT_EQ(stored(), before);
  EXPECT_EQ(faults.failed(), 2);

  ASSERT_OK(store_->InsertUsageRecords(batch));
  ASSERT_OK(store_->InsertUsageRecords(batch));  // offered again after a lost reply: ignored
  std::vector<std::string> want = before;
  for (const auto& u : batch) want.push_back(u.id);
  std::sort(want.begin(), want.end());
  EXPECT_EQ(stored(), want);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM usage_records"), 121);
}

// ------------------------------------------------------------------ adapters

TEST_P(GatewayStoreTest, AdaptersAreTheirTenantsAndBoundedPerDeploymentAndPerTenant) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  DeploymentRecord shared = MakeDeployment("llama");
  DeploymentRecord external = MakeDeployment("mistral");
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Platform(), shared.id));
  shared.serving = R"({"template":"engine-sim"})";
  ASSERT_OK(store_->CreateDeployment(shared));
  auto adapter = [&](const std::string& name, const std::string& deployment) {
    AdapterRecord r;
    r.id = NextId("ad");
    r.deployment_id = deployment;
    r.name = name;
    r.artifact = "archive:arc_1";
    r.sha256 = std::string(64, 'c');
    r.status = "loading";
    r.created_by = "usr_1";
    r.created_at = r.updated_at = clock_.NowMillis();
    return r;
  };
  auto made = store_->CreateAdapter(TenantScope::Of(a.id), adapter("support", shared.id), 3, 2);
  ASSERT_OK(made);
  EXPECT_EQ(made->tenant_id, a.id);
  auto got = store_->GetAdapter(TenantScope::Of(a.id), made->id);
  ASSERT_OK(got);
  EXPECT_EQ(*got, *made);
  // Another tenant finds nothing of it, and may use the same name.
  EXPECT_ERROR(store_->GetAdapter(TenantScope::Of(b.id), made->id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->DeleteAdapter(TenantScope::Of(b.id), made->id), ErrorCode::kNotFound);
  ASSERT_OK(store_->CreateAdapter(TenantScope::Of(b.id), adapter("support", shared.id), 3, 2));
  EXPECT_ERROR(store_->CreateAdapter(TenantScope::Of(a.id), adapter("support", shared.id), 3, 2),
               ErrorCode::kAlreadyExists);
  // An external deployment or a missing one holds none.
  EXPECT_ERROR(store_->CreateAdapter(TenantScope::Of(a.id), adapter("x", external.id), 3, 2),
               ErrorCode::kNotFound);
  EXPECT_ERROR(store_->CreateAdapter(TenantScope::Of(a.id), adapter("x", "dep_nope"), 3, 2),
               ErrorCode::kNotFound);
  // The deployment's bound counts every tenant's; the tenant's every deployment's.
  ASSERT_OK(store_->CreateAdapter(TenantScope::Of(a.id), adapter("second", shared.id), 3, 2));
  EXPECT_ERROR(store_->CreateAdapter(TenantScope::Of(b.id), adapter("third", shared.id), 3, 2),
               ErrorCode::kFailedPrecondition);
  EXPECT_ERROR(store_->CreateAdapter(TenantScope::Of(a.id), adapter("third", shared.id), 9, 2),
               ErrorCode::kFailedPrecondition);
  auto listed = store_->ListAdapters(TenantScope::Of(a.id), "");
  ASSERT_OK(listed);
  EXPECT_EQ(listed->size(), 2U);
  listed = store_->ListAdapters(TenantScope::Of(a.id), external.id);
  ASSERT_OK(listed);
  EXPECT_TRUE(listed->empty());
  auto all = store_->ListAdaptersForServing(shared.id);
  ASSERT_OK(all);
  EXPECT_EQ(all->size(), 3U);
}

TEST_P(GatewayStoreTest, OnlyReadyAdaptersReachTheGatewayAndEachChangeOfThatMovesTheMarker) {
  Tenant a = MakeTenant("a");
  DeploymentRecord d = MakeDeployment("llama", a.id);
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Of(a.id), d.id));
  d.serving = R"({"template":"engine-sim"})";
  ASSERT_OK(store_->CreateDeployment(d));
  AdapterRecord r;
  r.id = NextId("ad");
  r.deployment_id = d.id;
  r.name = "support";
  r.artifact = "archive:arc_1";
  r.sha256 = std::string(64, 'c');
  r.status = "loading";
  auto made = store_->CreateAdapter(TenantScope::Of(a.id), r, 4, 4);
  ASSERT_OK(made);
  auto policy = store_->LoadGatewayPolicyForGateway();
  ASSERT_OK(policy);
  EXPECT_TRUE(policy->adapters.empty());
  int64_t before = Marker();
  ASSERT_OK(store_->SetAdapterStatusForServing(made->id, "loading", "loaded on 0 of 1", 5));
  EXPECT_EQ(Marker(), before);  // still not routed: nothing for the gateway
  ASSERT_OK(store_->SetAdapterStatusForServing(made->id, "ready", "", 6));
  EXPECT_NE(Marker(), before);
  policy = store_->LoadGatewayPolicyForGateway();
  ASSERT_OK(policy);
  ASSERT_EQ(policy->adapters.size(), 1U);
  EXPECT_EQ(policy->adapters[0].id, made->id);
  EXPECT_EQ(policy->adapters[0].tenant_id, a.id);
  before = Marker();
  ASSERT_OK(store_->DeleteAdapter(TenantScope::Of(a.id), made->id));
  EXPECT_NE(Marker(), before);
  EXPECT_ERROR(store_->SetAdapterStatusForServing(made->id, "ready", "", 7), ErrorCode::kNotFound);

  // Deleting the deployment, or evicting the tenant, deletes its adapters.
  r.id = NextId("ad");
  ASSERT_OK(store_->CreateAdapter(TenantScope::Of(a.id), r, 4, 4));
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Of(a.id), d.id));
  EXPECT_EQ(Count("SELECT COUNT(*) FROM adapters"), 0);
  DeploymentRecord shared = MakeDeployment("qwen");
  ASSERT_OK(store_->DeleteDeployment(TenantScope::Platform(), shared.id));
  shared.serving = R"({"template":"engine-sim"})";
  ASSERT_OK(store_->CreateDeployment(shared));
  r.id = NextId("ad");
  r.deployment_id = shared.id;
  ASSERT_OK(store_->CreateAdapter(TenantScope::Of(a.id), r, 4, 4));
  auto deleted = store_->DeleteTenantAndData(a.id, clock_.NowMillis());
  ASSERT_OK(deleted);
  EXPECT_EQ(deleted->adapters, 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM adapters"), 0);
}

INSTANTIATE_TEST_SUITE_P(Drivers, GatewayStoreTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium
