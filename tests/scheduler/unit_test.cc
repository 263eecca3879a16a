// Unit tests for the pieces of the scheduler core whose rules are easier to
// pin down alone than through scenarios: quota verdicts and charges, the
// weighted dominant share, victim choice for reclaim, and admission.
#include <gtest/gtest.h>

#include "capacity/fleet_spec.h"
#include "scheduler/admission.h"
#include "scheduler/fair_share.h"
#include "scheduler/quota.h"
#include "scheduler/reclaim.h"
#include "scheduler/scheduler.h"
#include "support/result_matchers.h"

namespace atrium::sched {
namespace {

const ResourceClass kH100{"H100-80GB", AllocationKind::kGpu};

AllocationRequest Gpus(std::string id, std::string tenant, int gpus, Priority p,
                       std::string project = "") {
  AllocationRequest r;
  r.id = std::move(id);
  r.tenant = std::move(tenant);
  r.project = std::move(project);
  r.model = "H100-80GB";
  r.gpus = gpus;
  r.priority = p;
  return r;
}

Allocation Placed(AllocationRequest r, std::string node, std::vector<int> gpus, int64_t placed_ms,
                  uint64_t seq) {
  Allocation a;
  a.request = std::move(r);
  a.state = AllocationState::kRunning;
  a.seq = seq;
  a.placed_ms = placed_ms;
  a.placement = {{std::move(node), std::move(gpus)}};
  a.charge_milli = ChargeMilli(a.request, *capacity::FindGpuModel("H100-80GB"));
  return a;
}

// ------------------------------------------------------------------ quota

TEST(Quota, ChargesMilliGpuByKind) {
  const capacity::GpuModel& h100 = *capacity::FindGpuModel("H100-80GB");
  AllocationRequest r = Gpus("x", "t", 2, Priority::kBatch);
  r.nodes = 3;
  EXPECT_EQ(ChargeMilli(r, h100), 6000);
  r.kind = AllocationKind::kShare;
  r.milli = 250;
  EXPECT_EQ(ChargeMilli(r, h100), 250);
  r.kind = AllocationKind::kMig;
  r.mig_profile = "3g.40gb";
  EXPECT_EQ(ChargeMilli(r, h100), 429);
  r.mig_profile = "7g.80gb";
  EXPECT_EQ(ChargeMilli(r, h100), 1000);
  r.kind = AllocationKind::kNode;
  r.gpus = 8;
  EXPECT_EQ(ChargeMilli(r, h100), 8000);
}

TEST(Quota, VerdictRulesInOrder) {
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{2000, 4000};
  QuotaLedger ledger;
  auto verdict = [&](int gpus, Priority p) {
    return CheckQuota(t, ledger, Gpus("x", "t", gpus, p), kH100, gpus * 1000);
  };
  EXPECT_EQ(verdict(5, Priority::kPreemptible).verdict, QuotaVerdict::kNeverFits);
  EXPECT_NE(verdict(5, Priority::kPreemptible).reason.find("above the limit"), std::string::npos);
  EXPECT_EQ(verdict(3, Priority::kBatch).verdict, QuotaVerdict::kNeverFits);
  EXPECT_NE(verdict(3, Priority::kBatch).reason.find("batch work may not borrow"),
            std::string::npos);
  EXPECT_EQ(verdict(2, Priority::kInteractive).verdict, QuotaVerdict::kWithinGuarantee);
  EXPECT_EQ(verdict(3, Priority::kPreemptible).verdict, QuotaVerdict::kBorrows);

  ledger.Add(Placed(Gpus("p", "t", 3, Priority::kPreemptible), "n", {0, 1, 2}, 0, 1));
  // Preemptible use does not count against the non-preemptible guarantee...
  EXPECT_EQ(verdict(1, Priority::kBatch).verdict, QuotaVerdict::kWithinGuarantee);
  // ...but does against the limit.
  EXPECT_EQ(verdict(2, Priority::kBatch).verdict, QuotaVerdict::kWaits);
  EXPECT_NE(verdict(2, Priority::kBatch).reason.find("limit reached"), std::string::npos);
  EXPECT_EQ(verdict(1, Priority::kPreemptible).verdict, QuotaVerdict::kBorrows);

  TenantPolicy none = t;
  none.quotas.clear();
  EXPECT_NE(CheckQuota(none, ledger, Gpus("x", "t", 1, Priority::kBatch), kH100, 1000)
                .reason.find("no quota for H100-80GB/gpu"),
            std::string::npos);
}

TEST(Quota, ProjectLevelNamedInReason) {
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{4000, 8000};
  t.projects["p"][kH100] = Quota{1000, 2000};
  QuotaLedger ledger;
  ledger.Add(Placed(Gpus("a", "t", 2, Priority::kPreemptible, "p"), "n", {0, 1}, 0, 1));
  const QuotaCheck q =
      CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible, "p"), kH100, 1000);
  EXPECT_EQ(q.verdict, QuotaVerdict::kWaits);
  EXPECT_NE(q.reason.find("project p of tenant t: used 2000"), std::string::npos) << q.reason;
  // Without the project only the tenant's quota applies.
  EXPECT_EQ(CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible), kH100, 1000).verdict,
            QuotaVerdict::kWithinGuarantee);
}

TEST(Quota, VerdictAloneMatchesCheckQuota) {
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{3000, 5000};
  t.projects["p"][kH100] = Quota{2000, 4000};
  for (int used = 0; used <= 5; ++used) {
    for (int non_pre = 0; non_pre <= used; ++non_pre) {
      QuotaLedger ledger;
      uint64_t seq = 1;
      for (int k = 0; k < used; ++k) {
        ledger.Add(
            Placed(Gpus("u" + std::to_string(k), "t", 1,
                        k < non_pre ? Priority::kBatch : Priority::kPreemptible, k % 2 ? "p" : ""),
                   "n", {k}, 0, seq++));
      }
      for (int gpus = 1; gpus <= 6; ++gpus) {
        for (Priority p : {Priority::kInteractive, Priority::kBatch, Priority::kPreemptible}) {
          for (std::string project : {"", "p"}) {
            const AllocationRequest r = Gpus("x", "t", gpus, p, project);
            EXPECT_EQ(CheckQuotaVerdict(t, ledger, r, kH100, gpus * 1000),
                      CheckQuota(t, ledger, r, kH100, gpus * 1000).verdict);
          }
        }
      }
    }
  }
}

TEST(Quota, LedgerRemoveUndoesAdd) {
  QuotaLedger ledger;
  const Allocation a = Placed(Gpus("a", "t", 2, Priority::kBatch, "p"), "n", {0, 1}, 0, 1);
  const Allocation b = Placed(Gpus("b", "t", 1, Priority::kPreemptible), "n", {2}, 0, 2);
  ledger.Add(a);
  ledger.Add(b);
  EXPECT_EQ(ledger.Tenant("t", kH100), (ClassUsage{3000, 2000}));
  EXPECT_EQ(ledger.Project("t", "p", kH100), (ClassUsage{2000, 2000}));
  EXPECT_EQ(ledger.ModelUsage("t"), (std::map<std::string, int64_t>{{"H100-80GB", 3000}}));
  ledger.Remove(a);
  ledger.Remove(b);
  EXPECT_TRUE(ledger == QuotaLedger());
}

// ------------------------------------------------------------- fair share

// ClampProjectSplit (issue 16, item 9): the split the scheduler enforces
// when the operator lowered the tenant's quota below the admin's split.
TEST(ProjectSplit, ClampsLimitsAndScalesGuaranteesDeterministically) {
  const ResourceClass gpu{"H100-80GB", AllocationKind::kGpu};
  const ResourceClass mig{"H100-80GB", AllocationKind::kMig};
  TenantPolicy t;
  t.id = "a";
  t.quotas[gpu] = {1000, 2500};
  t.projects["p1"][gpu] = {1000, 4000};
  t.projects["p2"][gpu] = {1000, 2000};
  t.projects["p3"][gpu] = {1000, 1000};
  t.projects["p3"][mig] = {500, 500};  // the tenant has no mig quota at all
  t.projects["p4"];                    // no rows: limited by the tenant only
  EXPECT_FALSE(ValidateTenantPolicy(t).has_value());
  const EffectiveSplit split = ClampProjectSplit(t);
  EXPECT_OK(ValidateTenantPolicy(split.policy));
  // Σg = 3000 > 1000: each floor(1000 × 1000 / 3000) = 333.
  EXPECT_EQ(split.policy.projects.at("p1").at(gpu), (Quota{333, 2500}));
  EXPECT_EQ(split.policy.projects.at("p2").at(gpu), (Quota{333, 2000}));
  EXPECT_EQ(split.policy.projects.at("p3").at(gpu), (Quota{333, 1000}));
  EXPECT_EQ(split.policy.projects.at("p3").at(mig), (Quota{0, 0}));
  EXPECT_TRUE(split.policy.projects.at("p4").empty());
  EXPECT_EQ(split.policy.quotas, t.quotas);
  const std::map<std::string, std::vector<ResourceClass>> clamped = {
      {"p1", {gpu}}, {"p2", {gpu}}, {"p3", {gpu, mig}}};
  EXPECT_EQ(split.clamped, clamped);
  // A split that holds is returned as it is.
  t.quotas[gpu] = {4000, 4000};
  t.quotas[mig] = {500, 500};
  const EffectiveSplit fits = ClampProjectSplit(t);
  EXPECT_TRUE(fits.clamped.empty());
  EXPECT_EQ(fits.policy, t);
}

TEST(ProjectSplit, AnAdminMayShrinkAnOverCommittedSplitButNotRaiseIt) {
  const ResourceClass gpu{"H100-80GB", AllocationKind::kGpu};
  TenantPolicy t;
  t.id = "a";
  t.quotas[gpu] = {1000, 2000};  // lowered by the operator
  t.projects["p1"][gpu] = {2000, 4000};
  t.projects["p2"][gpu] = {1000, 2000};
  t.projects["p3"];
  // Lowering, even while still above the tenant: allowed.
  EXPECT_OK(ValidateProjectChange(t, "p1", gpu, Quota{1500, 3000}));
  EXPECT_OK(ValidateProjectChange(t, "p2", gpu, std::nullopt));
  // Raising beyond what the tenant has: refused, naming the project.
  auto raise = ValidateProjectChange(t, "p2", gpu, Quota{1500, 2000});
  ASSERT_FALSE(raise.has_value());
  EXPECT_NE(raise.error().message.find("project p2"), std::string::npos) << raise.error().message;
  auto above = ValidateProjectChange(t, "p3", gpu, Quota{0, 3000});
  ASSERT_FALSE(above.has_value());
  EXPECT_NE(above.error().message.find("project p3"), std::string::npos) << above.error().message;
  // A 0/0 row (deny) never raises anything.
  EXPECT_OK(ValidateProjectChange(t, "p3", gpu, Quota{0, 0}));
  EXPECT_EQ(ValidateProjectChange(t, "nope", gpu, Quota{0, 0}).error().code, ErrorCode::kNotFound);
}

TEST(FairShare, DominantModelDividedByWeight) {
  const std::map<std::string, int64_t> capacity = {{"H100-80GB", 16000}, {"L40S", 8000}};
  EXPECT_DOUBLE_EQ(WeightedDominantShare({}, capacity, 1.0), 0.0);
  // 4 of 16 H100 (0.25) and 4 of 8 L40S (0.5): L40S dominates.
  EXPECT_DOUBLE_EQ(WeightedDominantShare({{"H100-80GB", 4000}, {"L40S", 4000}}, capacity, 1.0),
                   0.5);
  EXPECT_DOUBLE_EQ(WeightedDominantShare({{"H100-80GB", 4000}, {"L40S", 4000}}, capacity, 2.0),
                   0.25);
  // Models the fleet does not have are ignored.
  EXPECT_DOUBLE_EQ(WeightedDominantShare({{"A100-80GB", 8000}}, capacity, 1.0), 0.0);
}

// ---------------------------------------------------------------- reclaim

struct ReclaimFixture : testing::Test {
  ReclaimFixture() : fleet(*capacity::ParseFleetSpec("1xH100-80GBx4")), state(fleet) {
    for (const char* id : {"a", "b"}) {
      TenantPolicy t;
      t.id = id;
      t.quotas[kH100] = Quota{2000, 4000};
      tenants[id] = t;
    }
  }
  void Run(const std::vector<Allocation>& running) {
    held = running;
    for (const Allocation& a : held) {
      ASSERT_OK(state.Apply(a));
      ledger.Add(a);
    }
  }
  std::vector<std::string> Victims(const AllocationRequest& r,
                                   std::map<TenantClassKey, int64_t> marked = {}) {
    ReclaimInput in{
        state, tenants, ledger, {}, std::move(marked), r, kH100, int64_t{r.gpus} * 1000, nullptr};
    for (const Allocation& a : held) in.running.push_back(&a);
    const capacity::GpuModel& model = *capacity::FindGpuModel("H100-80GB");
    in.fits = [&](const ClusterState& s) {
      const TenantPolicy& t = tenants.at(r.tenant);
      return FindPlacement(PlacementContext{s, tenants, t, r, model}, nullptr).has_value();
    };
    std::vector<std::string> out;
    for (const Allocation* v : ChooseVictims(in)) out.push_back(v->id());
    return out;
  }
  capacity::Fleet fleet;
  ClusterState state;
  TenantTable tenants;
  QuotaLedger ledger;
  std::vector<Allocation> held;
};

TEST_F(ReclaimFixture, NewestBorrowedPreemptibleFirstAndOnlyWhatIsNeeded) {
  const std::string n = "h100-80gb-0";
  Run({Placed(Gpus("bi", "b", 1, Priority::kInteractive), n, {0}, 0, 1),
       Placed(Gpus("b1", "b", 1, Priority::kPreemptible), n, {1}, 10, 2),
       Placed(Gpus("b2", "b", 1, Priority::kPreemptible), n, {2}, 30, 3),
       Placed(Gpus("b3", "b", 1, Priority::kPreemptible), n, {3}, 20, 4)});
  // b is 2 GPUs above its guarantee: the newest placement goes first.
  EXPECT_EQ(Victims(Gpus("x", "a", 1, Priority::kBatch)), std::vector<std::string>{"b2"});
  EXPECT_EQ(Victims(Gpus("x", "a", 2, Priority::kBatch)), (std::vector<std::string>{"b2", "b3"}));
  // Never below b's guarantee: b1 and the interactive bi stay.
  EXPECT_TRUE(Victims(Gpus("x", "a", 3, Priority::kBatch)).empty());
  // What is already marked for another reclaim no longer counts as borrowed.
  EXPECT_EQ(Victims(Gpus("x", "a", 1, Priority::kBatch), {{{"b", kH100}, 1000}}),
            std::vector<std::string>{"b2"});
  EXPECT_TRUE(Victims(Gpus("x", "a", 1, Priority::kBatch), {{{"b", kH100}, 2000}}).empty());
}

TEST_F(ReclaimFixture, PlacementAwareSetDropsVictimsTheFitDoesNotNeed) {
  const std::string n = "h100-80gb-0";
  // b borrows 3 GPUs; a 2-GPU request needs two victims; b2 (newest) and b3
  // are taken first, then b1 is not needed.
  Run({Placed(Gpus("b1", "b", 1, Priority::kPreemptible), n, {0}, 10, 1),
       Placed(Gpus("b2", "b", 2, Priority::kPreemptible), n, {1, 2}, 30, 2),
       Placed(Gpus("b3", "b", 1, Priority::kPreemptible), n, {3}, 20, 3)});
  EXPECT_EQ(Victims(Gpus("x", "a", 2, Priority::kBatch)), std::vector<std::string>{"b2"});
}

TEST_F(ReclaimFixture, OwnTenantCountsTheRequest) {
  const std::string n = "h100-80gb-0";
  Run({Placed(Gpus("a1", "a", 1, Priority::kPreemptible), n, {0}, 10, 1),
       Placed(Gpus("a2", "a", 1, Priority::kPreemptible), n, {1}, 20, 2),
       Placed(Gpus("b1", "b", 2, Priority::kBatch), n, {2, 3}, 5, 3)});
  // a at its guarantee with preemptible work; its interactive request makes
  // that work borrowed, newest first.
  EXPECT_EQ(Victims(Gpus("x", "a", 1, Priority::kInteractive)), std::vector<std::string>{"a2"});
}

// -------------------------------------------------------------- admission

TEST(Admission, NormalisesModelAndRefusesMalformedShapes) {
  capacity::Fleet fleet = *capacity::ParseFleetSpec("1xH100-80GBx8");
  ClusterState state(fleet);
  TenantTable tenants;
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{8000, 8000};
  t.quotas[{"H100-80GB", AllocationKind::kShare}] = Quota{1000, 1000};
  tenants["t"] = t;
  QuotaLedger ledger;
  auto refusal = [&](AllocationRequest r) {
    return AdmissionRefusal(r, &tenants["t"], state, tenants, ledger);
  };
  AllocationRequest r = Gpus("x", "t", 1, Priority::kBatch);
  r.model = "h100-80GB";
  EXPECT_EQ(AdmissionRefusal(r, &tenants["t"], state, tenants, ledger), "");
  EXPECT_EQ(r.model, "H100-80GB");
  r.gpus = 0;
  EXPECT_NE(refusal(r).find("asks for 0 GPUs per node"), std::string::npos);
  r.gpus = 1;
  r.nodes = 2;
  EXPECT_NE(refusal(r).find("the gang needs 2 H100-80GB nodes"), std::string::npos);
  r.nodes = 1;
  r.model = "B200";
  EXPECT_NE(refusal(r).find("unknown GPU model \"B200\""), std::string::npos);
  r.model = "H100-80GB";
  r.kind = AllocationKind::kShare;
  r.milli = 1000;
  r.mem_cap_mib = 1;
  EXPECT_NE(refusal(r).find("a share is 1 to 999 milli-GPU"), std::string::npos);
  r.milli = 500;
  r.mem_cap_mib = 90 * 1024;
  EXPECT_NE(refusal(r).find("memory cap must be 1 to"), std::string::npos);
  r.mem_cap_mib = 1024;
  EXPECT_EQ(refusal(r), "");
  EXPECT_EQ(AdmissionRefusal(r, nullptr, state, tenants, ledger), "unknown tenant t");
  // Transient state never rejects: a cordoned node still counts.
  fleet.FindMutableNode("h100-80gb-0")->cordoned = true;
  EXPECT_EQ(refusal(r), "");
}

}  // namespace
}  // namespace atrium::sched

namespace atrium::sched {
namespace {

AllocationRequest Recent(AllocationKind kind, const std::string& model, int32_t gpus,
                         int32_t milli) {
  AllocationRequest r;
  r.kind = kind;
  r.model = model;
  r.gpus = gpus;
  r.milli = milli;
  r.cpu_milli = 4000;
  if (kind == AllocationKind::kMig) r.mig_profile = "3g.40gb";
  return r;
}

TEST(Workload, RecentRequestsBecomeThePolicysTargetWorkload) {
  auto created = Scheduler::Create(*capacity::ParseFleetSpec("2xH100-80GBx8,1xA100-80GBx8"),
                                   SchedulerOptions{});
  ASSERT_TRUE(created.has_value());
  Scheduler& scheduler = **created;
  EXPECT_TRUE(scheduler.workload().empty()) << "no history: Atrium's policy packs";

  TenantPolicy tenant;
  tenant.id = "tn_a";
  tenant.quotas[ResourceClass{"H100-80GB", AllocationKind::kGpu}] = {16000, 16000};
  ASSERT_TRUE(scheduler.SetTenant(tenant, 0).has_value());
  AllocationRequest first = Recent(AllocationKind::kGpu, "H100-80GB", 2, 0);
  first.id = "a1";
  first.tenant = "tn_a";
  ASSERT_TRUE(scheduler.Submit(first, 1).has_value());
  ASSERT_NE(scheduler.Find("a1"), nullptr);
  const auto placement = scheduler.Find("a1")->placement;
  ASSERT_FALSE(placement.empty());

  std::vector<AllocationRequest> recent;
  for (int i = 0; i < 3; ++i) recent.push_back(Recent(AllocationKind::kGpu, "H100-80GB", 2, 0));
  recent.push_back(Recent(AllocationKind::kShare, "H100-80GB", 1, 500));
  for (int i = 0; i < 5; ++i) recent.push_back(Recent(AllocationKind::kMig, "A100-80GB", 1, 0));
  recent.push_back(Recent(AllocationKind::kGpu, "no-such-model", 1, 0));
  scheduler.SetWorkload(recent);

  // MIG requests and unknown models do not shape the engine's scores.
  const auto& workload = scheduler.workload();
  ASSERT_EQ(workload.size(), 2u);
  EXPECT_EQ(workload[0].num_gpu, 2);
  EXPECT_EQ(workload[0].milli, 1000);
  EXPECT_EQ(workload[0].types, "H100-80GB");
  EXPECT_DOUBLE_EQ(workload[0].popularity, 0.75);
  EXPECT_EQ(workload[1].milli, 500);
  EXPECT_DOUBLE_EQ(workload[1].popularity, 0.25);

  // Placements stay; the next request is placed by the new policy.
  EXPECT_EQ(scheduler.Find("a1")->placement, placement);
  AllocationRequest second = first;
  second.id = "a2";
  ASSERT_TRUE(scheduler.Submit(second, 2).has_value());
  ASSERT_NE(scheduler.Find("a2"), nullptr);
  EXPECT_FALSE(scheduler.Find("a2")->placement.empty());
}

// ------------------------------------------------------- unplaceable backlog

// Two nodes of 8 H100s with 7 GPUs of each taken by tenant "filler", and
// `backlog` pending 2-GPU preemptible requests of tenant "flood", which fit
// no node (issue 15, item 11).
std::unique_ptr<Scheduler> BacklogCluster(int backlog, int64_t& now) {
  auto s = Scheduler::Create(*capacity::ParseFleetSpec("2xH100-80GBx8"));
  EXPECT_TRUE(s.has_value());
  auto tenant = [](std::string id, int64_t guarantee, int64_t limit) {
    TenantPolicy t;
    t.id = std::move(id);
    t.quotas[kH100] = {guarantee, limit};
    return t;
  };
  EXPECT_OK((*s)->SetTenant(tenant("filler", 14'000, 14'000), ++now));
  EXPECT_OK((*s)->SetTenant(tenant("flood", 0, 1'000'000), ++now));
  EXPECT_OK((*s)->SetTenant(tenant("other", 8'000, 8'000), ++now));
  for (int i = 0; i < 2; ++i) {
    EXPECT_OK(
        (*s)->Submit(Gpus("fill-" + std::to_string(i), "filler", 7, Priority::kBatch), ++now));
  }
  for (int i = 0; i < backlog; ++i) {
    EXPECT_OK((*s)->Submit(Gpus("flood-" + std::to_string(i), "flood", 2, Priority::kPreemptible),
                           ++now));
  }
  EXPECT_EQ((*s)->PendingCount("flood"), backlog);
  return std::move(*s);
}

TEST(Backlog, RegressionPassDoesNotExamineEachRequestOfAnUnplaceableBacklog) {
  // A pass, and another tenant's submit and cancel, look at as many queued
  // requests next to 200 unplaceable ones of one shape as next to 10: the
  // shape is checked once per capacity change, not once per request.
  auto examined = [](int backlog) {
    int64_t now = 0;
    auto s = BacklogCluster(backlog, now);
    const uint64_t before_pass = s->requests_examined();
    EXPECT_TRUE(s->AdvanceTime(++now).empty());
    const uint64_t pass = s->requests_examined() - before_pass;
    const uint64_t before_submit = s->requests_examined();
    auto placed = s->Submit(Gpus("o", "other", 1, Priority::kBatch), ++now);
    EXPECT_OK(placed);
    EXPECT_EQ(placed->size(), 2u);  // queued, then placed
    EXPECT_OK(s->Release("o", ++now));
    return std::pair{pass, s->requests_examined() - before_submit};
  };
  const auto [pass_small, submit_small] = examined(10);
  const auto [pass_large, submit_large] = examined(200);
  EXPECT_EQ(pass_large, pass_small);
  EXPECT_EQ(submit_large, submit_small);
  EXPECT_LT(pass_large, 10u);
}

TEST(Backlog, ParkedRequestsComeBackInTheirOrderWhenCapacityFrees) {
  int64_t now = 0;
  auto s = BacklogCluster(50, now);
  auto released = s->Release("fill-1", ++now);
  EXPECT_OK(released);
  // 8 GPUs free on the node: the four oldest flood requests, oldest first.
  std::vector<std::string> placed;
  for (const DecisionRecord& r : *released) {
    if (r.kind == DecisionKind::kPlaced) placed.push_back(r.allocation_id);
  }
  EXPECT_EQ(placed, (std::vector<std::string>{"flood-0", "flood-1", "flood-2", "flood-3"}));
  EXPECT_EQ(s->PendingCount("flood"), 46);
  // Quota un-parks too: with the flood's limit at what it runs, its queued
  // requests wait whatever frees up; raised again, the next four are placed.
  TenantPolicy t;
  t.id = "flood";
  t.quotas[kH100] = {0, 8'000};
  EXPECT_OK(s->SetTenant(t, ++now));
  auto freed = s->Release("fill-0", ++now);
  EXPECT_OK(freed);
  EXPECT_EQ(freed->size(), 1u);  // released; nothing placed
  EXPECT_EQ(s->PendingCount("flood"), 46);
  t.quotas[kH100] = {0, 1'000'000};
  auto raised = s->SetTenant(t, ++now);
  EXPECT_OK(raised);
  placed.clear();
  for (const DecisionRecord& r : *raised) {
    if (r.kind == DecisionKind::kPlaced) placed.push_back(r.allocation_id);
  }
  EXPECT_EQ(placed, (std::vector<std::string>{"flood-4", "flood-5", "flood-6", "flood-7"}));
  EXPECT_EQ(s->Find("flood-8")->state, AllocationState::kPending);
  EXPECT_EQ(s->Find("flood-7")->state, AllocationState::kRunning);
}

}  // namespace
}  // namespace atrium::sched
