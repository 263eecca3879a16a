// TenantService against a real SQLite store in a temp directory, with a
// ManualClock: validation, the suspend/resume/evict lifecycle, and that each
// change reaches the tenant's credentials at once.
#include "tenancy/tenant_service.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "crypto/ids.h"
#include "scheduling/scheduling_service.h"
#include "store/test_databases.h"
#include "support/result_matchers.h"

namespace atrium {
namespace {

// The store on `database`, and the identity and tenant services over it.
void OpenServices(testdb::TestDatabase& database, const Clock& clock, std::unique_ptr<Store>* store,
                  std::unique_ptr<IdentityService>* identity,
                  std::unique_ptr<TenantService>* tenants) {
  ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database, store));
  IdentityOptions options;
  options.fast_password_hashing = true;
  *identity = std::make_unique<IdentityService>(**store, clock, options);
  ASSERT_OK((*identity)->Init());
  *tenants = std::make_unique<TenantService>(**store, **identity, clock);
}

constexpr char kPassword[] = "correct horse battery";

class TenantServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    database_.Create(testdb::Backend::kSqlite);
    if (HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(OpenServices(database_, clock_, &store_, &identity_, &tenants_));
  }

  void TearDown() override {
    tenants_.reset();
    identity_.reset();
    store_.reset();
    database_.Drop();
  }

  static NewTenant Request(const std::string& name) {
    NewTenant req;
    req.name = name;
    return req;
  }

  Tenant MustCreate(const std::string& name) {
    auto t = tenants_->Create(Request(name));
    EXPECT_TRUE(t.has_value()) << name << ": " << t.error().message;
    return t.has_value() ? *t : Tenant{};
  }

  // A tenant-admin of `t` with an API key and a login session.
  struct Member {
    User user;
    std::string key;
    std::string token;
  };
  Member MustAddMember(const Tenant& t, const std::string& username) {
    TenantScope scope = TenantScope::Of(t.id);
    Principal admin;
    admin.tenant_id = t.id;
    admin.user_id = "usr_actor";
    admin.role = Role::kTenantAdmin;
    NewUser req;
    req.username = username;
    req.role = "tenant-admin";
    req.password = kPassword;
    Member m;
    auto user = identity_->CreateUser(admin, scope, req);
    EXPECT_TRUE(user.has_value()) << user.error().message;
    if (!user.has_value()) return m;
    m.user = *user;
    NewApiKey key_req;
    key_req.name = "ci";
    key_req.owner_user_id = m.user.id;
    auto key = identity_->CreateApiKey(admin, scope, key_req);
    EXPECT_TRUE(key.has_value()) << key.error().message;
    if (key.has_value()) m.key = key->second;
    auto login = identity_->Login(t.name, username, kPassword, "10.0.0.1");
    EXPECT_TRUE(login.has_value()) << login.error().message;
    if (login.has_value()) m.token = login->access_token;
    return m;
  }

  bool Authenticates(const std::string& credential) {
    return identity_->Authenticate(credential).has_value();
  }

  ManualClock clock_;
  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<IdentityService> identity_;
  std::unique_ptr<TenantService> tenants_;
};

TEST_F(TenantServiceTest, CreateFillsDefaultsAndStores) {
  NewTenant req = Request("acme");
  req.tier = "dedicated-gpu";
  req.regions = {"eu-west"};
  req.weight = 50;
  req.labels = {{"env", "prod"}};
  auto t = tenants_->Create(req);
  ASSERT_TRUE(t.has_value()) << t.error().message;
  EXPECT_TRUE(IsWellFormedId(t->id, "tn")) << t->id;
  EXPECT_EQ(t->display_name, "acme");
  EXPECT_EQ(t->state, "active");
  EXPECT_EQ(t->created_at, clock_.NowMillis());

  auto stored = tenants_->Get(t->id);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->name, "acme");
  EXPECT_EQ(stored->tier, "dedicated-gpu");
  EXPECT_EQ(stored->regions, std::vector<std::string>{"eu-west"});
  EXPECT_EQ(stored->weight, 50);
  EXPECT_EQ(stored->labels, req.labels);
  EXPECT_ERROR(tenants_->Get("tn_missing"), ErrorCode::kNotFound);
}

TEST_F(TenantServiceTest, CreateValidatesEveryField) {
  for (const std::string& name :
       {std::string(), std::string("Acme"), std::string("-acme"), std::string("ac me"),
        std::string("acme!"), std::string(64, 'a'), std::string("platform")}) {
    SCOPED_TRACE("name '" + name + "'");
    EXPECT_ERROR(tenants_->Create(Request(name)), ErrorCode::kInvalidArgument);
  }
  for (const char* tier : {"", "dedicated", "Shared", "gold"}) {
    NewTenant req = Request("acme");
    req.tier = tier;
    EXPECT_ERROR(tenants_->Create(req), ErrorCode::kInvalidArgument);
  }
  for (int64_t weight : {int64_t{0}, int64_t{-1}, int64_t{10001}}) {
    NewTenant req = Request("acme");
    req.weight = weight;
    EXPECT_ERROR(tenants_->Create(req), ErrorCode::kInvalidArgument);
  }
  NewTenant bad_region = Request("acme");
  bad_region.regions = {"eu-west", "EU West"};
  EXPECT_ERROR(tenants_->Create(bad_region), ErrorCode::kInvalidArgument);
  for (const std::string& key : {std::string(), std::string("Env"), std::string("a b")}) {
    NewTenant req = Request("acme");
    req.labels = {{key, "x"}};
    EXPECT_ERROR(tenants_->Create(req), ErrorCode::kInvalidArgument);
  }
  NewTenant long_value = Request("acme");
  long_value.labels = {{"env", std::string(256, 'v')}};
  EXPECT_ERROR(tenants_->Create(long_value), ErrorCode::kInvalidArgument);
  NewTenant too_many = Request("acme");
  for (int i = 0; i < 65; ++i) too_many.labels["l" + std::to_string(i)] = "v";
  EXPECT_ERROR(tenants_->Create(too_many), ErrorCode::kInvalidArgument);

  auto count = store_->CountTenants();
  ASSERT_TRUE(count.has_value());
  EXPECT_EQ(*count, 0) << "an invalid request stored a tenant";

  // The edges that are valid.
  NewTenant edges = Request(std::string(63, 'a'));
  edges.weight = 10000;
  for (int i = 0; i < 64; ++i) edges.labels["l" + std::to_string(i)] = std::string(255, 'v');
  EXPECT_OK(tenants_->Create(edges));
  NewTenant light = Request("light");
  light.weight = 1;
  light.tier = "dedicated-pool";
  EXPECT_OK(tenants_->Create(light));
}

TEST_F(TenantServiceTest, DuplicateNameIsAlreadyExists) {
  Tenant first = MustCreate("acme");
  EXPECT_ERROR(tenants_->Create(Request("acme")), ErrorCode::kAlreadyExists);
  auto count = store_->CountTenants();
  ASSERT_TRUE(count.has_value());
  EXPECT_EQ(*count, 1);
  EXPECT_EQ(store_->GetTenantByName("acme")->id, first.id);
}

TEST_F(TenantServiceTest, UpdateChangesOnlyWhatIsGiven) {
  NewTenant req = Request("acme");
  req.labels = {{"env", "prod"}};
  req.regions = {"eu-west"};
  auto created = tenants_->Create(req);
  ASSERT_TRUE(created.has_value());
  clock_.AdvanceSeconds(5);

  TenantChanges changes;
  changes.weight = 20;
  changes.labels = std::map<std::string, std::string>{{"team", "ml"}};
  auto updated = tenants_->Update(created->id, changes);
  ASSERT_TRUE(updated.has_value()) << updated.error().message;
  auto stored = tenants_->Get(created->id);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->weight, 20);
  EXPECT_EQ(stored->labels, (std::map<std::string, std::string>{{"team", "ml"}}));
  EXPECT_EQ(stored->regions, std::vector<std::string>{"eu-west"});
  EXPECT_EQ(stored->tier, "shared");
  EXPECT_EQ(stored->display_name, "acme");
  EXPECT_EQ(stored->updated_at, clock_.NowMillis());
  EXPECT_EQ(stored->created_at, created->created_at);
  auto by_label = tenants_->List({"", "env", "prod"}, {});
  ASSERT_TRUE(by_label.has_value());
  EXPECT_TRUE(by_label->items.empty()) << "old label still matches";

  TenantChanges more;
  more.display_name = "ACME Corp";
  more.tier = "dedicated-node";
  more.regions = std::vector<std::string>{"us-east", "us-west"};
  ASSERT_OK(tenants_->Update(created->id, more));
  stored = tenants_->Get(created->id);
  EXPECT_EQ(stored->display_name, "ACME Corp");
  EXPECT_EQ(stored->tier, "dedicated-node");
  EXPECT_EQ(stored->regions, (std::vector<std::string>{"us-east", "us-west"}));
  EXPECT_EQ(stored->weight, 20);

  // Invalid changes are refused and change nothing.
  TenantChanges bad_weight;
  bad_weight.weight = 0;
  bad_weight.display_name = "Changed";
  EXPECT_ERROR(tenants_->Update(created->id, bad_weight), ErrorCode::kInvalidArgument);
  TenantChanges bad_tier;
  bad_tier.tier = "gold";
  EXPECT_ERROR(tenants_->Update(created->id, bad_tier), ErrorCode::kInvalidArgument);
  TenantChanges empty_name;
  empty_name.display_name = "";
  EXPECT_ERROR(tenants_->Update(created->id, empty_name), ErrorCode::kInvalidArgument);
  TenantChanges bad_label;
  bad_label.labels = std::map<std::string, std::string>{{"Bad Key", "v"}};
  EXPECT_ERROR(tenants_->Update(created->id, bad_label), ErrorCode::kInvalidArgument);
  stored = tenants_->Get(created->id);
  EXPECT_EQ(stored->display_name, "ACME Corp");
  EXPECT_EQ(stored->weight, 20);

  EXPECT_ERROR(tenants_->Update("tn_missing", more), ErrorCode::kNotFound);
}

TEST_F(TenantServiceTest, ListValidatesTheStateFilter) {
  Tenant a = MustCreate("a");
  Tenant b = MustCreate("b");
  ASSERT_OK(tenants_->Suspend(b.id));
  auto suspended = tenants_->List({"suspended", "", ""}, {});
  ASSERT_TRUE(suspended.has_value());
  ASSERT_EQ(suspended->items.size(), 1u);
  EXPECT_EQ(suspended->items[0].id, b.id);
  auto all = tenants_->List({}, {});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->items.size(), 2u);
  EXPECT_ERROR(tenants_->List({"paused", "", ""}, {}), ErrorCode::kInvalidArgument);
}

TEST_F(TenantServiceTest, SuspendAndResumeAreIdempotentAndGuardTheirState) {
  Tenant t = MustCreate("acme");
  clock_.AdvanceSeconds(1);
  auto suspended = tenants_->Suspend(t.id);
  ASSERT_TRUE(suspended.has_value()) << suspended.error().message;
  EXPECT_EQ(suspended->state, "suspended");
  EXPECT_EQ(tenants_->Get(t.id)->state, "suspended");
  EXPECT_EQ(tenants_->Get(t.id)->updated_at, clock_.NowMillis());

  clock_.AdvanceSeconds(1);
  auto again = tenants_->Suspend(t.id);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->state, "suspended");
  EXPECT_EQ(tenants_->Get(t.id)->updated_at, clock_.NowMillis() - 1000)
      << "a repeated suspend wrote the row";

  auto resumed = tenants_->Resume(t.id);
  ASSERT_TRUE(resumed.has_value()) << resumed.error().message;
  EXPECT_EQ(resumed->state, "active");
  EXPECT_OK(tenants_->Resume(t.id));
  EXPECT_EQ(tenants_->Get(t.id)->state, "active");

  // A tenant being evicted can be neither suspended nor resumed nor updated.
  Tenant doomed = MustCreate("doomed");
  Tenant evicting = doomed;
  evicting.state = "evicting";
  ASSERT_OK(store_->UpdateTenant(evicting));
  EXPECT_ERROR(tenants_->Suspend(doomed.id), ErrorCode::kFailedPrecondition);
  EXPECT_ERROR(tenants_->Resume(doomed.id), ErrorCode::kFailedPrecondition);
  TenantChanges rename;
  rename.display_name = "x";
  EXPECT_ERROR(tenants_->Update(doomed.id, rename), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(tenants_->Get(doomed.id)->state, "evicting");

  EXPECT_ERROR(tenants_->Suspend("tn_missing"), ErrorCode::kNotFound);
  EXPECT_ERROR(tenants_->Resume("tn_missing"), ErrorCode::kNotFound);
}

TEST_F(TenantServiceTest, SuspensionStopsCredentialsAtOnceAndResumeRestoresThem) {
  Tenant acme = MustCreate("acme");
  Tenant globex = MustCreate("globex");
  Member alice = MustAddMember(acme, "alice");
  Member gina = MustAddMember(globex, "gina");
  ASSERT_TRUE(Authenticates(alice.key));  // now cached
  ASSERT_TRUE(Authenticates(alice.token));

  ASSERT_OK(tenants_->Suspend(acme.id));
  EXPECT_FALSE(Authenticates(alice.key));
  EXPECT_FALSE(Authenticates(alice.token));
  EXPECT_ERROR(identity_->Login("acme", "alice", kPassword, "10.0.0.1"),
               ErrorCode::kUnauthenticated);
  EXPECT_TRUE(Authenticates(gina.key));
  EXPECT_TRUE(Authenticates(gina.token));

  ASSERT_OK(tenants_->Resume(acme.id));
  EXPECT_TRUE(Authenticates(alice.key));
  EXPECT_TRUE(Authenticates(alice.token));
}

TEST_F(TenantServiceTest, EvictRemovesTheTenantAndItsCredentials) {
  Tenant acme = MustCreate("acme");
  Tenant globex = MustCreate("globex");
  Member alice = MustAddMember(acme, "alice");
  Member bob = MustAddMember(acme, "bob");
  Member gina = MustAddMember(globex, "gina");
  ASSERT_TRUE(Authenticates(alice.key));  // now cached
  ASSERT_TRUE(Authenticates(bob.token));

  auto summary = tenants_->Evict(acme.id);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->users, 2);
  EXPECT_EQ(summary->api_keys, 2);
  EXPECT_EQ(summary->sessions, 2);
  // Staff can still find it, as evicted at this time.
  auto evicted = store_->GetEvictedTenantForPlatform(acme.id);
  ASSERT_TRUE(evicted.has_value()) << evicted.error().message;
  EXPECT_EQ(evicted->state, "evicted");
  EXPECT_EQ(evicted->updated_at, clock_.NowMillis());

  EXPECT_ERROR(tenants_->Get(acme.id), ErrorCode::kNotFound);
  const TenantScope scope = TenantScope::Of(acme.id);
  auto users = store_->ListUsers(scope, {});
  ASSERT_TRUE(users.has_value());
  EXPECT_TRUE(users->items.empty());
  auto keys = store_->ListApiKeys(scope, "", {});
  ASSERT_TRUE(keys.has_value());
  EXPECT_TRUE(keys->items.empty());
  EXPECT_FALSE(Authenticates(alice.key));
  EXPECT_FALSE(Authenticates(alice.token));
  EXPECT_FALSE(Authenticates(bob.key));
  EXPECT_FALSE(Authenticates(bob.token));
  EXPECT_ERROR(identity_->Login("acme", "alice", kPassword, "10.0.0.1"),
               ErrorCode::kUnauthenticated);

  // The other tenant is untouched.
  EXPECT_TRUE(Authenticates(gina.key));
  EXPECT_TRUE(Authenticates(gina.token));
  EXPECT_OK(tenants_->Get(globex.id));

  EXPECT_ERROR(tenants_->Evict(acme.id), ErrorCode::kNotFound);

  // A new tenant under the old name is a different tenant and inherits
  // nothing: not the id, not the users, not the keys.
  clock_.AdvanceSeconds(1);
  Tenant reborn = MustCreate("acme");
  EXPECT_NE(reborn.id, acme.id);
  auto reborn_users = store_->ListUsers(TenantScope::Of(reborn.id), {});
  ASSERT_TRUE(reborn_users.has_value());
  EXPECT_TRUE(reborn_users->items.empty());
  EXPECT_FALSE(Authenticates(alice.key));
  EXPECT_ERROR(identity_->Login("acme", "alice", kPassword, "10.0.0.1"),
               ErrorCode::kUnauthenticated);
}

TEST_F(TenantServiceTest, EvictFinishesAnInterruptedEviction) {
  Tenant acme = MustCreate("acme");
  Member alice = MustAddMember(acme, "alice");
  Tenant stuck = acme;
  stuck.state = "evicting";  // as a crash after the first step leaves it
  ASSERT_OK(store_->UpdateTenant(stuck));
  identity_->ForgetTenant(acme.id);
  EXPECT_FALSE(Authenticates(alice.key));

  auto summary = tenants_->Evict(acme.id);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  EXPECT_EQ(summary->users, 1);
  EXPECT_ERROR(tenants_->Get(acme.id), ErrorCode::kNotFound);
}

// Regression (issue 16, item 4): Update read the whole tenant row, edited it
// and wrote it all back, so a PATCH of the weight racing a suspension could
// write "active" back over "suspended": the suspension answered 200, yet the
// tenant ended active and the scheduler kept placing its work (5 of 30
// trials through the API). Every trial here races weight updates on two
// threads against one suspension (then one thread against the
// resumption), with the real scheduling service as the observer, on SQLite
// and PostgreSQL; at the end the row must be suspended (active) and the
// scheduler must agree (it refuses (places) the tenant's new work).
class TenantRaceTest : public ::testing::TestWithParam<testdb::Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(OpenServices(database_, clock_, &store_, &identity_, &tenants_));
    scheduling::SchedulingOptions sched_options;
    sched_options.tick_ms = 0;
    sched_options.fleet_spec = "1xH100-80GBx8";
    scheduling_ = std::make_unique<scheduling::SchedulingService>(*store_, clock_, sched_options);
    ASSERT_OK(scheduling_->Start());
    tenants_->SetObserver(scheduling_.get());
  }

  void TearDown() override {
    if (tenants_) tenants_->SetObserver(nullptr);
    if (scheduling_) scheduling_->Stop();
    scheduling_.reset();
    tenants_.reset();
    identity_.reset();
    store_.reset();
    database_.Drop();
  }

  ManualClock clock_;
  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<IdentityService> identity_;
  std::unique_ptr<TenantService> tenants_;
  std::unique_ptr<scheduling::SchedulingService> scheduling_;
};

TEST_P(TenantRaceTest, SuspensionIsNeverOverwrittenByAConcurrentUpdate) {
  constexpr int kTrials = 30;
  constexpr int kUpdatesPerThread = 12;
  for (int trial = 0; trial < kTrials; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    NewTenant req;
    req.name = "race-" + std::to_string(trial);
    auto created = tenants_->Create(req);
    ASSERT_TRUE(created.has_value()) << created.error().message;
    const std::string id = created->id;
    ASSERT_OK(scheduling_->SetQuota({.actor = "test"}, id, "", {"H100-80GB", "gpu", 8000, 8000}));

    std::vector<std::string> failures;
    std::mutex failures_mu;
    auto note = [&](const std::string& what) {
      std::lock_guard<std::mutex> lock(failures_mu);
      failures.push_back(what);
    };
    auto updater = [&](int64_t base) {
      for (int k = 0; k < kUpdatesPerThread; ++k) {
        TenantChanges changes;
        changes.weight = base + k;
        if (auto r = tenants_->Update(id, changes); !r) note("update: " + r.error().message);
      }
    };
    std::thread a(updater, 10);
    std::thread b(updater, 100);
    Result<Tenant> suspended = tenants_->Suspend(id);
    a.join();
    b.join();
    ASSERT_TRUE(suspended.has_value()) << suspended.error().message;
    EXPECT_EQ(suspended->state, "suspended");
    EXPECT_TRUE(failures.empty()) << failures.front();

    auto row = store_->GetTenant(id);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->state, "suspended") << "the suspension was overwritten";
    // The last weight written by either thread is the one stored.
    EXPECT_TRUE(row->weight == 10 + kUpdatesPerThread - 1 ||
                row->weight == 100 + kUpdatesPerThread - 1)
        << row->weight;
    // The scheduler holds the row as written: suspended, so it refuses the
    // tenant's new work.
    sched::AllocationRequest request;
    request.model = "H100-80GB";
    request.gpus = 1;
    auto submitted = scheduling_->Submit({.actor = "test"}, id, "usr_test", request);
    ASSERT_FALSE(submitted.has_value()) << "the scheduler accepted a suspended tenant's work";
    EXPECT_NE(submitted.error().message.find("is suspended"), std::string::npos)
        << submitted.error().message;

    // And the other way: a resumption racing updates is never undone either.
    std::thread c(updater, 200);
    Result<Tenant> resumed = tenants_->Resume(id);
    c.join();
    ASSERT_TRUE(resumed.has_value()) << resumed.error().message;
    row = store_->GetTenant(id);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->state, "active") << "the resumption was overwritten";
    submitted = scheduling_->Submit({.actor = "test"}, id, "usr_test", request);
    ASSERT_TRUE(submitted.has_value()) << submitted.error().message;
    EXPECT_EQ(submitted->state, "running");
    ASSERT_OK(scheduling_->Release({.actor = "test"}, id, submitted->id));
  }
}

// Regression (issue 16, item 4): a write over a stale read is refused by the
// store (compare-and-set on the row's version), never applied.
TEST_P(TenantRaceTest, StoreRefusesAWriteOverAStaleRead) {
  NewTenant req;
  req.name = "stale";
  auto created = tenants_->Create(req);
  ASSERT_TRUE(created.has_value());
  auto first = store_->GetTenant(created->id);
  ASSERT_TRUE(first.has_value());
  Tenant suspended = *first;
  suspended.state = "suspended";
  auto written = store_->UpdateTenant(suspended);
  ASSERT_TRUE(written.has_value());
  EXPECT_TRUE(*written);
  Tenant stale = *first;  // read before the suspension
  stale.weight = 7;
  written = store_->UpdateTenant(stale);
  ASSERT_TRUE(written.has_value());
  EXPECT_FALSE(*written);
  auto row = store_->GetTenant(created->id);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->state, "suspended");
  EXPECT_EQ(row->weight, 1);
  EXPECT_EQ(row->version, first->version + 1);
}

INSTANTIATE_TEST_SUITE_P(Drivers, TenantRaceTest,
                         ::testing::Values(testdb::Backend::kSqlite, testdb::Backend::kPostgres),
                         testdb::BackendName);

TEST(TenantVocabularyTest, TiersAndStates) {
  for (const char* tier : {"shared", "dedicated-gpu", "dedicated-node", "dedicated-pool"}) {
    EXPECT_TRUE(IsValidTier(tier)) << tier;
  }
  for (const char* tier : {"", "dedicated", "SHARED", "shared "}) {
    EXPECT_FALSE(IsValidTier(tier)) << tier;
  }
  for (const char* state : {"active", "suspended", "evicting"}) {
    EXPECT_TRUE(IsValidTenantState(state)) << state;
  }
  for (const char* state : {"", "evicted", "Active"}) {
    EXPECT_FALSE(IsValidTenantState(state)) << state;
  }
}

}  // namespace
}  // namespace atrium
