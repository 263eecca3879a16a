// The store's behaviour, one suite run on SQLite and on PostgreSQL (see
// store/test_databases.h for how each case gets a fresh database). Rows are
// made with a ManualClock so that ids (which sort by creation time) and
// timestamps are deterministic.
#include "store/store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "audit/chain.h"
#include "common/clock.h"
#include "crypto/ids.h"
#include "store/audit_state.h"
#include "store/fault_injecting_connection.h"
#include "store/migrations.h"
#include "store/test_databases.h"
#include "support/result_matchers.h"

namespace atrium {
namespace {

using testdb::Backend;
using testdb::BackendName;

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    OpenStore();
  }

  void TearDown() override {
    store_.reset();
    database_.Drop();
  }

  void OpenStore() { ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_)); }

  // A new id that sorts after every id made before it.
  std::string NextId(std::string_view prefix) {
    clock_.AdvanceMillis(1);
    return NewId(prefix, clock_);
  }

  Tenant MakeTenant(const std::string& name, std::map<std::string, std::string> labels = {},
                    const std::string& state = "active") {
    Tenant t;
    t.id = NextId("tn");
    t.name = name;
    t.display_name = "Tenant " + name;
    t.tier = "shared";
    t.regions = {"eu-west", "us-east"};
    t.weight = 7;
    t.labels = std::move(labels);
    t.state = state;
    t.created_at = t.updated_at = clock_.NowMillis();
    auto s = store_->CreateTenant(t);
    EXPECT_TRUE(s.has_value()) << name << ": " << s.error().message;
    return t;
  }

  User MakeUser(const std::string& tenant_id, const std::string& username,
                const std::string& role = "tenant-member") {
    User u;
    u.id = NextId("usr");
    u.tenant_id = tenant_id;
    u.username = username;
    u.display_name = "User " + username;
    u.email = username + "@example.com";
    u.role = role;
    u.kind = "human";
    u.password_hash = "$argon2id$fake";
    u.state = "active";
    u.created_at = u.updated_at = clock_.NowMillis();
    auto s = store_->CreateUser(u);
    EXPECT_TRUE(s.has_value()) << username << ": " << s.error().message;
    return u;
  }

  ApiKey MakeKey(const User& owner, const std::string& name = "key") {
    ApiKey k;
    k.id = NextId("key");
    k.tenant_id = owner.tenant_id;
    k.owner_user_id = owner.id;
    k.name = name;
    k.role = owner.role;
    k.scopes = {"model-a", "model-b"};
    k.secret_hash = std::string(64, 'a');
    k.created_at = clock_.NowMillis();
    k.expires_at = clock_.NowMillis() + 3'600'000;
    auto s = store_->CreateApiKey(k);
    EXPECT_TRUE(s.has_value()) << name << ": " << s.error().message;
    return k;
  }

  Session MakeSession(const User& user) {
    Session s{NextId("ses"), user.tenant_id, user.id, clock_.NowMillis(),
              clock_.NowMillis() + 3'600'000};
    auto r = store_->CreateSession(s);
    EXPECT_TRUE(r.has_value()) << r.error().message;
    return s;
  }

  AuditRecord MakeAudit(const std::string& tenant_id, const std::string& action) {
    AuditRecord r;
    r.time = clock_.NowMillis();
    r.actor = "user:usr_someone";
    r.actor_role = "tenant-admin";
    r.tenant_id = tenant_id;
    r.action = action;
    r.target = "tenant/" + tenant_id;
    r.outcome = "allowed";
    r.status = 200;
    r.request_id = "req-" + action;
    r.source = "127.0.0.1";
    return r;
  }

  // Rows of `table` whose `column` equals `value`, counted behind the store.
  int64_t CountRows(const std::string& table, const std::string& column, const std::string& value) {
    auto r = store_->database().Exec("SELECT COUNT(*) FROM " + table + " WHERE " + column + " = $1",
                                     {value});
    EXPECT_TRUE(r.has_value()) << table << ": " << r.error().message;
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  int64_t CountAll(const std::string& table) {
    auto r = store_->database().Exec("SELECT COUNT(*) FROM " + table);
    EXPECT_TRUE(r.has_value()) << table << ": " << r.error().message;
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  std::vector<AuditRecord> AllAudit(const std::optional<std::string>& tenant_id = std::nullopt) {
    auto page = store_->ListAudit(tenant_id, ListOptions{"", 1000});
    EXPECT_TRUE(page.has_value()) << page.error().message;
    if (!page.has_value()) return {};
    EXPECT_EQ(page->next_cursor, "");
    return page->items;
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

// ---------------------------------------------------------------- migrations

TEST_P(StoreTest, MigrationsApplyOnceAndReopeningIsIdempotent) {
  EXPECT_EQ(store_->dialect(),
            GetParam() == Backend::kSqlite ? sql::Dialect::kSqlite : sql::Dialect::kPostgres);
  EXPECT_EQ(CountAll("schema_migrations"), LatestSchemaVersion());
  EXPECT_EQ(CountAll("audit_counter"), 1);
  Tenant t = MakeTenant("kept");
  ASSERT_OK(store_->AppendAudit(MakeAudit(t.id, "tenant.create")));

  // A second store on the same database while the first is open, then the
  // first reopened: nothing is applied twice and no data is lost.
  auto second = Store::Open(database_.url());
  ASSERT_TRUE(second.has_value()) << second.error().message;
  second->reset();
  store_.reset();
  OpenStore();
  ASSERT_NE(store_, nullptr);
  EXPECT_OK(ApplyMigrations(store_->database()));

  EXPECT_EQ(CountAll("schema_migrations"), LatestSchemaVersion());
  EXPECT_EQ(CountAll("audit_counter"), 1);
  auto kept = store_->GetTenant(t.id);
  ASSERT_TRUE(kept.has_value()) << kept.error().message;
  EXPECT_EQ(kept->name, "kept");
  // The audit counter was not reset by the reopen: numbering continues.
  auto next = store_->AppendAudit(MakeAudit(t.id, "tenant.update"));
  ASSERT_TRUE(next.has_value()) << next.error().message;
  EXPECT_EQ(next->seq, 2);
  EXPECT_EQ(next->chain_seq, 2);
}

// ---------------------------------------------------------------- tenants

TEST_P(StoreTest, TenantRoundTripsEveryField) {
  Tenant t = MakeTenant("acme", {{"env", "prod"}, {"team", "ml"}});
  auto got = store_->GetTenant(t.id);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  EXPECT_EQ(got->id, t.id);
  EXPECT_EQ(got->name, "acme");
  EXPECT_EQ(got->display_name, "Tenant acme");
  EXPECT_EQ(got->tier, "shared");
  EXPECT_EQ(got->regions, t.regions);
  EXPECT_EQ(got->weight, 7);
  EXPECT_EQ(got->labels, t.labels);
  EXPECT_EQ(got->state, "active");
  EXPECT_EQ(got->created_at, t.created_at);
  EXPECT_EQ(got->updated_at, t.updated_at);

  auto by_name = store_->GetTenantByName("acme");
  ASSERT_TRUE(by_name.has_value()) << by_name.error().message;
  EXPECT_EQ(by_name->id, t.id);
  EXPECT_EQ(by_name->labels, t.labels);

  EXPECT_ERROR(store_->GetTenant("tn_missing"), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->GetTenantByName("ACME"), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->GetTenantByName(""), ErrorCode::kNotFound);
}

TEST_P(StoreTest, DuplicateTenantNameIsAlreadyExistsAndLeavesNothingBehind) {
  Tenant first = MakeTenant("acme", {{"env", "prod"}});
  Tenant dup = first;
  dup.id = NextId("tn");
  dup.labels = {{"other", "x"}};
  auto r = store_->CreateTenant(dup);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists) << r.error().message;
  EXPECT_NE(r.error().message.find("acme"), std::string::npos) << r.error().message;
  EXPECT_ERROR(store_->GetTenant(dup.id), ErrorCode::kNotFound);
  EXPECT_EQ(CountRows("tenant_labels", "tenant_id", dup.id), 0);

  // The same id under another name is a duplicate too.
  Tenant same_id = first;
  same_id.name = "acme-2";
  EXPECT_ERROR(store_->CreateTenant(same_id), ErrorCode::kAlreadyExists);

  auto count = store_->CountTenants();
  ASSERT_TRUE(count.has_value());
  EXPECT_EQ(*count, 1);
}

TEST_P(StoreTest, ListTenantsPagesWithoutGapsOrDuplicates) {
  std::vector<std::string> created;
  for (int i = 0; i < 25; ++i) created.push_back(MakeTenant("t" + std::to_string(i)).id);

  std::vector<std::string> seen;
  std::vector<size_t> page_sizes;
  ListOptions opts{"", 10};
  for (int guard = 0; guard < 10; ++guard) {
    auto page = store_->ListTenants({}, opts);
    ASSERT_TRUE(page.has_value()) << page.error().message;
    page_sizes.push_back(page->items.size());
    for (const auto& t : page->items) seen.push_back(t.id);
    if (page->next_cursor.empty()) break;
    EXPECT_EQ(page->next_cursor, page->items.back().id);
    opts.after = page->next_cursor;
  }
  EXPECT_EQ(page_sizes, (std::vector<size_t>{10, 10, 5}));
  // Ids sort by creation time, so the listing is creation order.
  EXPECT_EQ(seen, created);

  // A page size that divides the total exactly ends without an empty page.
  auto twenty_five = store_->ListTenants({}, ListOptions{"", 25});
  ASSERT_TRUE(twenty_five.has_value());
  EXPECT_EQ(twenty_five->items.size(), 25u);
  EXPECT_EQ(twenty_five->next_cursor, "");

  // A cursor past the end gives an empty last page.
  auto past = store_->ListTenants({}, ListOptions{created.back(), 10});
  ASSERT_TRUE(past.has_value());
  EXPECT_TRUE(past->items.empty());
  EXPECT_EQ(past->next_cursor, "");

  auto count = store_->CountTenants();
  ASSERT_TRUE(count.has_value());
  EXPECT_EQ(*count, 25);
}

TEST_P(StoreTest, ListTenantsFiltersByStateAndLabel) {
  Tenant a = MakeTenant("a", {{"env", "prod"}});
  Tenant b = MakeTenant("b", {{"env", "dev"}}, "suspended");
  Tenant c = MakeTenant("c", {{"env", "prod"}, {"team", "ml"}}, "suspended");
  Tenant d = MakeTenant("d");
  Tenant e = MakeTenant("e", {{"env", "prod"}});

  auto list = [&](TenantFilter f, int limit = 100) {
    std::vector<std::string> ids;
    ListOptions opts{"", limit};
    for (int guard = 0; guard < 20; ++guard) {
      auto page = store_->ListTenants(f, opts);
      EXPECT_TRUE(page.has_value()) << page.error().message;
      if (!page.has_value()) break;
      for (const auto& t : page->items) ids.push_back(t.id);
      if (page->next_cursor.empty()) break;
      opts.after = page->next_cursor;
    }
    return ids;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(list({"suspended", "", ""}), (V{b.id, c.id}));
  EXPECT_EQ(list({"active", "", ""}), (V{a.id, d.id, e.id}));
  EXPECT_EQ(list({"evicting", "", ""}), V{});
  EXPECT_EQ(list({"", "env", "prod"}), (V{a.id, c.id, e.id}));
  EXPECT_EQ(list({"", "env", "prod"}, 1), (V{a.id, c.id, e.id})) << "label filter with cursors";
  EXPECT_EQ(list({"", "team", "ml"}), V{c.id});
  EXPECT_EQ(list({"", "env", "staging"}), V{});
  EXPECT_EQ(list({"active", "env", "prod"}), (V{a.id, e.id}));
  EXPECT_EQ(list({"active", "env", "prod"}, 1), (V{a.id, e.id}));
  EXPECT_EQ(list({"suspended", "env", "prod"}), V{c.id});
}

TEST_P(StoreTest, UpdateTenantReplacesFieldsAndLabels) {
  Tenant t = MakeTenant("acme", {{"env", "prod"}, {"team", "ml"}});
  Tenant other = MakeTenant("other", {{"env", "prod"}});
  Tenant changed = t;
  changed.display_name = "ACME Corp";
  changed.tier = "dedicated-gpu";
  changed.regions = {"ap-south"};
  changed.weight = 10000;
  changed.labels = {{"env", "dev"}, {"cost-center", "42"}};
  changed.state = "suspended";
  changed.updated_at = t.updated_at + 5000;
  auto written = store_->UpdateTenant(changed);
  ASSERT_TRUE(written.has_value());
  EXPECT_TRUE(*written);

  auto got = store_->GetTenant(t.id);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->name, "acme");
  EXPECT_EQ(got->display_name, "ACME Corp");
  EXPECT_EQ(got->tier, "dedicated-gpu");
  EXPECT_EQ(got->regions, std::vector<std::string>{"ap-south"});
  EXPECT_EQ(got->weight, 10000);
  EXPECT_EQ(got->labels, changed.labels);
  EXPECT_EQ(got->state, "suspended");
  EXPECT_EQ(got->created_at, t.created_at);
  EXPECT_EQ(got->updated_at, t.updated_at + 5000);

  // The label index follows: old labels are gone, new ones match.
  EXPECT_EQ(CountRows("tenant_labels", "tenant_id", t.id), 2);
  auto prod = store_->ListTenants({"", "env", "prod"}, {});
  ASSERT_TRUE(prod.has_value());
  EXPECT_EQ(Ids(prod->items), std::vector<std::string>{other.id});
  auto ml = store_->ListTenants({"", "team", "ml"}, {});
  ASSERT_TRUE(ml.has_value());
  EXPECT_TRUE(ml->items.empty());
  auto cc = store_->ListTenants({"", "cost-center", "42"}, {});
  ASSERT_TRUE(cc.has_value());
  EXPECT_EQ(Ids(cc->items), std::vector<std::string>{t.id});

  // Clearing every label; a write must be over the version it read.
  changed.labels.clear();
  written = store_->UpdateTenant(changed);
  ASSERT_TRUE(written.has_value());
  EXPECT_FALSE(*written) << "a write over a stale version must be refused";
  EXPECT_EQ(CountRows("tenant_labels", "tenant_id", t.id), 2);
  changed.version = got->version;
  written = store_->UpdateTenant(changed);
  ASSERT_TRUE(written.has_value());
  EXPECT_TRUE(*written);
  EXPECT_EQ(CountRows("tenant_labels", "tenant_id", t.id), 0);
  EXPECT_TRUE(store_->GetTenant(t.id)->labels.empty());
  // The other tenant was not touched.
  EXPECT_EQ(store_->GetTenant(other.id)->labels, other.labels);

  Tenant missing = t;
  missing.id = "tn_missing";
  EXPECT_ERROR(store_->UpdateTenant(missing), ErrorCode::kNotFound);
}

// ---------------------------------------------------------------- users

TEST_P(StoreTest, UserLifecycle) {
  Tenant t = MakeTenant("acme");
  User alice = MakeUser(t.id, "alice", "tenant-admin");
  User bob = MakeUser(t.id, "bob");

  auto got = store_->GetUser(TenantScope::Of(t.id), alice.id);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  EXPECT_EQ(got->tenant_id, t.id);
  EXPECT_EQ(got->username, "alice");
  EXPECT_EQ(got->display_name, "User alice");
  EXPECT_EQ(got->email, "alice@example.com");
  EXPECT_EQ(got->role, "tenant-admin");
  EXPECT_EQ(got->kind, "human");
  EXPECT_EQ(got->password_hash, alice.password_hash);
  EXPECT_EQ(got->state, "active");
  EXPECT_EQ(got->created_at, alice.created_at);

  auto by_name = store_->GetUserByName(TenantScope::Of(t.id), "bob");
  ASSERT_TRUE(by_name.has_value());
  EXPECT_EQ(by_name->id, bob.id);
  EXPECT_ERROR(store_->GetUserByName(TenantScope::Of(t.id), "carol"), ErrorCode::kNotFound);

  // Usernames are unique within a tenant, not across tenants.
  User dup = alice;
  dup.id = NextId("usr");
  EXPECT_ERROR(store_->CreateUser(dup), ErrorCode::kAlreadyExists);
  Tenant t2 = MakeTenant("globex");
  MakeUser(t2.id, "alice");

  auto page1 = store_->ListUsers(TenantScope::Of(t.id), {"", 1});
  ASSERT_TRUE(page1.has_value());
  EXPECT_EQ(Ids(page1->items), std::vector<std::string>{alice.id});
  ASSERT_EQ(page1->next_cursor, alice.id);
  auto page2 = store_->ListUsers(TenantScope::Of(t.id), {page1->next_cursor, 1});
  ASSERT_TRUE(page2.has_value());
  EXPECT_EQ(Ids(page2->items), std::vector<std::string>{bob.id});
  EXPECT_EQ(page2->next_cursor, "");

  User changed = bob;
  changed.display_name = "Robert";
  changed.email = "rob@example.com";
  changed.role = "tenant-viewer";
  changed.password_hash = "$argon2id$other";
  changed.state = "disabled";
  changed.username = "ignored";  // not mutable
  changed.updated_at = bob.updated_at + 1;
  ASSERT_OK(store_->UpdateUser(TenantScope::Of(t.id), changed));
  auto updated = store_->GetUser(TenantScope::Of(t.id), bob.id);
  ASSERT_TRUE(updated.has_value());
  EXPECT_EQ(updated->username, "bob");
  EXPECT_EQ(updated->display_name, "Robert");
  EXPECT_EQ(updated->email, "rob@example.com");
  EXPECT_EQ(updated->role, "tenant-viewer");
  EXPECT_EQ(updated->password_hash, "$argon2id$other");
  EXPECT_EQ(updated->state, "disabled");
  EXPECT_EQ(updated->updated_at, bob.updated_at + 1);
  User ghost = bob;
  ghost.id = "usr_missing";
  EXPECT_ERROR(store_->UpdateUser(TenantScope::Of(t.id), ghost), ErrorCode::kNotFound);
}

TEST_P(StoreTest, DeleteUserRemovesItsKeysAndSessionsOnly) {
  Tenant t = MakeTenant("acme");
  User alice = MakeUser(t.id, "alice");
  User bob = MakeUser(t.id, "bob");
  ApiKey a1 = MakeKey(alice), a2 = MakeKey(alice);
  ApiKey b1 = MakeKey(bob);
  Session as = MakeSession(alice);
  Session bs = MakeSession(bob);

  ASSERT_OK(store_->DeleteUser(TenantScope::Of(t.id), alice.id));
  EXPECT_ERROR(store_->GetUser(TenantScope::Of(t.id), alice.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->FindApiKeyForAuth(a1.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->FindApiKeyForAuth(a2.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->FindSessionForAuth(as.id), ErrorCode::kNotFound);
  EXPECT_EQ(CountRows("api_keys", "owner_user_id", alice.id), 0);
  EXPECT_EQ(CountRows("sessions", "user_id", alice.id), 0);

  EXPECT_OK(store_->GetUser(TenantScope::Of(t.id), bob.id));
  EXPECT_OK(store_->FindApiKeyForAuth(b1.id));
  EXPECT_OK(store_->FindSessionForAuth(bs.id));

  EXPECT_ERROR(store_->DeleteUser(TenantScope::Of(t.id), alice.id), ErrorCode::kNotFound);
}

// ---------------------------------------------------------------- tenant scoping

// Every scoped method, called with a scope other than the row's, behaves as
// if the row did not exist and changes nothing.
TEST_P(StoreTest, RowsOfOneTenantAreInvisibleFromAnyOtherScope) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  User ua = MakeUser(a.id, "alice", "tenant-admin");
  User ub = MakeUser(b.id, "bob", "tenant-admin");
  User staff = MakeUser("", "staff", "platform-admin");
  ApiKey ka = MakeKey(ua);
  ApiKey kb = MakeKey(ub);
  ApiKey kstaff = MakeKey(staff);
  Session sa = MakeSession(ua);

  for (const TenantScope& wrong : {TenantScope::Of(b.id), TenantScope::Platform()}) {
    SCOPED_TRACE("scope '" + wrong.tenant_id + "'");
    EXPECT_ERROR(store_->GetUser(wrong, ua.id), ErrorCode::kNotFound);
    EXPECT_ERROR(store_->GetUserByName(wrong, "alice"), ErrorCode::kNotFound);
    EXPECT_ERROR(store_->GetApiKey(wrong, ka.id), ErrorCode::kNotFound);

    auto users = store_->ListUsers(wrong, {});
    ASSERT_TRUE(users.has_value());
    for (const auto& u : users->items) EXPECT_NE(u.tenant_id, a.id) << u.id;
    EXPECT_EQ(Ids(users->items), std::vector<std::string>{wrong.is_platform() ? staff.id : ub.id});

    for (const std::string& owner : {std::string(), ua.id}) {
      auto keys = store_->ListApiKeys(wrong, owner, {});
      ASSERT_TRUE(keys.has_value());
      std::vector<std::string> expected;
      if (owner.empty()) expected = {wrong.is_platform() ? kstaff.id : kb.id};
      EXPECT_EQ(Ids(keys->items), expected) << "owner '" << owner << "'";
    }

    User edit = ua;
    edit.role = "tenant-viewer";
    edit.state = "disabled";
    EXPECT_ERROR(store_->UpdateUser(wrong, edit), ErrorCode::kNotFound);
    EXPECT_ERROR(store_->DeleteUser(wrong, ua.id), ErrorCode::kNotFound);
    EXPECT_ERROR(store_->RevokeApiKey(wrong, ka.id, clock_.NowMillis()), ErrorCode::kNotFound);
    EXPECT_ERROR(store_->DeleteSession(wrong, sa.id), ErrorCode::kNotFound);
    auto ended = store_->DeleteSessionsOfUser(wrong, ua.id);
    ASSERT_TRUE(ended.has_value());
    EXPECT_EQ(*ended, 0);
  }

  // Nothing of tenant A changed.
  auto alice = store_->GetUser(TenantScope::Of(a.id), ua.id);
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->role, "tenant-admin");
  EXPECT_EQ(alice->state, "active");
  auto key = store_->GetApiKey(TenantScope::Of(a.id), ka.id);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(key->revoked_at, 0);
  EXPECT_OK(store_->FindSessionForAuth(sa.id));

  // And the platform's own rows are invisible from a tenant scope.
  EXPECT_ERROR(store_->GetUser(TenantScope::Of(a.id), staff.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->GetApiKey(TenantScope::Of(a.id), kstaff.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->RevokeApiKey(TenantScope::Of(a.id), kstaff.id, 1), ErrorCode::kNotFound);
  EXPECT_OK(store_->GetUser(TenantScope::Platform(), staff.id));
}

// ---------------------------------------------------------------- API keys

TEST_P(StoreTest, ApiKeyLifecycle) {
  Tenant t = MakeTenant("acme");
  User alice = MakeUser(t.id, "alice");
  User bob = MakeUser(t.id, "bob");
  ApiKey a1 = MakeKey(alice, "first");
  ApiKey b1 = MakeKey(bob, "bob's");
  ApiKey a2 = MakeKey(alice, "second");
  const TenantScope scope = TenantScope::Of(t.id);

  auto got = store_->GetApiKey(scope, a1.id);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  EXPECT_EQ(got->tenant_id, t.id);
  EXPECT_EQ(got->owner_user_id, alice.id);
  EXPECT_EQ(got->name, "first");
  EXPECT_EQ(got->role, "tenant-member");
  EXPECT_EQ(got->scopes, (std::vector<std::string>{"model-a", "model-b"}));
  EXPECT_EQ(got->secret_hash, a1.secret_hash);
  EXPECT_EQ(got->created_at, a1.created_at);
  EXPECT_EQ(got->expires_at, a1.expires_at);
  EXPECT_EQ(got->revoked_at, 0);

  auto auth = store_->FindApiKeyForAuth(b1.id);
  ASSERT_TRUE(auth.has_value());
  EXPECT_EQ(auth->tenant_id, t.id);
  EXPECT_EQ(auth->owner_user_id, bob.id);
  EXPECT_ERROR(store_->FindApiKeyForAuth("key_missing"), ErrorCode::kNotFound);

  ApiKey dup = a1;
  dup.name = "dup";
  EXPECT_ERROR(store_->CreateApiKey(dup), ErrorCode::kAlreadyExists);

  auto of_alice = store_->ListApiKeys(scope, alice.id, {});
  ASSERT_TRUE(of_alice.has_value());
  EXPECT_EQ(Ids(of_alice->items), (std::vector<std::string>{a1.id, a2.id}));
  auto all = store_->ListApiKeys(scope, "", {});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(Ids(all->items), (std::vector<std::string>{a1.id, b1.id, a2.id}));
  auto first = store_->ListApiKeys(scope, alice.id, {"", 1});
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Ids(first->items), std::vector<std::string>{a1.id});
  auto rest = store_->ListApiKeys(scope, alice.id, {first->next_cursor, 1});
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(Ids(rest->items), std::vector<std::string>{a2.id});
  EXPECT_EQ(rest->next_cursor, "");

  const int64_t at = clock_.NowMillis() + 10;
  ASSERT_OK(store_->RevokeApiKey(scope, a1.id, at));
  EXPECT_EQ(store_->FindApiKeyForAuth(a1.id)->revoked_at, at);
  EXPECT_ERROR(store_->RevokeApiKey(scope, a1.id, at + 1), ErrorCode::kNotFound);
  EXPECT_EQ(store_->FindApiKeyForAuth(a1.id)->revoked_at, at) << "second revoke moved the time";
  EXPECT_ERROR(store_->RevokeApiKey(scope, "key_missing", at), ErrorCode::kNotFound);
  EXPECT_EQ(store_->GetApiKey(scope, a2.id)->revoked_at, 0);
}

// ---------------------------------------------------------------- sessions

TEST_P(StoreTest, SessionLifecycle) {
  Tenant t = MakeTenant("acme");
  User alice = MakeUser(t.id, "alice");
  User bob = MakeUser(t.id, "bob");
  Session s1 = MakeSession(alice);
  Session s2 = MakeSession(alice);
  Session s3 = MakeSession(bob);
  const TenantScope scope = TenantScope::Of(t.id);

  auto found = store_->FindSessionForAuth(s1.id);
  ASSERT_TRUE(found.has_value()) << found.error().message;
  EXPECT_EQ(found->id, s1.id);
  EXPECT_EQ(found->tenant_id, t.id);
  EXPECT_EQ(found->user_id, alice.id);
  EXPECT_EQ(found->created_at, s1.created_at);
  EXPECT_EQ(found->expires_at, s1.expires_at);
  EXPECT_ERROR(store_->FindSessionForAuth("ses_missing"), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->CreateSession(s1), ErrorCode::kAlreadyExists);

  ASSERT_OK(store_->DeleteSession(scope, s1.id));
  EXPECT_ERROR(store_->FindSessionForAuth(s1.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->DeleteSession(scope, s1.id), ErrorCode::kNotFound);

  Session s4 = MakeSession(alice);
  auto ended = store_->DeleteSessionsOfUser(scope, alice.id);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(*ended, 2);
  EXPECT_ERROR(store_->FindSessionForAuth(s2.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->FindSessionForAuth(s4.id), ErrorCode::kNotFound);
  EXPECT_OK(store_->FindSessionForAuth(s3.id));
}

TEST_P(StoreTest, ExpiredSessionsArePurgedAcrossTenants) {
  Tenant a = MakeTenant("acme");
  Tenant b = MakeTenant("globex");
  User alice = MakeUser(a.id, "alice");
  User gina = MakeUser(b.id, "gina");
  Session ended_a = MakeSession(alice);
  Session ended_b = MakeSession(gina);
  Session live = MakeSession(alice);
  ASSERT_TRUE(store_->database()
                  .Exec("UPDATE sessions SET expires_at = 5000 WHERE id IN ($1, $2)",
                        {ended_a.id, ended_b.id})
                  .has_value());
  auto purged = store_->DeleteExpiredSessionsForHousekeeping(5000);
  ASSERT_TRUE(purged.has_value()) << purged.error().message;
  EXPECT_EQ(*purged, 2);
  EXPECT_ERROR(store_->FindSessionForAuth(ended_a.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->FindSessionForAuth(ended_b.id), ErrorCode::kNotFound);
  EXPECT_OK(store_->FindSessionForAuth(live.id));
}

// ---------------------------------------------------------------- signing keys

TEST_P(StoreTest, SigningKeysListNewestFirst) {
  auto empty = store_->ListSigningKeys();
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());

  ASSERT_OK(store_->AddSigningKey({"sk_old", std::string(64, '1'), 1000}));
  ASSERT_OK(store_->AddSigningKey({"sk_new", std::string(64, '3'), 3000}));
  ASSERT_OK(store_->AddSigningKey({"sk_mid", std::string(64, '2'), 2000}));
  EXPECT_ERROR(store_->AddSigningKey({"sk_mid", "x", 4000}), ErrorCode::kAlreadyExists);

  auto keys = store_->ListSigningKeys();
  ASSERT_TRUE(keys.has_value());
  ASSERT_EQ(keys->size(), 3u);
  EXPECT_EQ((*keys)[0].id, "sk_new");
  EXPECT_EQ((*keys)[0].secret, std::string(64, '3'));
  EXPECT_EQ((*keys)[0].created_at, 3000);
  EXPECT_EQ((*keys)[1].id, "sk_mid");
  EXPECT_EQ((*keys)[2].id, "sk_old");

  ASSERT_OK(store_->ReplaceSigningKeySecret("sk_mid", "sealed1:abc"));
  EXPECT_ERROR(store_->ReplaceSigningKeySecret("sk_missing", "x"), ErrorCode::kNotFound);
  keys = store_->ListSigningKeys();
  ASSERT_TRUE(keys.has_value());
  EXPECT_EQ((*keys)[1].secret, "sealed1:abc");

  ASSERT_OK(store_->DeleteSigningKey("sk_mid"));
  EXPECT_ERROR(store_->DeleteSigningKey("sk_mid"), ErrorCode::kNotFound);
  keys = store_->ListSigningKeys();
  ASSERT_TRUE(keys.has_value());
  EXPECT_EQ(Ids(*keys), (std::vector<std::string>{"sk_new", "sk_old"}));
}

// ---------------------------------------------------------------- eviction

TEST_P(StoreTest, DeleteTenantAndDataRemovesEveryRowOfTheTenantOnly) {
  Tenant a = MakeTenant("a", {{"env", "prod"}, {"team", "ml"}});
  Tenant b = MakeTenant("b", {{"env", "prod"}});
  User a1 = MakeUser(a.id, "alice");
  User a2 = MakeUser(a.id, "bob");
  User b1 = MakeUser(b.id, "alice");
  User staff = MakeUser("", "staff", "platform-admin");
  MakeKey(a1);
  MakeKey(a1);
  MakeKey(a2);
  MakeKey(b1);
  MakeKey(staff);
  MakeSession(a1);
  MakeSession(a2);
  MakeSession(b1);
  ASSERT_OK(store_->AppendAudit(MakeAudit(a.id, "tenant.create")));
  ASSERT_OK(store_->AppendAudit(MakeAudit(b.id, "tenant.create")));
  ASSERT_OK(store_->AppendAudit(MakeAudit(a.id, "user.create")));
  ASSERT_OK(store_->AppendAudit(MakeAudit("", "tenant.evict")));

  struct Counts {
    int64_t users, keys, sessions, labels, tenants;
    bool operator==(const Counts&) const = default;
  };
  auto counts = [&](const std::string& id) {
    return Counts{CountRows("users", "tenant_id", id), CountRows("api_keys", "tenant_id", id),
                  CountRows("sessions", "tenant_id", id),
                  CountRows("tenant_labels", "tenant_id", id), CountRows("tenants", "id", id)};
  };
  ASSERT_EQ(counts(a.id), (Counts{2, 3, 2, 2, 1}));
  const Counts b_before = counts(b.id);
  const Counts platform_before = counts("");
  ASSERT_EQ(b_before, (Counts{1, 1, 1, 1, 1}));

  auto summary = store_->DeleteTenantAndData(a.id);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->users, 2);
  EXPECT_EQ(summary->api_keys, 3);
  EXPECT_EQ(summary->sessions, 2);

  EXPECT_EQ(counts(a.id), (Counts{0, 0, 0, 0, 0}));
  EXPECT_EQ(counts(b.id), b_before);
  EXPECT_EQ(counts(""), platform_before);
  EXPECT_ERROR(store_->GetTenant(a.id), ErrorCode::kNotFound);
  EXPECT_ERROR(store_->GetTenantByName("a"), ErrorCode::kNotFound);
  auto prod = store_->ListTenants({"", "env", "prod"}, {});
  ASSERT_TRUE(prod.has_value());
  EXPECT_EQ(Ids(prod->items), std::vector<std::string>{b.id});

  // Audit records are kept, the evicted tenant's included, and still verify.
  EXPECT_EQ(CountAll("audit_log"), 4);
  EXPECT_EQ(CountRows("audit_log", "tenant_id", a.id), 2);
  auto report = audit::Verify(AllAudit());
  EXPECT_TRUE(report.ok) << report.reason;

  EXPECT_ERROR(store_->DeleteTenantAndData(a.id), ErrorCode::kNotFound);
  // The name is free again.
  MakeTenant("a");
}

// ---------------------------------------------------------------- audit

TEST_P(StoreTest, AppendAuditNumbersAndLinksEachChain) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  const std::vector<std::string> tenants = {"", a.id, b.id, a.id, "", a.id};
  std::vector<AuditRecord> appended;
  for (size_t i = 0; i < tenants.size(); ++i) {
    auto r = store_->AppendAudit(MakeAudit(tenants[i], "action" + std::to_string(i)));
    ASSERT_TRUE(r.has_value()) << r.error().message;
    appended.push_back(*r);
  }
  const std::vector<int64_t> expected_chain_seq = {1, 1, 1, 2, 2, 3};
  std::map<std::string, std::string> last_hash;
  for (size_t i = 0; i < appended.size(); ++i) {
    const AuditRecord& r = appended[i];
    SCOPED_TRACE("record " + std::to_string(i));
    EXPECT_EQ(r.seq, static_cast<int64_t>(i + 1));
    EXPECT_EQ(r.chain, tenants[i].empty() ? "platform" : tenants[i]);
    EXPECT_EQ(r.chain_seq, expected_chain_seq[i]);
    auto prev = last_hash.find(r.chain);
    EXPECT_EQ(r.prev_hash, prev == last_hash.end() ? audit::kGenesisHash : prev->second);
    EXPECT_EQ(r.hash, audit::ComputeHash(r));
    last_hash[r.chain] = r.hash;
  }

  // What ListAudit reads back is what AppendAudit returned, field by field.
  std::vector<AuditRecord> all = AllAudit();
  ASSERT_EQ(all.size(), appended.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(audit::ToJson(all[i]), audit::ToJson(appended[i]));
  }
  audit::VerifyReport report = audit::Verify(all);
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(report.records, 6);
  EXPECT_EQ(report.chains, 3);

  // One tenant's records verify on their own.
  std::vector<AuditRecord> of_a = AllAudit(a.id);
  ASSERT_EQ(of_a.size(), 3u);
  for (const auto& r : of_a) EXPECT_EQ(r.tenant_id, a.id);
  report = audit::Verify(of_a);
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(report.chains, 1);
  EXPECT_EQ(AllAudit("").size(), 2u) << "platform records";

  // Paging with the seq cursor.
  std::vector<int64_t> seqs;
  ListOptions opts{"", 4};
  for (int guard = 0; guard < 5; ++guard) {
    auto page = store_->ListAudit(std::nullopt, opts);
    ASSERT_TRUE(page.has_value());
    for (const auto& r : page->items) seqs.push_back(r.seq);
    if (page->next_cursor.empty()) break;
    opts.after = page->next_cursor;
  }
  EXPECT_EQ(seqs, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));

  auto heads = store_->AuditHeads();
  ASSERT_TRUE(heads.has_value());
  std::map<std::string, std::pair<int64_t, std::string>> head_map(heads->begin(), heads->end());
  EXPECT_EQ(head_map.size(), 3u);
  EXPECT_EQ(head_map["platform"], std::make_pair(int64_t{2}, appended[4].hash));
  EXPECT_EQ(head_map[a.id], std::make_pair(int64_t{3}, appended[5].hash));
  EXPECT_EQ(head_map[b.id], std::make_pair(int64_t{1}, appended[2].hash));

  // An edit made behind the store's back is found, and named.
  ASSERT_OK(store_->database().Exec("UPDATE audit_log SET outcome = 'denied' WHERE seq = 4"));
  report = audit::Verify(AllAudit());
  EXPECT_FALSE(report.ok);
  EXPECT_EQ(report.broken_seq, 4);
  EXPECT_EQ(report.broken_chain, a.id);
}

TEST_P(StoreTest, ConcurrentAppendAuditKeepsOneValidChainPerTenant) {
  Tenant a = MakeTenant("a");
  Tenant b = MakeTenant("b");
  const std::vector<std::string> tenants = {"", a.id, b.id};
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seqs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string& tenant = tenants[(t + i) % tenants.size()];
        auto r = store_->AppendAudit(
            MakeAudit(tenant, "t" + std::to_string(t) + "-" + std::to_string(i)));
        EXPECT_TRUE(r.has_value()) << r.error().message;
        if (r.has_value()) seqs[t].push_back(r->seq);
      }
    });
  }
  for (auto& th : threads) th.join();

  std::set<int64_t> unique;
  size_t returned = 0;
  for (const auto& v : seqs) {
    returned += v.size();
    unique.insert(v.begin(), v.end());
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end())) << "one thread's appends went backwards";
  }
  EXPECT_EQ(returned, size_t{kThreads * kPerThread});
  EXPECT_EQ(unique.size(), returned) << "a seq was handed out twice";

  std::vector<AuditRecord> all = AllAudit();
  ASSERT_EQ(all.size(), size_t{kThreads * kPerThread});
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].seq, static_cast<int64_t>(i + 1));
  audit::VerifyReport report = audit::Verify(all);
  EXPECT_TRUE(report.ok) << report.reason << " at seq " << report.broken_seq;
  EXPECT_EQ(report.chains, 3);

  auto heads = store_->AuditHeads();
  ASSERT_TRUE(heads.has_value());
  int64_t total = 0;
  for (const auto& [chain, head] : *heads) {
    total += head.first;
    EXPECT_EQ(head.first, CountRows("audit_log", "chain", chain)) << chain;
  }
  EXPECT_EQ(total, kThreads * kPerThread);

  // The state a checkpoint signs agrees with the heads and the trail: the
  // whole trail verifies against it.
  auto state = ReadAuditState(store_->database());
  ASSERT_TRUE(state.has_value()) << state.error().message;
  EXPECT_EQ(state->last_seq, kThreads * kPerThread);
  EXPECT_EQ(state->heads.size(), 3u);
  audit::TrailClaims claims{state->heads, state->last_seq, nullptr};
  report = audit::VerifyTrail(all, claims);
  EXPECT_TRUE(report.ok) << report.reason;
}

// An audit append whose transaction fails (at its COMMIT, or at one of its
// statements) leaves no record, no counter step and no moved head: the
// chain still verifies, and the next append links onto the last stored one
// with the next numbers.
TEST_P(StoreTest, AnAuditAppendThatFailsToCommitLeavesTheChainValidAndTheNextLinksOn) {
  Tenant a = MakeTenant("a");
  testdb::SqlFaults faults;
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_, faults.Wrapper()));
  auto first = store_->AppendAudit(MakeAudit(a.id, "tenant.update"));
  ASSERT_TRUE(first.has_value()) << first.error().message;
  const std::vector<AuditRecord> before = AllAudit();

  faults.FailNth("COMMIT");
  EXPECT_ERROR(store_->AppendAudit(MakeAudit(a.id, "lost.at.commit")), ErrorCode::kUnavailable);
  faults.FailNth("UPDATE audit_heads");
  EXPECT_ERROR(store_->AppendAudit(MakeAudit(a.id, "lost.at.head")), ErrorCode::kUnavailable);
  ASSERT_EQ(faults.failed(), 2);
  std::vector<AuditRecord> after = AllAudit();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(audit::ToJson(after[i]), audit::ToJson(before[i]));
  }
  audit::VerifyReport report = audit::Verify(after);
  EXPECT_TRUE(report.ok) << report.reason;

  auto next = store_->AppendAudit(MakeAudit(a.id, "tenant.update"));
  ASSERT_TRUE(next.has_value()) << next.error().message;
  EXPECT_EQ(next->seq, first->seq + 1);
  EXPECT_EQ(next->chain_seq, first->chain_seq + 1);
  EXPECT_EQ(next->prev_hash, first->hash);
  report = audit::Verify(AllAudit());
  EXPECT_TRUE(report.ok) << report.reason;
  EXPECT_EQ(report.records, static_cast<int64_t>(before.size()) + 1);
  auto heads = store_->AuditHeads();
  ASSERT_TRUE(heads.has_value());
  std::map<std::string, std::pair<int64_t, std::string>> head_map(heads->begin(), heads->end());
  EXPECT_EQ(head_map[a.id], std::make_pair(next->chain_seq, next->hash));
}

INSTANTIATE_TEST_SUITE_P(Drivers, StoreTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

// Regression (issue 15, item 15): the SQLite database (password hashes, the
// audit trail) was created mode 0644, readable by every local user.
TEST(StoreOpenTest, SqliteDatabaseFileIsPrivateEvenIfItWasNot) {
  auto dir = std::filesystem::temp_directory_path() / ("atrium-mode-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (bool existed : {false, true}) {
    std::string path = (dir / (existed ? "old.db" : "new.db")).string();
    if (existed) {
      {
        auto created = Store::Open("sqlite://" + path);
        ASSERT_TRUE(created.has_value());
      }
      ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
    }
    auto store = Store::Open("sqlite://" + path);
    ASSERT_TRUE(store.has_value()) << store.error().message;
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600) << path;
  }
  std::filesystem::remove_all(dir);
}

TEST(StoreOpenTest, UnsupportedUrlIsInvalidArgument) {
  auto r = Store::Open("mysql://localhost/atrium");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace atrium
