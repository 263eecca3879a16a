// The scheduler's rows — fleet, quotas, projects, allocations — and
// CommitScheduling, on SQLite and PostgreSQL (see test_databases.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "audit/chain.h"
#include "store/store.h"
#include "store/test_databases.h"
#include "support/store_rows.h"

namespace atrium {
namespace {

using testdb::Backend;
using testdb::BackendName;

class SchedulingStoreTest : public ::testing::TestWithParam<Backend> {
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

  Tenant MakeTenant(const std::string& id, const std::string& name) {
    const Tenant t = testing_rows::ActiveTenant(id, name);
    EXPECT_TRUE(store_->CreateTenant(t).has_value());
    return t;
  }

  static FleetRecord SmallFleet(const std::string& spec) {
    FleetRecord f;
    f.spec = spec;
    f.updated_at = 5;
    f.sites = {{"local-1", "local", 0}};
    f.racks = {{"rack-0", "local-1", 10'000}};
    f.pools = {{"default", "local", "local-1", {"batch", "interactive"}, "", {}},
               {"private", "local", "local-1", {"sensitive"}, "tn_a", {"tn_a"}}};
    FleetNodeRecord n;
    n.name = "h100-80gb-0";
    n.pool = "default";
    n.rack = "rack-0";
    n.cpu_milli = 224'000;
    n.memory_mib = 2'097'152;
    n.gpu_model = "H100-80GB";
    for (int i = 0; i < 4; ++i) n.gpus.push_back({i, "H100-80GB", 81'920, i == 3, i != 2, false});
    n.nvlink_groups = {{0, 1, 2, 3}};
    n.idle_power_watts = 1200;
    n.driver_version = "550.54.15";
    n.cuda_version = "12.4";
    f.nodes.push_back(n);
    n.name = "h100-80gb-1";
    n.driver_version = "";  // unknown: kept as unknown
    n.cuda_version = "";
    n.cordoned = true;
    n.draining = true;
    f.nodes.push_back(n);
    return f;
  }

  static AllocationRecord Allocation(const std::string& id, const std::string& tenant, int64_t seq,
                                     const std::string& state) {
    AllocationRecord a;
    a.id = id;
    a.tenant_id = tenant;
    a.project = "research";
    a.kind = "gpu";
    a.priority = "batch";
    a.model = "H100-80GB";
    a.gpus = 2;
    a.nodes = 1;
    a.state = state;
    a.seq = seq;
    a.submitted_ms = 100 + seq;
    if (state == "running") {
      a.placed_ms = 200 + seq;
      a.placement = {{"h100-80gb-0", {0, 1}}};
    }
    a.charge_milli = 2000;
    a.reason = "placed";
    a.created_by = "usr_" + id;
    a.updated_at = 7;
    // The requirements it was asked with survive a restart.
    a.min_driver_version = "535.104.05";
    a.min_cuda_version = "12.2";
    a.required_gpu_models = {"H100-80GB", "H200-141GB"};
    return a;
  }

  AuditRecord Decision(const std::string& tenant, const std::string& id) {
    AuditRecord r;
    r.time = 9;
    r.actor = "system:scheduler";
    r.tenant_id = tenant;
    r.action = "scheduler.placed";
    r.target = "tenant/" + tenant + "/allocation/" + id;
    r.outcome = "allowed";
    return r;
  }

  int64_t Count(const std::string& sql) {
    auto r = store_->database().Exec(sql);
    EXPECT_TRUE(r.has_value()) << sql << ": " << r.error().message;
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  testdb::TestDatabase database_;
  std::unique_ptr<Store> store_;
};

TEST_P(SchedulingStoreTest, FleetRoundTripsAndIsReplacedWhole) {
  auto none = store_->LoadFleet();
  ASSERT_TRUE(none.has_value()) << none.error().message;
  EXPECT_FALSE(none->has_value());

  FleetRecord fleet = SmallFleet("2xH100-80GBx4");
  ASSERT_TRUE(store_->ReplaceFleet(fleet).has_value());
  auto loaded = store_->LoadFleet();
  ASSERT_TRUE(loaded.has_value() && loaded->has_value());
  EXPECT_EQ(**loaded, fleet);

  FleetRecord smaller = SmallFleet("1xH100-80GBx4");
  smaller.nodes.pop_back();
  smaller.pools.pop_back();
  ASSERT_TRUE(store_->ReplaceFleet(smaller).has_value());
  loaded = store_->LoadFleet();
  ASSERT_TRUE(loaded.has_value() && loaded->has_value());
  EXPECT_EQ(**loaded, smaller);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM fleet_gpus"), 4);
}

TEST_P(SchedulingStoreTest, CommitWritesRowsAndAuditTogether) {
  MakeTenant("tn_a", "a");
  MakeTenant("tn_b", "b");
  ASSERT_TRUE(store_->ReplaceFleet(SmallFleet("s")).has_value());

  SchedulingCommit commit;
  commit.new_projects = {{"tn_a", "research", 1}};
  commit.quotas = {{"tn_a", "", "H100-80GB", "gpu", 4000, 8000, 1},
                   {"tn_a", "research", "H100-80GB", "gpu", 2000, 4000, 1},
                   {"tn_b", "", "L40S", "share", 500, 1000, 1}};
  commit.allocations = {Allocation("alloc_1", "tn_a", 1, "running"),
                        Allocation("alloc_2", "tn_a", 2, "pending"),
                        Allocation("alloc_3", "tn_b", 3, "running")};
  FleetNodeRecord flags = SmallFleet("s").nodes[0];
  flags.cordoned = true;
  flags.gpus[2].healthy = true;
  commit.node_flags = {flags};
  commit.audit = {Decision("tn_a", "alloc_1"), Decision("tn_b", "alloc_3")};
  auto committed = store_->CommitScheduling(commit);
  ASSERT_TRUE(committed.has_value()) << committed.error().message;

  // Tenant-scoped reads see only the scope's rows.
  auto quotas = store_->ListQuotas(TenantScope::Of("tn_a"));
  ASSERT_TRUE(quotas.has_value());
  ASSERT_EQ(quotas->size(), 2u);
  EXPECT_EQ((*quotas)[0].project, "");
  EXPECT_EQ((*quotas)[1].project, "research");
  auto projects = store_->ListProjects(TenantScope::Of("tn_b"));
  ASSERT_TRUE(projects.has_value());
  EXPECT_TRUE(projects->empty());
  auto got = store_->GetAllocation(TenantScope::Of("tn_a"), "alloc_1");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, commit.allocations[0]);
  auto cross = store_->GetAllocation(TenantScope::Of("tn_b"), "alloc_1");
  ASSERT_FALSE(cross.has_value());
  EXPECT_EQ(cross.error().code, ErrorCode::kNotFound);
  auto platform = store_->GetAllocationForPlatform("alloc_3");
  ASSERT_TRUE(platform.has_value());
  EXPECT_EQ(platform->tenant_id, "tn_b");

  auto page = store_->ListAllocations(TenantScope::Of("tn_a"), {.state = "running"}, {});
  ASSERT_TRUE(page.has_value());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].id, "alloc_1");
  auto all = store_->ListAllocationsForPlatform({}, {.after = "", .limit = 2});
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->items.size(), 2u);
  EXPECT_EQ(all->next_cursor, "alloc_2");

  // The node flags changed; the audit records landed in their chains.
  auto fleet = store_->LoadFleet();
  ASSERT_TRUE(fleet.has_value() && fleet->has_value());
  EXPECT_TRUE((**fleet).nodes[0].cordoned);
  EXPECT_TRUE((**fleet).nodes[0].gpus[2].healthy);
  auto trail = store_->ListAudit(std::string("tn_b"), {});
  ASSERT_TRUE(trail.has_value());
  ASSERT_EQ(trail->items.size(), 1u);
  EXPECT_EQ(trail->items[0].action, "scheduler.placed");
  EXPECT_TRUE(audit::Verify(trail->items).ok);

  // An update keeps who asked and what was asked; only scheduler fields move.
  AllocationRecord ended = commit.allocations[1];
  ended.state = "released";
  ended.ended_ms = 50;
  ended.created_by = "someone-else";
  ended.gpus = 8;
  SchedulingCommit second;
  second.allocations = {ended};
  // A project row of 0/0 is kept (it denies the class to the project);
  // removed_quotas removes a row.
  second.quotas = {{"tn_a", "research", "H100-80GB", "gpu", 0, 0, 2}};
  second.removed_quotas = {{"tn_a", "research", "H100-80GB", "mig", 0, 0, 2}};
  ASSERT_TRUE(store_->CommitScheduling(second).has_value());
  got = store_->GetAllocation(TenantScope::Of("tn_a"), "alloc_2");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->state, "released");
  EXPECT_EQ(got->ended_ms, 50);
  EXPECT_EQ(got->created_by, "usr_alloc_2");
  EXPECT_EQ(got->gpus, 2);
  auto held = store_->ListHeldAllocationsForScheduler();
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].id, "alloc_1");
  EXPECT_EQ((*held)[1].id, "alloc_3");
  // The placement policy's request mix: the newest, ended ones too, oldest first.
  auto recent = store_->ListRecentAllocationsForScheduler(2);
  ASSERT_TRUE(recent.has_value());
  ASSERT_EQ(recent->size(), 2u);
  EXPECT_EQ((*recent)[0].id, "alloc_2");
  EXPECT_EQ((*recent)[1].id, "alloc_3");
  EXPECT_EQ(Count("SELECT COUNT(*) FROM quotas WHERE project = 'research' AND kind = 'gpu' AND "
                  "guarantee_milli = 0 AND limit_milli = 0"),
            1);
  SchedulingCommit third;
  third.removed_quotas = {{"tn_a", "research", "H100-80GB", "gpu", 0, 0, 3}};
  ASSERT_TRUE(store_->CommitScheduling(third).has_value());
  EXPECT_EQ(Count("SELECT COUNT(*) FROM quotas WHERE project = 'research'"), 0);
}

TEST_P(SchedulingStoreTest, AFailedCommitChangesNothing) {
  MakeTenant("tn_a", "a");
  SchedulingCommit first;
  first.new_projects = {{"tn_a", "research", 1}};
  ASSERT_TRUE(store_->CommitScheduling(first).has_value());

  SchedulingCommit bad;
  bad.allocations = {Allocation("alloc_1", "tn_a", 1, "pending")};
  bad.quotas = {{"tn_a", "", "H100-80GB", "gpu", 1000, 1000, 1}};
  bad.new_projects = {{"tn_a", "research", 2}};  // taken
  bad.audit = {Decision("tn_a", "alloc_1")};
  auto failed = store_->CommitScheduling(bad);
  ASSERT_FALSE(failed.has_value());
  EXPECT_EQ(failed.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM allocations"), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM quotas"), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM audit_log"), 0);

  SchedulingCommit missing;
  missing.deleted_projects = {{"tn_a", "nope"}};
  auto gone = store_->CommitScheduling(missing);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().code, ErrorCode::kNotFound);
}

TEST_P(SchedulingStoreTest, ScrubHoldsAreUpsertedListedAndDeletedWithTheCommit) {
  GpuScrubRecord whole{"n1", 3, "alloc_1", "tn_a", "gpu",       "H100-80GB", "",
                       -1,   0, 0,         10,     "scrubbing", ""};
  GpuScrubRecord share{"n1", 3,   "alloc_2", "tn_b", "share",     "H100-80GB", "",
                       -1,   250, 4096,      11,     "scrubbing", ""};
  GpuScrubRecord mig{"n0", 1, "alloc_3", "tn_a", "mig",       "H100-80GB", "3g.40gb",
                     4,    0, 0,         12,     "scrubbing", ""};
  SchedulingCommit first;
  first.scrubs = {whole, share, mig};
  ASSERT_TRUE(store_->CommitScheduling(first).has_value());
  auto listed = store_->ListGpuScrubsForScheduler();
  ASSERT_TRUE(listed.has_value()) << listed.error().message;
  EXPECT_EQ(*listed, (std::vector<GpuScrubRecord>{mig, whole, share}));

  // A failure is written over the same key; a finished one goes.
  GpuScrubRecord failed = whole;
  failed.state = "failed";
  failed.reason = "scrub failed: exit status 1";
  SchedulingCommit second;
  second.scrubs = {failed};
  second.finished_scrubs = {share, mig};
  ASSERT_TRUE(store_->CommitScheduling(second).has_value());
  listed = store_->ListGpuScrubsForScheduler();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(*listed, std::vector<GpuScrubRecord>{failed});

  // Nothing of a commit that fails is kept.
  SchedulingCommit bad;
  bad.finished_scrubs = {failed};
  bad.deleted_projects = {{"tn_a", "nope"}};
  ASSERT_FALSE(store_->CommitScheduling(bad).has_value());
  listed = store_->ListGpuScrubsForScheduler();
  ASSERT_TRUE(listed.has_value());
  EXPECT_EQ(*listed, std::vector<GpuScrubRecord>{failed});
}

TEST_P(SchedulingStoreTest, EvictionRemovesTheTenantsQuotasButKeepsItsAllocationHistory) {
  MakeTenant("tn_a", "a");
  MakeTenant("tn_b", "b");
  SchedulingCommit commit;
  commit.new_projects = {{"tn_a", "research", 1}, {"tn_b", "research", 1}};
  commit.quotas = {{"tn_a", "", "H100-80GB", "gpu", 4000, 8000, 1},
                   {"tn_b", "", "H100-80GB", "gpu", 4000, 8000, 1}};
  commit.allocations = {Allocation("alloc_1", "tn_a", 1, "running"),
                        Allocation("alloc_2", "tn_b", 2, "running")};
  ASSERT_TRUE(store_->CommitScheduling(commit).has_value());
  auto summary = store_->DeleteTenantAndData("tn_a", /*evicted_at=*/77);
  ASSERT_TRUE(summary.has_value()) << summary.error().message;
  // The allocation stays (it used to be deleted), ended: no restart may
  // restore work of a tenant that no longer exists.
  EXPECT_EQ(summary->allocations_kept, 1);
  auto kept = store_->GetAllocation(TenantScope::Of("tn_a"), "alloc_1");
  ASSERT_TRUE(kept.has_value()) << kept.error().message;
  EXPECT_EQ(kept->state, "released");
  EXPECT_EQ(kept->ended_ms, 77);
  auto held = store_->ListHeldAllocationsForScheduler();
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].id, "alloc_2");
  EXPECT_EQ(Count("SELECT COUNT(*) FROM quotas WHERE tenant_id = 'tn_a'"), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM projects WHERE tenant_id = 'tn_a'"), 0);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM allocations"), 2);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM quotas"), 1);
  EXPECT_EQ(Count("SELECT COUNT(*) FROM projects"), 1);
}

INSTANTIATE_TEST_SUITE_P(Drivers, SchedulingStoreTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium
