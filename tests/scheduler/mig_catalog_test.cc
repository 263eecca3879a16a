// Every MIG profile of every MIG-capable model in the capacity catalog,
// through the scheduler on a one-GPU node: instances of the profile are
// placed where capacity::ChooseStart says until the GPU is full (as many as
// MigFreeSpace says fit), the next one queues with the reason in Explain, a
// release lets it in at the freed slot, a recorded instance at a slot that is
// not a valid start is refused by Restore, and once the last instance goes
// the GPU the scheduler switched to MIG is a whole GPU again and can be laid
// out anew with another profile. The readable cases are in
// scenarios/mig_*.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "capacity/fleet_spec.h"
#include "capacity/mig.h"
#include "scheduler/scheduler.h"
#include "support/result_matchers.h"

namespace atrium::sched {
namespace {

struct ModelProfile {
  const capacity::GpuModel* model;
  const capacity::MigProfile* profile;
};

std::vector<ModelProfile> EveryMigProfile() {
  std::vector<ModelProfile> out;
  for (const capacity::GpuModel& m : capacity::AllGpuModels()) {
    for (const capacity::MigProfile& p : m.mig_profiles) out.push_back({&m, &p});
  }
  return out;
}

std::unique_ptr<Scheduler> OneGpuScheduler(const capacity::GpuModel& model) {
  auto fleet = capacity::ParseFleetSpec("1x" + model.name + "x1");
  EXPECT_TRUE(fleet.has_value());
  if (!fleet) return nullptr;
  auto s = Scheduler::Create(std::move(*fleet));
  EXPECT_TRUE(s.has_value());
  if (!s) return nullptr;
  TenantPolicy t;
  t.id = "t";
  t.quotas[{model.name, AllocationKind::kMig}] = Quota{7000, 7000};
  t.quotas[{model.name, AllocationKind::kGpu}] = Quota{1000, 1000};
  EXPECT_OK((*s)->SetTenant(t, 0));
  return std::move(*s);
}

AllocationRequest MigRequest(const std::string& id, const capacity::GpuModel& model,
                             const std::string& profile) {
  AllocationRequest r;
  r.id = id;
  r.tenant = "t";
  r.kind = AllocationKind::kMig;
  r.model = model.name;
  r.mig_profile = profile;
  return r;
}

const DecisionRecord* FindRecord(const DecisionRecords& records, DecisionKind kind,
                                 const std::string& id) {
  for (const DecisionRecord& r : records) {
    if (r.kind == kind && r.allocation_id == id) return &r;
  }
  return nullptr;
}

TEST(MigCatalog, CoversTheFourMigModels) {
  std::vector<std::string> models;
  for (const auto& m : capacity::AllGpuModels()) {
    if (m.mig_capable) models.push_back(m.name);
  }
  std::sort(models.begin(), models.end());
  EXPECT_EQ(models,
            (std::vector<std::string>{"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"}));
}

TEST(MigCatalog, EveryProfileFillsReleasesAndRelaysOut) {
  const std::vector<ModelProfile> all = EveryMigProfile();
  ASSERT_FALSE(all.empty());
  for (const auto& [model, profile] : all) {
    SCOPED_TRACE(model->name + " " + profile->name);
    std::unique_ptr<Scheduler> s = OneGpuScheduler(*model);
    ASSERT_NE(s, nullptr);
    const std::string node = s->fleet().nodes()[0].name;

    // Fill the GPU; every start is the one ChooseStart picks on the layout so far.
    capacity::MigLayout mirror(*model);
    const int fits = [&] {
      for (const auto& room : capacity::FreeSpace(mirror).placeable) {
        if (room.profile->name == profile->name) return room.max_additional;
      }
      return 0;
    }();
    ASSERT_GE(fits, 1);
    int64_t now = 0;
    std::vector<std::string> placed;
    for (int k = 0; k < fits; ++k) {
      const std::string id = "m" + std::to_string(k);
      auto out = s->Submit(MigRequest(id, *model, profile->name), ++now);
      ASSERT_TRUE(out.has_value()) << out.error().message;
      const DecisionRecord* r = FindRecord(*out, DecisionKind::kPlaced, id);
      ASSERT_NE(r, nullptr) << id << " not placed";
      const std::optional<int> want = capacity::ChooseStart(mirror, *profile);
      ASSERT_TRUE(want.has_value());
      EXPECT_EQ(r->mig_start, *want);
      EXPECT_EQ(r->placement, (std::vector<NodePlacement>{{node, {0}}}));
      EXPECT_EQ(r->mig_profile, profile->name);
      ASSERT_OK(mirror.Place(*profile, *want, id));
      placed.push_back(id);
    }

    // One more waits, and says why.
    auto overflow = s->Submit(MigRequest("over", *model, profile->name), ++now);
    ASSERT_TRUE(overflow.has_value());
    EXPECT_EQ(FindRecord(*overflow, DecisionKind::kPlaced, "over"), nullptr);
    EXPECT_EQ(s->Queue(), std::vector<std::string>{"over"});
    auto why = s->Explain("over");
    ASSERT_TRUE(why.has_value());
    EXPECT_NE(why->find("no GPU with room for a " + profile->name + " instance"), std::string::npos)
        << *why;

    // A recorded instance at a slot that is not a valid start is refused.
    for (int slot = 0; slot < capacity::kMigMemorySlots; ++slot) {
      const auto& valid = profile->valid_start_slots;
      if (std::find(valid.begin(), valid.end(), slot) != valid.end()) continue;
      std::vector<Allocation> records = {*s->Find(placed[0])};
      records[0].mig_start = slot;
      std::unique_ptr<Scheduler> fresh = OneGpuScheduler(*model);
      ASSERT_NE(fresh, nullptr);
      Status restored = fresh->Restore(records);
      ASSERT_FALSE(restored.has_value()) << "slot " << slot;
      EXPECT_EQ(restored.error().code, ErrorCode::kFailedPrecondition);
      EXPECT_NE(restored.error().message.find("is not a valid start for " + profile->name),
                std::string::npos)
          << restored.error().message;
      EXPECT_TRUE(fresh->Allocations().empty());
      break;
    }

    // Releasing the first instance lets the queued one in at its slot.
    const int freed_slot = s->Find(placed[0])->mig_start;
    auto released = s->Release(placed[0], ++now);
    ASSERT_TRUE(released.has_value());
    const DecisionRecord* r = FindRecord(*released, DecisionKind::kPlaced, "over");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->mig_start, freed_slot);
    placed[0] = "over";

    // Empty again: the GPU is whole, then laid out anew with the largest profile.
    for (const std::string& id : placed) ASSERT_OK(s->Release(id, ++now));
    EXPECT_TRUE(s->cluster() == ClusterState(s->fleet())) << "the GPU is not back to whole mode";
    AllocationRequest whole;
    whole.id = "whole";
    whole.tenant = "t";
    whole.model = model->name;
    auto w = s->Submit(whole, ++now);
    ASSERT_TRUE(w.has_value());
    ASSERT_NE(FindRecord(*w, DecisionKind::kPlaced, "whole"), nullptr);
    ASSERT_OK(s->Release("whole", ++now));
    const capacity::MigProfile& largest = model->mig_profiles.back();
    auto big = s->Submit(MigRequest("big", *model, largest.name), ++now);
    ASSERT_TRUE(big.has_value());
    const DecisionRecord* b = FindRecord(*big, DecisionKind::kPlaced, "big");
    ASSERT_NE(b, nullptr) << largest.name;
    EXPECT_EQ(b->mig_start, 0);
  }
}

}  // namespace
}  // namespace atrium::sched
