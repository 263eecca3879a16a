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

TEST(AllocationStates, HeldStatesThenTheStatesAnEndedAllocationIsKeptIn) {
  EXPECT_EQ(AllAllocationStateNames(),
            (std::vector<std::string>{"pending", "running", "preempting", "released", "preempted",
                                      "rejected"}));
  for (AllocationState s :
       {AllocationState::kPending, AllocationState::kRunning, AllocationState::kPreempting}) {
    auto parsed = ParseState(StateName(s));
    ASSERT_TRUE(parsed.has_value()) << StateName(s);
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(EndedStateName(DecisionKind::kReleased), "released");
  EXPECT_EQ(EndedStateName(DecisionKind::kPreempted), "preempted");
  EXPECT_EQ(EndedStateName(DecisionKind::kRejected), "rejected");
  for (DecisionKind k :
       {DecisionKind::kQueued, DecisionKind::kPlaced, DecisionKind::kPreemptionScheduled,
        DecisionKind::kPreemptionCancelled, DecisionKind::kMoveRequested}) {
    EXPECT_EQ(EndedStateName(k), "") << DecisionKindName(k);
  }
}

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
  EXPECT_EQ(ChargeMilli(r, h100), 428);
  r.mig_profile = "7g.80gb";
  EXPECT_EQ(ChargeMilli(r, h100), 1000);
  r.kind = AllocationKind::kNode;
  r.gpus = 8;
  EXPECT_EQ(ChargeMilli(r, h100), 8000);
}

// Issue 16, item 7: 1g was charged 143 (nearest milli), so 7 × 1g came to
// 1001 and a 1-GPU MIG quota held only 6 of a GPU's slices.
TEST(Quota, RegressionMigChargesAreSeventhsRoundedDownNeverOverAGpu) {
  EXPECT_EQ(MigMilli(1), 142);
  EXPECT_EQ(MigMilli(2), 285);
  EXPECT_EQ(MigMilli(3), 428);
  EXPECT_EQ(MigMilli(4), 571);
  EXPECT_EQ(MigMilli(7), 1000);
  // Every mix of instances that fits one GPU (at most 7 slices) charges at
  // most 1000: sum the charges of every split of 7 slices into instances.
  for (int ones = 0; ones <= 7; ++ones) {
    for (int twos = 0; ones + 2 * twos <= 7; ++twos) {
      for (int threes = 0; ones + 2 * twos + 3 * threes <= 7; ++threes) {
        const int fours = (7 - ones - 2 * twos - 3 * threes) >= 4 ? 1 : 0;
        const int64_t total =
            ones * MigMilli(1) + twos * MigMilli(2) + threes * MigMilli(3) + fours * MigMilli(4);
        EXPECT_LE(total, 1000) << ones << "×1g " << twos << "×2g " << threes << "×3g " << fours
                               << "×4g";
      }
    }
  }
  EXPECT_LE(7 * MigMilli(1), 1000);
  EXPECT_EQ(MigModeUsedMilli(7), 1000);
  EXPECT_EQ(MigModeUsedMilli(1), 143);
  EXPECT_EQ(MigModeUsedMilli(0), 0);
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
  // ...and the limit it holds is given back to batch work within the
  // guarantee by reclaiming the tenant's own preemptible work above it.
  EXPECT_EQ(verdict(2, Priority::kBatch).verdict, QuotaVerdict::kWithinGuaranteeOverLimit);
  EXPECT_NE(verdict(2, Priority::kBatch).reason.find("the limit of tenant t is reached"),
            std::string::npos)
      << verdict(2, Priority::kBatch).reason;
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

// Issue 16, item 3: guarantees hold per sub-level (quota.h).
TEST(Quota, ProjectWithinItsGuaranteeWhileSiblingsFillTheLimit) {
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{2000, 2000};
  t.projects["p1"][kH100] = Quota{1000, 2000};
  t.projects["p2"][kH100] = Quota{1000, 2000};
  QuotaLedger ledger;
  const Allocation a = Placed(Gpus("a", "t", 1, Priority::kPreemptible, "p1"), "n", {0}, 0, 1);
  const Allocation b = Placed(Gpus("b", "t", 1, Priority::kPreemptible, "p1"), "n", {1}, 0, 2);
  ledger.Add(a);
  ledger.Add(b);
  // p1 fills the tenant's limit, 1000 of it above p1's guarantee: p2 is
  // within its own guarantee, and entitled to have that headroom back.
  const QuotaCheck q =
      CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kBatch, "p2"), kH100, 1000);
  EXPECT_EQ(q.verdict, QuotaVerdict::kWithinGuaranteeOverLimit);
  EXPECT_EQ(q.reason,
            "within the guarantee of project p2 of tenant t; the limit of tenant t is reached by "
            "preemptible work above a guarantee, which is reclaimed for it: quota "
            "H100-80GB/gpu of project p2 of tenant t: used 0 (non-preemptible 0), guarantee 1000, "
            "limit 2000 milli; quota H100-80GB/gpu of tenant t: used 2000 (non-preemptible 0), "
            "guarantee 2000, limit 2000 milli; this request needs 1000 milli");
  // p1's own request above its guarantee, and one without a project, wait.
  EXPECT_EQ(
      CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible, "p1"), kH100, 1000).verdict,
      QuotaVerdict::kWaits);
  EXPECT_EQ(CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible), kH100, 1000).reason,
            "waits for quota, limit reached: quota H100-80GB/gpu of tenant t: used 2000 "
            "(non-preemptible 0), guarantee 2000, limit 2000 milli; this request needs 1000 milli");
  // p2's own preemptible work fills the limit (p1 within its guarantee): its
  // batch request within p2's guarantee has that work reclaimed for it, as
  // a tenant's batch work within its guarantee has its own preemptible work
  // above the guarantee reclaimed; p2's preemptible request waits.
  ledger.Remove(b);
  const Allocation b2 = Placed(Gpus("b", "t", 1, Priority::kPreemptible, "p2"), "n", {1}, 0, 2);
  ledger.Add(b2);
  EXPECT_EQ(CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kBatch, "p2"), kH100, 1000).verdict,
            QuotaVerdict::kWithinGuaranteeOverLimit);
  EXPECT_EQ(
      CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible, "p2"), kH100, 1000).verdict,
      QuotaVerdict::kWaits);
  // With room under the limit, a preemptible p2 request within p2's
  // guarantee is within guarantee although siblings hold the tenant's.
  ledger.Remove(b2);
  t.quotas[kH100] = Quota{2000, 4000};
  ledger.Add(Placed(Gpus("c", "t", 2, Priority::kPreemptible, "p1"), "n", {2, 3}, 0, 3));
  const QuotaCheck within =
      CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible, "p2"), kH100, 1000);
  EXPECT_EQ(within.verdict, QuotaVerdict::kWithinGuarantee);
  EXPECT_NE(within.reason.find("quota H100-80GB/gpu of project p2 of tenant t: used 0"),
            std::string::npos)
      << within.reason;
}

TEST(Quota, RestOfTheTenantKeepsNonPreemptibleWorkOffProjectGuarantees) {
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{3000, 8000};
  t.projects["p"][kH100] = Quota{2000, 8000};
  t.projects["q"] = {};  // no row for the class: part of the rest
  QuotaLedger ledger;
  const QuotaCheck never =
      CheckQuota(t, ledger, Gpus("x", "t", 2, Priority::kInteractive, "q"), kH100, 2000);
  EXPECT_EQ(never.verdict, QuotaVerdict::kNeverFits);
  EXPECT_EQ(never.reason,
            "interactive work may not borrow above the guarantee: quota H100-80GB/gpu of tenant t "
            "outside its projects' quotas: used 0 (non-preemptible 0), guarantee 1000, limit 8000 "
            "milli; this request needs 2000 milli");
  ledger.Add(Placed(Gpus("a", "t", 1, Priority::kBatch), "n", {0}, 0, 1));
  ledger.Add(Placed(Gpus("b", "t", 1, Priority::kBatch, "p"), "n", {1}, 0, 2));
  const QuotaCheck waits = CheckQuota(t, ledger, Gpus("x", "t", 1, Priority::kBatch), kH100, 1000);
  EXPECT_EQ(waits.verdict, QuotaVerdict::kWaits);
  EXPECT_NE(waits.reason.find("of tenant t outside its projects' quotas: used 1000 "
                              "(non-preemptible 1000), guarantee 1000"),
            std::string::npos)
      << waits.reason;
  // Preemptible work of the rest borrows as before.
  EXPECT_EQ(
      CheckQuotaVerdict(t, ledger, Gpus("x", "t", 1, Priority::kPreemptible, "q"), kH100, 1000),
      QuotaVerdict::kBorrows);
  // A tenant without projects for the class is one sub-level: the tenant.
  TenantPolicy whole = t;
  whole.projects.clear();
  EXPECT_EQ(CheckQuotaVerdict(whole, ledger, Gpus("x", "t", 2, Priority::kBatch), kH100, 2000),
            QuotaVerdict::kWaits);
  EXPECT_EQ(SubLevelOf(t, "q", kH100), "");
  EXPECT_EQ(SubLevelOf(t, "p", kH100), "p");
  EXPECT_EQ(SubLevelFor(t, ledger, "", kH100).guarantee, 1000);
  EXPECT_EQ(SubLevelFor(t, ledger, "", kH100).usage, (ClassUsage{1000, 1000}));
}

TEST(Quota, VerdictAloneMatchesCheckQuota) {
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{3000, 5000};
  t.projects["p"][kH100] = Quota{2000, 4000};
  t.projects["s"][kH100] = Quota{0, 5000};
  for (int used = 0; used <= 5; ++used) {
    for (int non_pre = 0; non_pre <= used; ++non_pre) {
      QuotaLedger ledger;
      uint64_t seq = 1;
      for (int k = 0; k < used; ++k) {
        ledger.Add(Placed(Gpus("u" + std::to_string(k), "t", 1,
                               k < non_pre ? Priority::kBatch : Priority::kPreemptible,
                               std::vector<std::string>{"", "p", "s"}[k % 3]),
                          "n", {k}, 0, seq++));
      }
      for (int gpus = 1; gpus <= 6; ++gpus) {
        for (Priority p : {Priority::kInteractive, Priority::kBatch, Priority::kPreemptible}) {
          for (std::string project : {"", "p", "s"}) {
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
                                   std::map<TenantClassKey, int64_t> marked = {},
                                   int64_t limit_deficit = 0) {
    ReclaimInput in{
        state, tenants, ledger, {}, std::move(marked), r, kH100, int64_t{r.gpus} * 1000, nullptr};
    in.request_sub_level_charge = in.request_charge;
    in.limit_deficit = limit_deficit;
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

// Issue 16, item 3: between a tenant's projects, reclaim takes only a
// sibling's work above the sibling's own guarantee, and frees limit
// headroom when the request fits but the tenant's limit holds it back.
TEST_F(ReclaimFixture, SiblingProjectGivesBackOnlyItsExcess) {
  const std::string n = "h100-80gb-0";
  tenants["a"].projects["p1"][kH100] = Quota{1000, 4000};
  tenants["a"].projects["p2"][kH100] = Quota{1000, 4000};
  Run({Placed(Gpus("a1", "a", 1, Priority::kPreemptible, "p1"), n, {0}, 10, 1),
       Placed(Gpus("a2", "a", 1, Priority::kPreemptible, "p1"), n, {1}, 20, 2),
       Placed(Gpus("b1", "b", 1, Priority::kPreemptible), n, {2}, 30, 3)});
  // Room exists (GPU 3); the tenant's limit is over by 1000: p1's work above
  // its guarantee goes, b's (newer, but giving back no headroom) stays.
  EXPECT_EQ(Victims(Gpus("x", "a", 1, Priority::kBatch, "p2"), {}, 1000),
            std::vector<std::string>{"a2"});
  // p1's work within its own guarantee is never taken.
  EXPECT_TRUE(Victims(Gpus("x", "a", 1, Priority::kBatch, "p2"), {}, 2000).empty());
  // For room, p1's excess is borrowed for p2 like any tenant's (b is within
  // its guarantee).
  EXPECT_EQ(Victims(Gpus("x", "a", 2, Priority::kBatch, "p2")), std::vector<std::string>{"a2"});
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

// Issue 16, item 6: host CPU and memory are bounded by the request's GPU
// fraction of the node (H100×8: 224000 milli-CPU, 2097152 MiB), rounded down.
TEST(Admission, RegressionHostResourcesAreBoundedByTheGpuFraction) {
  capacity::Fleet fleet = *capacity::ParseFleetSpec("1xH100-80GBx8");
  ASSERT_EQ(fleet.nodes()[0].cpu_milli, 224'000);
  ASSERT_EQ(fleet.nodes()[0].memory_mib, 2'097'152);
  ClusterState state(fleet);
  TenantTable tenants;
  TenantPolicy t;
  t.id = "t";
  for (AllocationKind k : {AllocationKind::kGpu, AllocationKind::kMig, AllocationKind::kShare,
                           AllocationKind::kNode}) {
    t.quotas[{"H100-80GB", k}] = Quota{8000, 8000};
  }
  tenants["t"] = t;
  QuotaLedger ledger;
  auto refusal = [&](AllocationRequest r) {
    return AdmissionRefusal(r, &tenants["t"], state, tenants, ledger);
  };
  AllocationRequest r = Gpus("x", "t", 2, Priority::kBatch);
  r.cpu_milli = 56'000;  // 2/8 of the node
  r.memory_mib = 524'288;
  EXPECT_EQ(refusal(r), "");
  r.cpu_milli = 56'001;
  EXPECT_NE(refusal(r).find("asks 56001 milli-CPU; 2 whole GPUs may ask at most 56000 on this "
                            "node (its CPU per GPU × 2)"),
            std::string::npos)
      << refusal(r);
  r.cpu_milli = 0;
  r.memory_mib = 524'289;
  EXPECT_NE(refusal(r).find("asks 524289 MiB of host memory; 2 whole GPUs may ask at most 524288"),
            std::string::npos)
      << refusal(r);

  r.kind = AllocationKind::kMig;
  r.gpus = 1;
  r.mig_profile = "3g.40gb";
  r.memory_mib = 0;
  r.cpu_milli = 12'000;  // 3/7 of a GPU's 28000
  EXPECT_EQ(refusal(r), "");
  r.cpu_milli = 12'001;
  EXPECT_NE(refusal(r).find("a 3g.40gb instance may ask at most 12000 on this node (its CPU per "
                            "GPU × 3/7)"),
            std::string::npos)
      << refusal(r);

  r.kind = AllocationKind::kShare;
  r.milli = 250;
  r.mem_cap_mib = 1024;
  r.cpu_milli = 7'000;  // a quarter of a GPU's 28000
  r.memory_mib = 65'536;
  EXPECT_EQ(refusal(r), "");
  r.memory_mib = 65'537;
  EXPECT_NE(refusal(r).find("a 250-milli-GPU share may ask at most 65536 MiB"), std::string::npos)
      << refusal(r);

  r.kind = AllocationKind::kNode;
  r.gpus = 8;
  r.cpu_milli = 224'000;  // a lease may ask for the whole host
  r.memory_mib = 2'097'152;
  EXPECT_EQ(refusal(r), "");
  r.cpu_milli = 224'001;
  EXPECT_NE(refusal(r).find("a node lease may ask at most 224000"), std::string::npos)
      << refusal(r);
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

namespace atrium::sched {
namespace {

// Issue 16, item 7: MIG instances stored before charges were whole sevenths
// carry 143 / 286 / 429; a restart must take them (Restore refused any charge
// other than ChargeMilli's, so the scheduler would not start) and charge them
// as now.
TEST(Restore, RegressionPreSeventhsMigChargeIsTakenAndChargedAsNow) {
  const capacity::GpuModel& a100 = *capacity::FindGpuModel("A100-80GB");
  const ResourceClass mig{"A100-80GB", AllocationKind::kMig};
  auto make = [&] {
    auto created =
        Scheduler::Create(*capacity::ParseFleetSpec("1xA100-80GBx8"), SchedulerOptions{});
    EXPECT_TRUE(created.has_value());
    TenantPolicy t;
    t.id = "t";
    t.quotas[mig] = {1000, 1000};
    EXPECT_OK((*created)->SetTenant(t, 0));
    return std::move(*created);
  };
  std::vector<Allocation> stored;
  for (int slot = 0; slot < 7; ++slot) {
    Allocation a;
    a.request.id = "m" + std::to_string(slot);
    a.request.tenant = "t";
    a.request.kind = AllocationKind::kMig;
    a.request.model = "A100-80GB";
    a.request.mig_profile = "1g.10gb";
    a.state = AllocationState::kRunning;
    a.seq = uint64_t(slot + 1);
    a.placed_ms = 0;
    a.placement = {{"a100-80gb-0", {0}}};
    a.mig_start = slot;
    a.charge_milli = 143;  // the nearest-milli charge of before
    stored.push_back(a);
  }
  auto s = make();
  ASSERT_OK(s->Restore(stored));
  for (const Allocation& a : s->Allocations()) EXPECT_EQ(a.charge_milli, 142) << a.id();
  EXPECT_EQ(s->ledger().Tenant("t", mig).used, 7 * 142);
  EXPECT_EQ(s->cluster().runtime(0).gpus[0].used_milli, 1000);
  EXPECT_EQ(ChargeMilli(stored[0].request, a100), 142);

  // Any other charge is still refused, and nothing is kept.
  stored[3].charge_milli = 150;
  auto refused = make();
  auto restored = refused->Restore(stored);
  ASSERT_FALSE(restored.has_value());
  EXPECT_NE(restored.error().message.find("m3 has a wrong charge"), std::string::npos);
  EXPECT_TRUE(refused->Allocations().empty());
}

}  // namespace
}  // namespace atrium::sched

// ------------------------------------------------------------------ scrub

namespace atrium::sched {
namespace {

std::unique_ptr<Scheduler> ScrubbingScheduler() {
  auto fleet = capacity::ParseFleetSpec("1xH100-80GBx2");
  EXPECT_TRUE(fleet.has_value());
  SchedulerOptions options;
  options.scrub_gpus = true;
  auto s = Scheduler::Create(std::move(*fleet), options);
  EXPECT_TRUE(s.has_value());
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{2000, 2000};
  EXPECT_OK((*s)->SetTenant(t, 0));
  return std::move(*s);
}

TEST(Scrub, TheTenantStopsBeingChargedAtReleaseNotAfterTheScrub) {
  auto s = ScrubbingScheduler();
  ASSERT_OK(s->Submit(Gpus("a", "t", 2, Priority::kBatch), 0));
  ASSERT_EQ(s->ledger().Tenant("t", kH100).used, 2000);
  ASSERT_OK(s->Release("a", 1));
  EXPECT_EQ(s->ledger().Tenant("t", kH100).used, 0);
  ASSERT_EQ(s->Scrubs().size(), 2u);
  EXPECT_EQ(s->ScrubsOf("a").size(), 2u);
  EXPECT_EQ(s->Scrubs()[0].since_ms, 1);
  // The room is held: the engine and the node views see the GPUs taken.
  EXPECT_EQ(s->cluster().EngineView(0).FreeMilli(), 0);
  auto queued = s->Submit(Gpus("b", "t", 1, Priority::kBatch), 2);
  ASSERT_TRUE(queued.has_value());
  EXPECT_EQ(s->Queue(), std::vector<std::string>{"b"});
  auto done = s->FinishScrub("a", s->cluster().node(0).name, 1, /*ok=*/true, 3);
  ASSERT_TRUE(done.has_value());
  ASSERT_EQ(done->size(), 1u);
  EXPECT_EQ(done->at(0).kind, DecisionKind::kPlaced);
  EXPECT_EQ(done->at(0).placement.at(0).gpus, std::vector<int>{1});
}

// The scrub command's output is the operator's: another tenant whose share
// of the GPU is preempted by the failed scrub reads only that it failed.
TEST(Scrub, OtherTenantsReadThatAScrubFailedNeverTheCommandsOutput) {
  auto fleet = capacity::ParseFleetSpec("1xH100-80GBx1");
  ASSERT_TRUE(fleet.has_value());
  SchedulerOptions options;
  options.scrub_gpus = true;
  auto created = Scheduler::Create(std::move(*fleet), options);
  ASSERT_TRUE(created.has_value());
  Scheduler& s = **created;
  for (const char* id : {"t", "u"}) {
    TenantPolicy t;
    t.id = id;
    t.quotas[{"H100-80GB", AllocationKind::kShare}] = Quota{1000, 1000};
    ASSERT_OK(s.SetTenant(t, 0));
  }
  auto share = [](std::string id, std::string tenant, Priority p) {
    AllocationRequest r = Gpus(std::move(id), std::move(tenant), 1, p);
    r.kind = AllocationKind::kShare;
    r.milli = 400;
    r.mem_cap_mib = 1024;
    return r;
  };
  ASSERT_OK(s.Submit(share("a", "t", Priority::kBatch), 0));
  ASSERT_OK(s.Submit(share("b", "u", Priority::kPreemptible), 0));
  ASSERT_OK(s.Release("a", 1));
  const std::string node = s.cluster().node(0).name;
  auto failed = s.FinishScrub("a", node, 0, /*ok=*/false, 2, "exit status 3: /dev/nvidia0 busy");
  ASSERT_TRUE(failed.has_value()) << failed.error().message;
  bool preempted = false;
  for (const DecisionRecord& d : *failed) {
    EXPECT_EQ(d.reason.find("exit status"), std::string::npos) << d.ToString();
    if (d.allocation_id == "b" && d.kind == DecisionKind::kPreempted) {
      preempted = true;
      EXPECT_NE(d.reason.find("(scrub failed)"), std::string::npos) << d.reason;
    }
  }
  EXPECT_TRUE(preempted);
  // The operator's view keeps the command's words (b's own room now
  // waits for its scrub).
  const std::vector<ScrubHold> held = s.ScrubsOf("a");
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].state, ScrubState::kFailed);
  EXPECT_EQ(held[0].reason, "scrub failed: exit status 3: /dev/nvidia0 busy");
  EXPECT_EQ(TenantReasonOf(held[0].reason), "scrub failed");
  EXPECT_EQ(TenantReasonOf("scrub failed"), "scrub failed");
  EXPECT_EQ(TenantReasonOf("fan broken"), "fan broken");
  EXPECT_EQ(TenantReasonOf("scrub failedness: x"), "scrub failedness: x");
}

TEST(Scrub, AFailedScrubKeepsTheGpuOutOfServiceUntilAnOperatorClearsIt) {
  auto s = ScrubbingScheduler();
  const std::string node = s->cluster().node(0).name;
  ASSERT_OK(s->Submit(Gpus("a", "t", 1, Priority::kBatch), 0));
  ASSERT_OK(s->Release("a", 1));
  ASSERT_OK(s->FinishScrub("a", node, 0, /*ok=*/false, 2, "timed out after 60 s"));
  EXPECT_FALSE(s->fleet().nodes()[0].gpus[0].healthy);
  ASSERT_EQ(s->Scrubs().size(), 1u);
  EXPECT_EQ(s->Scrubs()[0].state, ScrubState::kFailed);
  EXPECT_EQ(s->Scrubs()[0].reason, "scrub failed: timed out after 60 s");
  // Not finished twice.
  EXPECT_FALSE(s->FinishScrub("a", node, 0, true, 3).has_value());
  ASSERT_OK(s->Submit(Gpus("b", "t", 2, Priority::kBatch), 4));
  EXPECT_EQ(s->Queue(), std::vector<std::string>{"b"});
  // Marking it healthy is the operator's word that it is clean.
  auto healthy = s->SetGpuHealth(node, 0, true, 5);
  ASSERT_TRUE(healthy.has_value());
  EXPECT_TRUE(s->Scrubs().empty());
  EXPECT_TRUE(s->Queue().empty());
}

TEST(Scrub, RestoreBringsBackTheHoldsAndRefusesOnesThatDoNotFit) {
  auto s = ScrubbingScheduler();
  ASSERT_OK(s->Submit(Gpus("a", "t", 1, Priority::kBatch), 0));
  ASSERT_OK(s->Submit(Gpus("b", "t", 1, Priority::kBatch), 0));
  ASSERT_OK(s->Release("a", 1));

  auto fresh = ScrubbingScheduler();
  ASSERT_OK(fresh->Restore(s->Allocations(), s->Scrubs()));
  EXPECT_EQ(fresh->Scrubs(), s->Scrubs());
  EXPECT_TRUE(fresh->cluster() == s->cluster());
  EXPECT_EQ(fresh->cluster().EngineView(0).FreeMilli(), 0);

  // A hold on the GPU a running allocation holds cannot be true.
  std::vector<ScrubHold> clash = s->Scrubs();
  clash[0].gpu = s->Find("b")->placement[0].gpus[0];
  auto other = ScrubbingScheduler();
  EXPECT_FALSE(other->Restore(s->Allocations(), clash).has_value());
  EXPECT_TRUE(other->Allocations().empty());
  EXPECT_TRUE(other->Scrubs().empty());
  std::vector<ScrubHold> twice = {s->Scrubs()[0], s->Scrubs()[0]};
  EXPECT_FALSE(ScrubbingScheduler()->Restore({}, twice).has_value());
}

TEST(Scrub, WithoutTheOptionCapacityIsFreeAtOnce) {
  auto fleet = capacity::ParseFleetSpec("1xH100-80GBx2");
  ASSERT_TRUE(fleet.has_value());
  auto s = Scheduler::Create(std::move(*fleet));
  ASSERT_TRUE(s.has_value());
  TenantPolicy t;
  t.id = "t";
  t.quotas[kH100] = Quota{2000, 2000};
  ASSERT_OK((*s)->SetTenant(t, 0));
  ASSERT_OK((*s)->Submit(Gpus("a", "t", 2, Priority::kBatch), 0));
  ASSERT_OK((*s)->Release("a", 1));
  EXPECT_TRUE((*s)->Scrubs().empty());
  EXPECT_EQ((*s)->cluster().EngineView(0).FreeMilli(), 2000);
}

}  // namespace
}  // namespace atrium::sched
