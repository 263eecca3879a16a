// SchedulingService over a real store: decisions persisted and audited,
// restart restores the same placements, the stored fleet against a new
// spec, tenant lifecycle reaching the scheduler, and time moved by hand
// (ManualClock; the timer thread is off and Tick runs the pass).
#include "scheduling/scheduling_service.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "capacity/fleet_spec.h"
#include "common/clock.h"
#include "crypto/ids.h"
#include "scheduling/codec.h"
#include "store/fault_injecting_connection.h"
#include "store/test_databases.h"
#include "support/store_rows.h"

namespace atrium::scheduling {
namespace {

using testdb::Backend;
using testdb::BackendName;

constexpr char kFleet[] = "2xH100-80GBx8,1xA100-80GBx8,2xL40Sx4";

sched::AllocationRequest Gpus(int gpus, sched::Priority priority = sched::Priority::kBatch) {
  sched::AllocationRequest r;
  r.kind = sched::AllocationKind::kGpu;
  r.model = "H100-80GB";
  r.gpus = gpus;
  r.priority = priority;
  return r;
}

class SchedulingServiceTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    database_.Create(GetParam());
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_));
    ASSERT_NO_FATAL_FAILURE(StartService(kFleet));
    tenant_a_ = MakeTenant("tn_a", "acme");
    tenant_b_ = MakeTenant("tn_b", "bolt");
  }
  void TearDown() override {
    service_.reset();
    store_.reset();
    database_.Drop();
  }

  void StartService(const std::string& spec) {
    service_.reset();
    SchedulingOptions o;
    o.fleet_spec = spec;
    o.tick_ms = 0;
    o.grace_ms = 10'000;
    service_ = std::make_unique<SchedulingService>(*store_, clock_, o);
    auto started = service_->Start();
    ASSERT_TRUE(started.has_value()) << started.error().message;
  }

  Status TryStart(const std::string& spec) {
    service_.reset();
    SchedulingOptions o;
    o.fleet_spec = spec;
    o.tick_ms = 0;
    service_ = std::make_unique<SchedulingService>(*store_, clock_, o);
    return service_->Start();
  }

  Tenant MakeTenant(const std::string& id, const std::string& name) {
    const Tenant t = testing_rows::ActiveTenant(id, name, clock_.NowMillis());
    EXPECT_TRUE(store_->CreateTenant(t).has_value());
    service_->TenantChanged(t);
    return t;
  }

  void SetQuota(const std::string& tenant, const std::string& model, const std::string& kind,
                int64_t guarantee, int64_t limit) {
    auto set = service_->SetQuota(by_, tenant, "", {model, kind, guarantee, limit});
    ASSERT_TRUE(set.has_value()) << set.error().message;
  }

  AllocationRecord Submit(const std::string& tenant, sched::AllocationRequest r) {
    auto a = service_->Submit(by_, tenant, "usr_1", std::move(r));
    EXPECT_TRUE(a.has_value()) << a.error().message;
    return a.has_value() ? *a : AllocationRecord{};
  }

  // Who holds what on every GPU, as the platform sees it.
  std::map<std::string, std::string> Holdings() {
    std::map<std::string, std::string> out;
    auto page = service_->Nodes("", {.limit = 1000});
    for (const auto& n : page.items) {
      for (const auto& g : n.gpus) {
        std::string who;
        for (const auto& u : g.uses) {
          who += u.allocation_id + "/" + std::to_string(u.milli) + "/" + u.mig_profile + "@" +
                 std::to_string(u.mig_start) + " ";
        }
        out[n.name + ":" + std::to_string(g.index)] = who;
      }
    }
    return out;
  }

  std::vector<AuditRecord> SchedulerAudit() {
    std::vector<AuditRecord> out;
    auto page = store_->ListAudit(std::nullopt, {.after = "", .limit = 1000});
    EXPECT_TRUE(page.has_value());
    for (const auto& r : page->items) {
      if (r.action.rfind("scheduler.", 0) == 0) out.push_back(r);
    }
    return out;
  }

  testdb::TestDatabase database_;
  ManualClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<SchedulingService> service_;
  Tenant tenant_a_, tenant_b_;
  RequestOrigin by_{.actor = "user:usr_1", .actor_role = "tenant-admin", .request_id = "req-1"};
};

// The job service records an allocation's id before submitting it, so a
// crash in between is mended by submitting again with that id: the id is
// kept, and a second allocation with it, held or ended, is refused.
TEST_P(SchedulingServiceTest, AnIdChosenUpFrontIsKeptAndNeverReused) {
  SetQuota("tn_a", "H100-80GB", "gpu", 8000, 8000);
  sched::AllocationRequest r = Gpus(1);
  r.id = NewId("alloc", clock_);
  auto a = service_->Submit(by_, "tn_a", "usr_1", r);
  ASSERT_TRUE(a.has_value()) << a.error().message;
  EXPECT_EQ(a->id, r.id);
  auto again = service_->Submit(by_, "tn_a", "usr_1", r);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
  ASSERT_TRUE(service_->Release(by_, "tn_a", r.id).has_value());
  auto ended = service_->Submit(by_, "tn_a", "usr_1", r);
  ASSERT_FALSE(ended.has_value());
  EXPECT_EQ(ended.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(store_->GetAllocation(TenantScope::Of("tn_a"), r.id)->state, "released");
  r.id = "alloc_../../x";
  EXPECT_EQ(service_->Submit(by_, "tn_a", "usr_1", r).error().code, ErrorCode::kInvalidArgument);
}

// The job service is told, after each commit, which allocations changed:
// the one a submission placed, then on its release both it and the queued
// one the release let in (placed by the same pass).
TEST_P(SchedulingServiceTest, ListenersHearWhichAllocationsEachCommitChanged) {
  SetQuota("tn_a", "H100-80GB", "gpu", 8'000, 8'000);  // the second waits for the first
  std::vector<std::vector<std::string>> heard;
  service_->SetAllocationsChanged(
      [&](const std::vector<std::string>& ids) { heard.push_back(ids); });
  AllocationRecord first = Submit("tn_a", Gpus(8));
  ASSERT_EQ(first.state, "running");
  AllocationRecord queued = Submit("tn_a", Gpus(8));
  ASSERT_EQ(queued.state, "pending");
  ASSERT_EQ(heard.size(), 2u);
  EXPECT_EQ(heard[0], (std::vector<std::string>{first.id}));
  EXPECT_EQ(heard[1], (std::vector<std::string>{queued.id}));
  heard.clear();
  ASSERT_TRUE(service_->Release(by_, "tn_a", first.id).has_value());
  std::set<std::string> changed;
  for (const auto& ids : heard) changed.insert(ids.begin(), ids.end());
  EXPECT_TRUE(changed.contains(first.id));
  EXPECT_TRUE(changed.contains(queued.id));
  auto placed = store_->GetAllocation(TenantScope::Of("tn_a"), queued.id);
  ASSERT_TRUE(placed.has_value());
  EXPECT_EQ(placed->state, "running");
  service_->SetAllocationsChanged(nullptr);
  heard.clear();
  ASSERT_TRUE(service_->Release(by_, "tn_a", queued.id).has_value());
  EXPECT_TRUE(heard.empty());
}

TEST_P(SchedulingServiceTest, EveryKindIsPlacedPersistedAndAudited) {
  SetQuota("tn_a", "H100-80GB", "gpu", 16'000, 16'000);
  SetQuota("tn_a", "A100-80GB", "mig", 1000, 1000);
  SetQuota("tn_a", "L40S", "share", 1000, 1000);
  SetQuota("tn_a", "L40S", "node", 4000, 4000);
  AllocationRecord gpu = Submit("tn_a", Gpus(2));
  sched::AllocationRequest gang = Gpus(4);
  gang.nodes = 2;
  AllocationRecord g = Submit("tn_a", gang);
  sched::AllocationRequest mig;
  mig.kind = sched::AllocationKind::kMig;
  mig.model = "A100-80GB";
  mig.mig_profile = "3g.40gb";
  AllocationRecord m = Submit("tn_a", mig);
  sched::AllocationRequest share;
  share.kind = sched::AllocationKind::kShare;
  share.model = "L40S";
  share.milli = 250;
  share.mem_cap_mib = 8192;
  AllocationRecord s = Submit("tn_a", share);
  sched::AllocationRequest node;
  node.kind = sched::AllocationKind::kNode;
  node.model = "L40S";
  node.gpus = 0;  // the model's node size
  AllocationRecord n = Submit("tn_a", node);
  for (const auto& a : {gpu, g, m, s, n}) {
    EXPECT_EQ(a.state, "running") << a.id << " " << a.reason;
    EXPECT_EQ(a.created_by, "usr_1");
  }
  EXPECT_EQ(g.placement.size(), 2u);
  EXPECT_GE(m.mig_start, 0);
  // One audit record per decision, as the caller, in the tenant's chain.
  auto audit = SchedulerAudit();
  ASSERT_EQ(audit.size(), 10u);  // queued + placed for each
  for (const auto& r : audit) {
    EXPECT_EQ(r.actor, "user:usr_1");
    EXPECT_EQ(r.tenant_id, "tn_a");
    EXPECT_EQ(r.request_id, "req-1");
  }
}

// Issue 15, item 5: a reclaim told each tenant about the other. The
// victim's stored reason named the reclaiming allocation and tenant, the
// reclaimer's explanation listed the victim's ids, and the victim's audit
// chain got the reclaimer's request id and client address.
TEST_P(SchedulingServiceTest, AReclaimTellsNeitherTenantTheOthersIdsOrAddress) {
  SetQuota("tn_a", "H100-80GB", "gpu", 8000, 8000);
  SetQuota("tn_b", "H100-80GB", "gpu", 0, 16'000);
  RequestOrigin by_b{.actor = "user:usr_b", .request_id = "req-b", .source = "10.0.0.2"};
  RequestOrigin by_a{.actor = "user:usr_a", .request_id = "req-a", .source = "10.0.0.1"};
  std::vector<AllocationRecord> borrowed;
  for (int i = 0; i < 2; ++i) {
    auto b = service_->Submit(by_b, "tn_b", "usr_b", Gpus(8, sched::Priority::kPreemptible));
    ASSERT_TRUE(b.has_value()) << b.error().message;
    ASSERT_EQ(b->state, "running");
    borrowed.push_back(*b);
  }
  auto reclaimer = service_->Submit(by_a, "tn_a", "usr_a", Gpus(8, sched::Priority::kInteractive));
  ASSERT_TRUE(reclaimer.has_value()) << reclaimer.error().message;
  ASSERT_EQ(reclaimer->state, "pending");
  const std::string& a_id = reclaimer->id;

  std::string victim;
  for (const auto& b : borrowed) {
    auto row = store_->GetAllocation(TenantScope::Of("tn_b"), b.id);
    ASSERT_TRUE(row.has_value());
    if (row->state != "preempting") continue;
    victim = b.id;
    EXPECT_EQ(row->reason.find(a_id), std::string::npos) << row->reason;
    EXPECT_EQ(row->reason.find("tn_a"), std::string::npos) << row->reason;
    EXPECT_NE(row->reason.find("another tenant's guarantee"), std::string::npos) << row->reason;
    EXPECT_EQ(row->preempted_for, a_id);  // kept for restore and for staff
  }
  ASSERT_FALSE(victim.empty());

  auto a_why = service_->Explain("tn_a", a_id);
  ASSERT_TRUE(a_why.has_value());
  EXPECT_EQ(a_why->find(victim), std::string::npos) << *a_why;
  EXPECT_NE(a_why->find("waits for reclaim of borrowed capacity"), std::string::npos) << *a_why;
  auto b_why = service_->Explain("tn_b", victim);
  ASSERT_TRUE(b_why.has_value());
  EXPECT_EQ(b_why->find(a_id), std::string::npos) << *b_why;
  auto staff_why = service_->Explain("tn_a", a_id, sched::Scheduler::Audience::kStaff);
  ASSERT_TRUE(staff_why.has_value());
  EXPECT_NE(staff_why->find(victim), std::string::npos) << *staff_why;

  clock_.AdvanceMillis(10'000);
  ASSERT_TRUE(service_->Tick().has_value());
  auto ended = store_->GetAllocation(TenantScope::Of("tn_b"), victim);
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->state, "preempted");
  EXPECT_EQ(ended->reason.find(a_id), std::string::npos) << ended->reason;

  // Each chain holds only its own tenant's request ids and addresses.
  int b_records = 0;
  for (const auto& r : SchedulerAudit()) {
    if (r.tenant_id == "tn_b") {
      ++b_records;
      EXPECT_NE(r.request_id, "req-a") << r.action << " " << r.target;
      EXPECT_NE(r.source, "10.0.0.1") << r.action << " " << r.target;
    } else if (r.target.find(a_id) != std::string::npos && r.actor == "user:usr_a") {
      EXPECT_EQ(r.request_id, "req-a");
      EXPECT_EQ(r.source, "10.0.0.1");
    }
  }
  EXPECT_GE(b_records, 6);  // queued + placed twice, preemption scheduled, preempted
}

TEST_P(SchedulingServiceTest, ARestartRestoresTheSamePlacements) {
  SetQuota("tn_a", "H100-80GB", "gpu", 12'000, 12'000);
  SetQuota("tn_a", "A100-80GB", "mig", 2000, 2000);
  Submit("tn_a", Gpus(2));
  Submit("tn_a", Gpus(3));
  sched::AllocationRequest mig;
  mig.kind = sched::AllocationKind::kMig;
  mig.model = "A100-80GB";
  mig.mig_profile = "1g.10gb";
  Submit("tn_a", mig);
  Submit("tn_a", mig);
  AllocationRecord queued = Submit("tn_a", Gpus(8));  // over the quota: waits
  EXPECT_EQ(queued.state, "pending");
  auto before = Holdings();
  auto why_before = service_->Explain("tn_a", queued.id);
  ASSERT_TRUE(why_before.has_value());
  EXPECT_TRUE(service_->TargetWorkload().empty()) << "no history at start, too few since";

  ASSERT_NO_FATAL_FAILURE(StartService(""));  // no spec: the stored fleet
  EXPECT_EQ(service_->fleet_spec(), kFleet);
  // The placement policy now aims at the stored requests: 2, 3 and 8 whole
  // GPUs (MIG requests are placed by slot geometry, not scored).
  EXPECT_EQ(service_->TargetWorkload().size(), 3u);
  EXPECT_EQ(Holdings(), before);
  auto why_after = service_->Explain("tn_a", queued.id);
  ASSERT_TRUE(why_after.has_value());
  EXPECT_EQ(*why_after, *why_before);

  // And the restored scheduler keeps scheduling: the next one fits beside.
  AllocationRecord next = Submit("tn_a", Gpus(1));
  EXPECT_EQ(next.state, "running");
}

// Environment templates' node requirements: what no node of the fleet can
// meet is refused at submit naming what is missing; a queued request keeps
// its requirements in the store and across a restart, and nodes keep their
// driver and CUDA versions in the stored fleet.
TEST_P(SchedulingServiceTest, NodeRequirementsAreRefusedStoredAndRestored) {
  SetQuota("tn_a", "H100-80GB", "gpu", 8000, 8000);
  sched::AllocationRequest too_new = Gpus(1);
  too_new.requirements.min_driver_version = "560";
  auto refused = service_->Submit(by_, "tn_a", "usr_1", too_new);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message.find("no node has driver >= 560 (newest: 550.54.15)"),
            std::string::npos)
      << refused.error().message;

  sched::AllocationRequest needs = Gpus(8);
  needs.requirements = {"535.104.05", "12.4", {"H100-80GB"}};
  AllocationRecord first = Submit("tn_a", needs);
  EXPECT_EQ(first.state, "running");
  AllocationRecord queued = Submit("tn_a", needs);  // over the quota: waits
  EXPECT_EQ(queued.state, "pending");
  EXPECT_EQ(queued.min_driver_version, "535.104.05");

  ASSERT_NO_FATAL_FAILURE(StartService(""));  // the stored fleet
  auto fleet = store_->LoadFleet();
  ASSERT_TRUE(fleet.has_value() && fleet->has_value());
  EXPECT_EQ((**fleet).nodes.at(0).driver_version, capacity::kSimulatedDriverVersion);
  EXPECT_EQ((**fleet).nodes.at(0).cuda_version, capacity::kSimulatedCudaVersion);
  auto stored = store_->GetAllocation(TenantScope::Of("tn_a"), queued.id);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->min_driver_version, "535.104.05");
  EXPECT_EQ(stored->min_cuda_version, "12.4");
  EXPECT_EQ(stored->required_gpu_models, std::vector<std::string>{"H100-80GB"});
  auto why = service_->Explain("tn_a", queued.id);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("needs nodes with driver >= 535.104.05, CUDA >= 12.4, GPU model H100-80GB"),
            std::string::npos)
      << *why;
  ASSERT_TRUE(service_->Release(by_, "tn_a", first.id).has_value());
  auto placed = store_->GetAllocation(TenantScope::Of("tn_a"), queued.id);
  ASSERT_TRUE(placed.has_value());
  EXPECT_EQ(placed->state, "running");
}

// Issue 16 item 11 (the store's part): a move request is stored with the
// allocation on both stores, so a restart shows it and does not ask again,
// and one nobody made (health set by hand in the store) is made at start,
// once. Healthy again clears it, in the store too.
TEST_P(SchedulingServiceTest, MoveRequestsAreStoredAndMadeOnceAcrossRestarts) {
  SetQuota("tn_a", "H100-80GB", "gpu", 4000, 4000);
  AllocationRecord one = Submit("tn_a", Gpus(1));
  AllocationRecord two = Submit("tn_a", Gpus(1));
  ASSERT_EQ(one.state, "running");
  ASSERT_EQ(two.state, "running");
  const std::string node = one.placement.at(0).node;
  const int gpu_one = one.placement.at(0).gpus.at(0);
  const int gpu_two = two.placement.at(0).gpus.at(0);
  auto stored = [&](const AllocationRecord& a) {
    auto r = store_->GetAllocation(TenantScope::Of("tn_a"), a.id);
    EXPECT_TRUE(r.has_value());
    return r.has_value() ? *r : AllocationRecord{};
  };
  auto moves = [&](const AllocationRecord& a) {
    int n = 0;
    for (const AuditRecord& r : SchedulerAudit()) {
      n += r.action == "scheduler.move-requested" && r.target.ends_with("/allocation/" + a.id);
    }
    return n;
  };

  ASSERT_TRUE(service_->SetGpuHealth(by_, node, gpu_one, false, "XID 79").has_value());
  EXPECT_EQ(stored(one).move_requested,
            "GPU " + std::to_string(gpu_one) + " of " + node + " is unhealthy (XID 79)");
  EXPECT_EQ(stored(one).move_requested_ms, clock_.NowMillis());
  EXPECT_EQ(stored(one).state, "running");
  EXPECT_TRUE(stored(two).move_requested.empty());

  // By hand, behind the service's back.
  ASSERT_TRUE(store_->database()
                  .Exec("UPDATE fleet_gpus SET healthy = 0 WHERE node = $1 AND idx = $2",
                        {node, int64_t{gpu_two}})
                  .has_value());
  clock_.AdvanceSeconds(5);
  ASSERT_NO_FATAL_FAILURE(StartService(""));
  EXPECT_FALSE(stored(two).move_requested.empty());
  EXPECT_EQ(moves(one), 1);
  EXPECT_EQ(moves(two), 1);
  ASSERT_NO_FATAL_FAILURE(StartService(""));
  EXPECT_EQ(moves(one), 1);
  EXPECT_EQ(moves(two), 1);
  auto why = service_->Explain("tn_a", one.id);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("asked to move"), std::string::npos) << *why;

  ASSERT_TRUE(service_->SetGpuHealth(by_, node, gpu_one, true).has_value());
  EXPECT_TRUE(stored(one).move_requested.empty());
  EXPECT_EQ(stored(one).move_requested_ms, -1);
  EXPECT_FALSE(stored(two).move_requested.empty());
}

// Issue 16 item 10 (the shell's part): a queued request that a tenant's
// region change left without any node is rejected at that change, with the
// words a new request gets, its row ended and the rejection audited.
TEST_P(SchedulingServiceTest, AQueuedRequestARegionChangeMadeImpossibleIsRejectedAndAudited) {
  SetQuota("tn_a", "H100-80GB", "gpu", 24'000, 24'000);
  Submit("tn_a", Gpus(8));
  Submit("tn_a", Gpus(8));
  AllocationRecord queued = Submit("tn_a", Gpus(8));
  ASSERT_EQ(queued.state, "pending");
  Tenant moved = tenant_a_;
  moved.regions = {"nowhere"};
  ASSERT_TRUE(store_->UpdateTenant(moved).has_value());
  service_->TenantChanged(moved);
  auto row = store_->GetAllocation(TenantScope::Of("tn_a"), queued.id);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->state, "rejected");
  EXPECT_NE(row->reason.find("no H100-80GB nodes with 8 GPUs that the tenant may use"),
            std::string::npos)
      << row->reason;
  int audited = 0;
  for (const AuditRecord& r : SchedulerAudit()) {
    audited += r.action == "scheduler.rejected" && r.target.ends_with("/allocation/" + queued.id);
  }
  EXPECT_EQ(audited, 1);
  // The same request made now is refused with the same words.
  auto fresh = service_->Submit(by_, "tn_a", "usr_1", Gpus(8));
  ASSERT_FALSE(fresh.has_value());
  EXPECT_NE(fresh.error().message.find("no H100-80GB nodes with 8 GPUs that the tenant may use"),
            std::string::npos)
      << fresh.error().message;
}

TEST_P(SchedulingServiceTest, ANeverFittingRequestIsRefusedAndNothingIsStored) {
  SetQuota("tn_a", "H100-80GB", "gpu", 2000, 4000);
  auto refused = service_->Submit(by_, "tn_a", "usr_1", Gpus(8));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  auto page = store_->ListAllocations(TenantScope::Of("tn_a"), {}, {});
  ASSERT_TRUE(page.has_value());
  EXPECT_TRUE(page->items.empty());
  EXPECT_TRUE(SchedulerAudit().empty());
  // No quota for the class at all is refused too.
  sched::AllocationRequest l40s = Gpus(1);
  l40s.model = "L40S";
  EXPECT_FALSE(service_->Submit(by_, "tn_a", "usr_1", l40s).has_value());
  // A project that does not exist is bad input.
  sched::AllocationRequest p = Gpus(1);
  p.project = "nope";
  auto bad = service_->Submit(by_, "tn_a", "usr_1", p);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::kInvalidArgument);
}

TEST_P(SchedulingServiceTest, QuotaAndProjectRulesHold) {
  SetQuota("tn_a", "H100-80GB", "gpu", 4000, 8000);
  auto below = service_->SetQuota(by_, "tn_a", "", {"H100-80GB", "gpu", 4000, 2000});
  EXPECT_FALSE(below.has_value());
  auto unknown = service_->SetQuota(by_, "tn_a", "", {"B300", "gpu", 1, 1});
  EXPECT_FALSE(unknown.has_value());
  ASSERT_TRUE(service_->CreateProject(by_, "tn_a", "research").has_value());
  EXPECT_EQ(service_->CreateProject(by_, "tn_a", "research").error().code,
            ErrorCode::kAlreadyExists);
  auto split = service_->SetQuota(by_, "tn_a", "research", {"H100-80GB", "gpu", 2000, 8000});
  ASSERT_TRUE(split.has_value()) << split.error().message;
  auto over = service_->SetQuota(by_, "tn_a", "research", {"H100-80GB", "gpu", 6000, 8000});
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code, ErrorCode::kInvalidArgument);
  // The operator lowering the tenant's guarantee below the split wins (it
  // was refused before issue 16, item 9): the admin's split is kept and
  // enforced clamped, also after a restart; raising the quota restores it.
  auto lowered = service_->SetQuota(by_, "tn_a", "", {"H100-80GB", "gpu", 1000, 8000});
  ASSERT_TRUE(lowered.has_value()) << lowered.error().message;
  EXPECT_EQ(lowered->clamped_projects, std::vector<std::string>{"research"});
  // A restart takes the stored, over-committed split (it is clamped, not
  // refused by ValidateTenantPolicy).
  ASSERT_NO_FATAL_FAILURE(StartService(""));
  sched::AllocationRequest two = Gpus(2);
  two.project = "research";
  auto clamped = service_->Submit(by_, "tn_a", "usr_1", two);
  ASSERT_FALSE(clamped.has_value());
  EXPECT_NE(clamped.error().message.find("guarantee 1000"), std::string::npos)
      << clamped.error().message;
  SetQuota("tn_a", "H100-80GB", "gpu", 4000, 8000);
  auto rows_now = store_->ListQuotas(TenantScope::Of("tn_a"));
  ASSERT_TRUE(rows_now.has_value());
  for (const auto& q : *rows_now) {
    if (q.project == "research") EXPECT_EQ(q.guarantee_milli, 2000) << "the admin's row is kept";
  }

  sched::AllocationRequest r = Gpus(1);
  r.project = "research";
  AllocationRecord a = Submit("tn_a", r);
  EXPECT_EQ(a.state, "running");
  auto held = service_->DeleteProject(by_, "tn_a", "research");
  ASSERT_FALSE(held.has_value());
  EXPECT_EQ(held.error().code, ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(service_->Release(by_, "tn_a", a.id).has_value());
  ASSERT_TRUE(service_->DeleteProject(by_, "tn_a", "research").has_value());
  auto rows = store_->ListQuotas(TenantScope::Of("tn_a"));
  ASSERT_TRUE(rows.has_value());
  EXPECT_EQ(rows->size(), 1u);  // the split went with the project

  // Quotas survive a restart.
  ASSERT_NO_FATAL_FAILURE(StartService(""));
  EXPECT_EQ(Submit("tn_a", Gpus(4)).state, "running");
}

TEST_P(SchedulingServiceTest, AnotherTenantsAllocationIsNotFound) {
  SetQuota("tn_a", "H100-80GB", "gpu", 2000, 2000);
  AllocationRecord a = Submit("tn_a", Gpus(1));
  EXPECT_EQ(service_->Release(by_, "tn_b", a.id).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(service_->Explain("tn_b", a.id).error().code, ErrorCode::kNotFound);
  // Tenant B's view of the node shows none of A's allocations.
  auto node = service_->Node("tn_b", a.placement.at(0).node);
  ASSERT_TRUE(node.has_value());
  for (const auto& g : node->gpus) EXPECT_TRUE(g.uses.empty());
  auto released = service_->Release(by_, "tn_a", a.id);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->state, "released");
  EXPECT_EQ(service_->Release(by_, "tn_a", a.id).error().code, ErrorCode::kFailedPrecondition);
}

TEST_P(SchedulingServiceTest, ReclaimAfterGraceRunsOnTheTimersTick) {
  // A borrows the whole H100 fleet with preemptible work; B's guarantee
  // then reclaims after the grace period, on a tick nobody asked for.
  SetQuota("tn_a", "H100-80GB", "gpu", 0, 16'000);
  SetQuota("tn_b", "H100-80GB", "gpu", 8000, 8000);
  AllocationRecord a1 = Submit("tn_a", Gpus(8, sched::Priority::kPreemptible));
  AllocationRecord a2 = Submit("tn_a", Gpus(8, sched::Priority::kPreemptible));
  ASSERT_EQ(a1.state, "running");
  ASSERT_EQ(a2.state, "running");
  AllocationRecord b = Submit("tn_b", Gpus(8));
  EXPECT_EQ(b.state, "pending");
  clock_.AdvanceMillis(10'001);
  ASSERT_TRUE(service_->Tick().has_value());
  auto placed = store_->GetAllocation(TenantScope::Of("tn_b"), b.id);
  ASSERT_TRUE(placed.has_value());
  EXPECT_EQ(placed->state, "running") << placed->reason;
  int preempted = 0;
  for (const auto& id : {a1.id, a2.id}) {
    auto a = store_->GetAllocation(TenantScope::Of("tn_a"), id);
    ASSERT_TRUE(a.has_value());
    preempted += a->state == "preempted";
  }
  EXPECT_EQ(preempted, 1);
  bool by_scheduler = false;
  for (const auto& r : SchedulerAudit()) {
    if (r.action == "scheduler.preempted") by_scheduler = r.actor == kSchedulerActor;
  }
  EXPECT_TRUE(by_scheduler);
}

TEST_P(SchedulingServiceTest, SuspensionAndEvictionReachTheScheduler) {
  SetQuota("tn_a", "H100-80GB", "gpu", 4000, 4000);
  AllocationRecord a = Submit("tn_a", Gpus(2));
  Tenant suspended = tenant_a_;
  suspended.state = "suspended";
  service_->TenantChanged(suspended);
  auto refused = service_->Submit(by_, "tn_a", "usr_1", Gpus(1));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  service_->TenantChanged(tenant_a_);  // resumed
  EXPECT_EQ(Submit("tn_a", Gpus(1)).state, "running");

  RequestOrigin admin{.actor = "key:root", .actor_role = "platform-admin", .request_id = "req-9"};
  ASSERT_TRUE(service_->TenantEvicting("tn_a", admin).has_value());
  auto gone = store_->GetAllocation(TenantScope::Of("tn_a"), a.id);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->state, "released");
  int releases = 0;
  for (const auto& r : SchedulerAudit()) {
    if (r.action == "scheduler.released") {
      ++releases;
      EXPECT_EQ(r.actor, "key:root");
    }
  }
  EXPECT_EQ(releases, 2);
  for (const auto& [gpu, who] : Holdings()) EXPECT_TRUE(who.empty()) << gpu << " " << who;
}

TEST_P(SchedulingServiceTest, AStoredFleetIsReplacedOnlyIfItsAllocationsStillFit) {
  SetQuota("tn_a", "H100-80GB", "gpu", 16'000, 16'000);
  AllocationRecord a = Submit("tn_a", Gpus(8));
  AllocationRecord b = Submit("tn_a", Gpus(8));
  ASSERT_EQ(a.state, "running");
  ASSERT_EQ(b.state, "running");
  ASSERT_TRUE(service_->Cordon(by_, "l40s-1").has_value());
  // One H100 node fewer: one of the two allocations has no place.
  Status shrunk = TryStart("1xH100-80GBx8,1xA100-80GBx8,2xL40Sx4");
  ASSERT_FALSE(shrunk.has_value());
  EXPECT_EQ(shrunk.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_NE(shrunk.error().message.find(kFleet), std::string::npos) << shrunk.error().message;
  // Nothing changed: the stored fleet still starts, cordon and all.
  ASSERT_NO_FATAL_FAILURE(StartService(kFleet));
  auto l40s = service_->Node("", "l40s-1");
  ASSERT_TRUE(l40s.has_value());
  EXPECT_TRUE(l40s->cordoned);
  // A larger fleet whose first nodes are the same replaces it.
  ASSERT_NO_FATAL_FAILURE(StartService("3xH100-80GBx8"));
  EXPECT_EQ(service_->fleet_spec(), "3xH100-80GBx8");
  auto stored = store_->LoadFleet();
  ASSERT_TRUE(stored.has_value() && stored->has_value());
  EXPECT_EQ((**stored).nodes.size(), 3u);
  EXPECT_EQ(Submit("tn_a", Gpus(1)).state, "pending");  // quota full, room exists
  // A bad spec is bad input.
  EXPECT_EQ(TryStart("3xB300x8").error().code, ErrorCode::kInvalidArgument);
}

// A host's GPUs found at start (NVML) come as rows, not a spec: the
// service runs on them, keeps the operator's flags across restarts with the
// same host, and replaces a stored fleet only where its allocations fit.
TEST_P(SchedulingServiceTest, AFleetGivenAsRowsRunsAndKeepsTheOperatorsFlags) {
  auto parsed = capacity::ParseFleetSpec("1xH100-80GBx4");
  ASSERT_TRUE(parsed.has_value());
  FleetRecord host = FleetToRecord(*parsed, "nvml:gpu-host-1");
  host.nodes[0].name = "gpu-host-1";
  host.nodes[0].gpus[1].mig_enabled = true;
  auto start = [&](const FleetRecord& fleet) -> Status {
    service_.reset();
    SchedulingOptions o;
    o.fleet_spec = kFleet;  // a given fleet wins over any spec
    o.fleet = fleet;
    o.tick_ms = 0;
    service_ = std::make_unique<SchedulingService>(*store_, clock_, o);
    return service_->Start();
  };
  ASSERT_TRUE(start(host).has_value());
  EXPECT_EQ(service_->fleet_spec(), "nvml:gpu-host-1");
  auto nodes = service_->Nodes("", {.limit = 100});
  ASSERT_EQ(nodes.items.size(), 1u);
  EXPECT_EQ(nodes.items[0].name, "gpu-host-1");
  EXPECT_TRUE(nodes.items[0].gpus[1].mig_mode);

  ASSERT_TRUE(service_->Cordon(by_, "gpu-host-1").has_value());
  ASSERT_TRUE(service_->SetGpuHealth(by_, "gpu-host-1", 3, false, "scrub failed").has_value());
  // The same host again: what NVML says (all healthy) does not clear what
  // the operator or a scrub set.
  ASSERT_TRUE(start(host).has_value());
  auto node = service_->Node("", "gpu-host-1");
  ASSERT_TRUE(node.has_value());
  EXPECT_TRUE(node->cordoned);
  EXPECT_FALSE(node->gpus[3].healthy);
  EXPECT_TRUE(node->gpus[0].healthy);
  ASSERT_TRUE(service_->Uncordon(by_, "gpu-host-1").has_value());

  // A GPU NVML finds unhealthy is unhealthy.
  FleetRecord hot = host;
  hot.nodes[0].gpus[0].healthy = false;
  ASSERT_TRUE(start(hot).has_value());
  EXPECT_FALSE(service_->Node("", "gpu-host-1")->gpus[0].healthy);

  // A 2-GPU allocation has no place on a 1-GPU host named otherwise (GPU
  // 1, in MIG mode, takes no whole-GPU work).
  SetQuota("tn_a", "H100-80GB", "gpu", 4000, 4000);
  ASSERT_TRUE(start(host).has_value());
  ASSERT_TRUE(service_->SetGpuHealth(by_, "gpu-host-1", 0, true).has_value());
  ASSERT_TRUE(service_->SetGpuHealth(by_, "gpu-host-1", 3, true).has_value());
  ASSERT_EQ(Submit("tn_a", Gpus(2)).state, "running");
  FleetRecord smaller = host;
  smaller.spec = "nvml:gpu-host-2";
  smaller.nodes[0].name = "gpu-host-2";
  smaller.nodes[0].gpus.resize(1);
  smaller.nodes[0].nvlink_groups = {};
  Status refused = start(smaller);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  ASSERT_TRUE(start(host).has_value());  // nothing changed
  EXPECT_EQ(service_->fleet_spec(), "nvml:gpu-host-1");
}

// Issue 16, item 7: MIG instances were charged to the nearest milli (1g
// 143) and Restore refused any charge but today's, so once 1g cost 142 a
// store holding MIG allocations from before would not start. It starts, and
// the rows are charged as today.
TEST_P(SchedulingServiceTest, RegressionMigChargesStoredBeforeSeventhsStillStart) {
  SetQuota("tn_a", "A100-80GB", "mig", 1000, 1000);
  sched::AllocationRequest mig;
  mig.kind = sched::AllocationKind::kMig;
  mig.model = "A100-80GB";
  mig.mig_profile = "1g.10gb";
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) {  // a 1-GPU MIG quota holds all 7 slices of a GPU
    AllocationRecord a = Submit("tn_a", mig);
    EXPECT_EQ(a.state, "running") << i << " " << a.reason;
    EXPECT_EQ(a.charge_milli, 142);
    ids.push_back(a.id);
  }
  // What a store written before the change holds.
  SchedulingCommit old;
  for (const std::string& id : ids) {
    auto r = store_->GetAllocation(TenantScope::Of("tn_a"), id);
    ASSERT_TRUE(r.has_value());
    r->charge_milli = 143;
    old.allocations.push_back(*r);
  }
  ASSERT_TRUE(store_->CommitScheduling(old).has_value());
  const auto before = Holdings();

  ASSERT_NO_FATAL_FAILURE(StartService(""));
  EXPECT_EQ(Holdings(), before);
  int gpus_full = 0;
  for (const auto& n : service_->Nodes("", {.limit = 1000}).items) {
    for (const auto& g : n.gpus) {
      EXPECT_LE(g.used_milli, 1000) << n.name << "/" << g.index;
      gpus_full += g.used_milli == 1000;
    }
  }
  EXPECT_EQ(gpus_full, 1) << "the 7 slices of one A100";
  for (const std::string& id : ids) {
    auto r = store_->GetAllocation(TenantScope::Of("tn_a"), id);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->charge_milli, 142) << id;
  }
  // The quota is spent (7 × 142): one more waits.
  EXPECT_EQ(Submit("tn_a", mig).state, "pending");
}

// The placements the scheduler holds, by allocation id.
std::set<std::string> PlacedIn(const std::map<std::string, std::string>& holdings) {
  std::set<std::string> ids;
  for (const auto& [gpu, uses] : holdings) {
    for (size_t at = 0; at < uses.size();) {
      const size_t slash = uses.find('/', at);
      if (slash == std::string::npos) break;
      ids.insert(uses.substr(at, slash - at));
      at = uses.find(' ', slash) + 1;
    }
  }
  return ids;
}

// A scheduling call whose commit fails returns the store's error and leaves
// the scheduler rebuilt from the store: what it had decided in memory (a
// release, and the queued request started in its place) is gone, with no
// row, no audit record and no placement of it anywhere; the next call works.
TEST_P(SchedulingServiceTest, ACommitThatFailsRebuildsTheSchedulerFromTheStore) {
  testdb::SqlFaults faults;  // the same database, through connections that can fail
  service_.reset();
  store_.reset();
  ASSERT_NO_FATAL_FAILURE(testdb::OpenStore(database_, &store_, faults.Wrapper()));
  ASSERT_NO_FATAL_FAILURE(StartService(""));
  SetQuota("tn_a", "H100-80GB", "gpu", 24'000, 24'000);
  const AllocationRecord one = Submit("tn_a", Gpus(8));
  const AllocationRecord two = Submit("tn_a", Gpus(8));
  const AllocationRecord waiting = Submit("tn_a", Gpus(8));  // both H100 nodes are full
  ASSERT_EQ(one.state, "running");
  ASSERT_EQ(two.state, "running");
  ASSERT_EQ(waiting.state, "pending");
  auto stored = [&] {
    std::map<std::string, std::string> states;
    auto page = store_->ListAllocations(TenantScope::Of("tn_a"), {}, {.after = "", .limit = 100});
    EXPECT_TRUE(page.has_value());
    if (page.has_value()) {
      for (const auto& r : page->items) states[r.id] = r.state;
    }
    return states;
  };
  auto running_in = [](const std::map<std::string, std::string>& states) {
    std::set<std::string> ids;
    for (const auto& [id, state] : states) {
      if (state == "running") ids.insert(id);
    }
    return ids;
  };
  const auto holdings = Holdings();
  const auto rows = stored();
  const size_t audited = SchedulerAudit().size();
  const auto why = service_->Explain("tn_a", waiting.id);
  ASSERT_TRUE(why.has_value());

  // Releasing `one` starts `waiting` in its place, in memory; the commit of
  // both fails.
  faults.FailNth("COMMIT");
  auto released = service_->Release(by_, "tn_a", one.id);
  ASSERT_FALSE(released.has_value());
  EXPECT_EQ(released.error().code, ErrorCode::kUnavailable);
  // A submission whose commit fails is not kept either.
  faults.FailNth("COMMIT");
  auto submitted = service_->Submit(by_, "tn_a", "usr_1", Gpus(8));
  ASSERT_FALSE(submitted.has_value());
  ASSERT_EQ(faults.failed(), 2);

  EXPECT_EQ(stored(), rows);
  EXPECT_EQ(Holdings(), holdings);
  EXPECT_EQ(PlacedIn(Holdings()), running_in(stored()));
  EXPECT_EQ(SchedulerAudit().size(), audited);
  auto why_now = service_->Explain("tn_a", waiting.id);
  ASSERT_TRUE(why_now.has_value());
  EXPECT_EQ(*why_now, *why);

  // The next call works, and starts the request that was waiting, once.
  auto again = service_->Release(by_, "tn_a", one.id);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->state, "released");
  const auto after = stored();
  EXPECT_EQ(after.size(), 3u);
  EXPECT_EQ(after.at(waiting.id), "running");
  EXPECT_EQ(running_in(after), (std::set<std::string>{two.id, waiting.id}));
  EXPECT_EQ(PlacedIn(Holdings()), running_in(after));
  // And a restart builds the same scheduler from the same rows.
  const auto placed = Holdings();
  ASSERT_NO_FATAL_FAILURE(StartService(""));
  EXPECT_EQ(Holdings(), placed);
}

INSTANTIATE_TEST_SUITE_P(Drivers, SchedulingServiceTest,
                         ::testing::Values(Backend::kSqlite, Backend::kPostgres), BackendName);

}  // namespace
}  // namespace atrium::scheduling
