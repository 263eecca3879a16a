#include "capacity/mig.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "support/result_matchers.h"

namespace atrium::capacity {
namespace {

// The four MIG models share one geometry, so cases name profiles by kind and
// run on every model.
enum Kind { k1g, k1gMe, k1gWide, k2g, k3g, k4g, k7g, kKinds };

const char* const kMigModelNames[] = {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"};

const GpuModel& Model(std::string_view name) {
  const GpuModel* m = FindGpuModel(name);
  EXPECT_NE(m, nullptr) << name;
  return *m;
}

// Profiles are listed smallest first, in the Kind order.
const MigProfile& P(const GpuModel& model, Kind kind) { return model.mig_profiles.at(kind); }

// Replaces {1g} {1g+me} {1g2} {2g} {3g} {4g} {7g} with the model's names.
std::string Expand(std::string text, const GpuModel& model) {
  const char* const tokens[] = {"{1g}", "{1g+me}", "{1g2}", "{2g}", "{3g}", "{4g}", "{7g}"};
  for (int k = 0; k < kKinds; ++k) {
    for (size_t at; (at = text.find(tokens[k])) != std::string::npos;) {
      text.replace(at, std::string_view(tokens[k]).size(), P(model, Kind(k)).name);
    }
  }
  return text;
}

uint32_t Mask(int start, int width) { return ((1u << width) - 1) << start; }

TEST(MigTest, EveryProfileOfEveryModelAtEverySlotOfAnEmptyGpu) {
  for (const char* name : kMigModelNames) {
    const GpuModel& model = Model(name);
    for (const MigProfile& profile : model.mig_profiles) {
      for (int start = -1; start <= kMigMemorySlots; ++start) {
        SCOPED_TRACE(std::string(name) + " " + profile.name + "@" + std::to_string(start));
        MigLayout layout(model);
        const auto& valid = profile.valid_start_slots;
        const bool is_valid = std::find(valid.begin(), valid.end(), start) != valid.end();
        Status can = CanPlace(layout, profile, start);
        ASSERT_EQ(can.has_value(), is_valid);
        if (!is_valid) {
          EXPECT_EQ(can.error().code, ErrorCode::kInvalidArgument);
          EXPECT_NE(can.error().message.find("slot " + std::to_string(start) +
                                             " is not a valid start for " + profile.name),
                    std::string::npos)
              << can.error().message;
          EXPECT_ERROR(layout.Place(profile, start), ErrorCode::kInvalidArgument);
          EXPECT_TRUE(layout.empty());
          continue;
        }
        ASSERT_OK(layout.Place(profile, start, "alloc-1"));
        EXPECT_EQ(layout.occupied_mask(), Mask(start, profile.memory_slices));
        EXPECT_EQ(layout.used_compute_slices(), profile.compute_slices);
        EXPECT_EQ(layout.free_memory_slots(), kMigMemorySlots - profile.memory_slices);
        ASSERT_EQ(layout.instances().size(), 1u);
        EXPECT_EQ(layout.instances()[0], (MigInstance{&profile, start, "alloc-1"}));
        EXPECT_EQ(layout.InstanceCovering(start), &layout.instances()[0]);
        EXPECT_EQ(layout.InstanceCovering(start + profile.memory_slices - 1),
                  &layout.instances()[0]);
        // The same GI again never fits: it overlaps itself.
        EXPECT_ERROR(CanPlace(layout, profile, start), ErrorCode::kFailedPrecondition);
        ASSERT_OK(layout.Remove(start));
        EXPECT_EQ(layout, MigLayout(model));
      }
    }
  }
}

TEST(MigTest, InvalidStartMessageListsTheValidStarts) {
  const GpuModel& a100 = Model("A100-80GB");
  Status s = CanPlace(MigLayout(a100), P(a100, k2g), 1);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().message, "slot 1 is not a valid start for 2g.20gb (valid: 0, 2, 4)");
}

TEST(MigTest, ProfileOfAnotherModelIsRefusedEvenWithTheSameName) {
  const GpuModel& a100 = Model("A100-80GB");
  const GpuModel& h100 = Model("H100-80GB");
  ASSERT_EQ(P(a100, k3g).name, P(h100, k3g).name);
  MigLayout layout(h100);
  Status s = layout.Place(P(a100, k3g), 0);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.error().message, "profile 3g.40gb is not a MIG profile of H100-80GB");
  EXPECT_FALSE(PlanLayout(h100, {{&P(a100, k3g), ""}}).has_value());
}

struct Step {
  Kind kind;
  int start;
  const char* error = nullptr;  // substring of the expected message; null = must succeed
  ErrorCode code = ErrorCode::kFailedPrecondition;
};

struct SequenceCase {
  const char* name;
  std::vector<Step> steps;
  int compute_used_after;
  uint32_t mask_after;
};

TEST(MigTest, PlacementSequences) {
  const SequenceCase cases[] = {
      {"4g@0 + 3g@4 uses all 7 compute slices",
       {{k4g, 0}, {k3g, 4}, {k1g, 6, "memory slot 6 is taken by {3g}@4"}},
       7,
       0xFF},
      {"overlap names the holder and its owner",
       {{k4g, 0}, {k1g, 3, "memory slot 3 is taken by {4g}@0 (owner-0)"}},
       4,
       0x0F},
      {"a wide overlap names the slot range",
       {{k3g, 4}, {k2g, 4, "memory slots 4..5 are taken by {3g}@4 (owner-0)"}},
       3,
       0xF0},
      {"an overlap names only the shared slots",
       {{k2g, 2}, {k3g, 0, "memory slots 2..3 are taken by {2g}@2"}},
       2,
       0x0C},
      {"7g takes the whole GPU",
       {{k7g, 0},
        {k1g, 6, "memory slot 6 is taken by {7g}@0"},
        {k7g, 0, "memory slots 0..7 are taken by {7g}@0"}},
       7,
       0xFF},
      {"seven 1g",
       {{k1g, 0},
        {k1g, 1},
        {k1g, 2},
        {k1g, 3},
        {k1g, 4},
        {k1g, 5},
        {k1g, 6},
        {k1g, 7, "slot 7 is not a valid start for {1g} (valid: 0, 1, 2, 3, 4, 5, 6)",
         ErrorCode::kInvalidArgument},
        {k1gWide, 6, "memory slot 6 is taken by {1g}@6"}},
       7,
       0x7F},
      {"four 1g of two slots",
       {{k1gWide, 0},
        {k1gWide, 2},
        {k1gWide, 4},
        {k1gWide, 6},
        {k1g, 0, "memory slot 0 is taken by {1g2}@0"}},
       4,
       0xFF},
      {"three 2g, then a 1g of two slots makes 7 compute slices",
       {{k2g, 0}, {k2g, 2}, {k2g, 4}, {k1gWide, 6}},
       7,
       0xFF},
      {"three 2g, then a 1g at 6 leaves slot 7 unusable",
       {{k2g, 0}, {k2g, 2}, {k2g, 4}, {k1g, 6}},
       7,
       0x7F},
      {"two 3g", {{k3g, 0}, {k3g, 4}, {k1g, 3, "memory slot 3 is taken by {3g}@0"}}, 6, 0xFF},
      {"4g, 2g and a 1g of two slots", {{k4g, 0}, {k2g, 4}, {k1gWide, 6}}, 7, 0xFF},
      {"3g, 2g and a 1g of two slots", {{k3g, 0}, {k2g, 4}, {k1gWide, 6}}, 6, 0xFF},
      {"only one +me GI per GPU",
       {{k1gMe, 2},
        {k1gMe, 3, "only one +me GPU instance is allowed per GPU; {1g+me}@2 (owner-0) is placed"}},
       1,
       0x04},
      {"+me beside six 1g counts as the seventh 1g",
       {{k1g, 0}, {k1g, 1}, {k1g, 2}, {k1g, 3}, {k1g, 4}, {k1gMe, 5}, {k1g, 6}},
       7,
       0x7F},
  };
  for (const char* model_name : kMigModelNames) {
    const GpuModel& model = Model(model_name);
    for (const SequenceCase& c : cases) {
      SCOPED_TRACE(std::string(model_name) + ": " + c.name);
      MigLayout layout(model);
      for (size_t i = 0; i < c.steps.size(); ++i) {
        const Step& step = c.steps[i];
        const MigProfile& profile = P(model, step.kind);
        SCOPED_TRACE("step " + std::to_string(i) + " " + profile.name + "@" +
                     std::to_string(step.start));
        const MigLayout before = layout;
        Status placed = layout.Place(profile, step.start, "owner-" + std::to_string(i));
        if (!step.error) {
          EXPECT_OK(placed);
          continue;
        }
        ASSERT_FALSE(placed.has_value());
        EXPECT_EQ(placed.error().code, step.code);
        EXPECT_NE(placed.error().message.find(Expand(step.error, model)), std::string::npos)
            << placed.error().message;
        EXPECT_EQ(layout, before) << "a refused Place changed the layout";
      }
      EXPECT_EQ(layout.used_compute_slices(), c.compute_used_after);
      EXPECT_EQ(layout.occupied_mask(), c.mask_after);
    }
  }
}

// A made-up geometry in which each rule binds on its own: 1-slot profiles
// that may start anywhere, so memory never runs out before compute or counts.
GpuModel SyntheticModel() {
  GpuModel m;
  m.name = "TEST-GPU";
  m.mig_capable = true;
  const std::vector<int> anywhere = {0, 1, 2, 3, 4, 5, 6, 7};
  m.mig_profiles = {
      {.name = "1g",
       .compute_slices = 1,
       .memory_slices = 1,
       .valid_start_slots = anywhere,
       .max_instances = 8},
      {.name = "1g+me",
       .compute_slices = 1,
       .memory_slices = 1,
       .valid_start_slots = anywhere,
       .max_instances = 1,
       .media_extensions = true,
       .base_profile = "1g"},
      {.name = "2g",
       .compute_slices = 2,
       .memory_slices = 1,
       .valid_start_slots = anywhere,
       .max_instances = 2},
      {.name = "1x",
       .compute_slices = 1,
       .memory_slices = 1,
       .valid_start_slots = anywhere,
       .max_instances = 3},
      {.name = "1x+me",
       .compute_slices = 1,
       .memory_slices = 1,
       .valid_start_slots = anywhere,
       .max_instances = 1,
       .media_extensions = true,
       .base_profile = "1x"},
  };
  return m;
}

TEST(MigTest, ComputeSlicesAreCappedAtSeven) {
  const GpuModel model = SyntheticModel();
  MigLayout layout(model);
  for (int s = 0; s < 7; ++s) ASSERT_OK(layout.Place(*model.FindMigProfile("1g"), s));
  EXPECT_EQ(layout.free_compute_slices(), 0);
  Status s = CanPlace(layout, *model.FindMigProfile("1g"), 7);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_EQ(s.error().message, "1g needs 1 compute slice; only 0 of 7 are free");

  MigLayout six(model);
  for (int s = 0; s < 6; ++s) ASSERT_OK(six.Place(*model.FindMigProfile("1g"), s));
  EXPECT_EQ(CanPlace(six, *model.FindMigProfile("2g"), 6).error().message,
            "2g needs 2 compute slices; only 1 of 7 are free");
}

TEST(MigTest, MaxInstancesPerProfile) {
  const GpuModel model = SyntheticModel();
  const MigProfile& two = *model.FindMigProfile("2g");
  MigLayout layout(model);
  ASSERT_OK(layout.Place(two, 0));
  ASSERT_OK(layout.Place(two, 1));
  Status s = CanPlace(layout, two, 2);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().message, "2g allows at most 2 instances per GPU; 2 are placed");
}

TEST(MigTest, MediaExtensionInstanceCountsTowardItsBaseLimit) {
  const GpuModel model = SyntheticModel();
  const MigProfile& base = *model.FindMigProfile("1x");
  const MigProfile& me = *model.FindMigProfile("1x+me");
  {
    // Two 1x and the +me: a third 1x would be the fourth toward the limit of 3.
    MigLayout layout(model);
    ASSERT_OK(layout.Place(base, 0));
    ASSERT_OK(layout.Place(base, 1));
    ASSERT_OK(layout.Place(me, 2));
    EXPECT_EQ(layout.CountTowardLimit(base), 3);
    EXPECT_EQ(layout.CountTowardLimit(me), 1);
    EXPECT_EQ(CanPlace(layout, base, 3).error().message,
              "1x allows at most 3 instances per GPU; 3 are placed");
  }
  {
    // Three 1x: the +me would exceed the 1x limit although its own is free.
    MigLayout layout(model);
    for (int s = 0; s < 3; ++s) ASSERT_OK(layout.Place(base, s));
    EXPECT_EQ(CanPlace(layout, me, 3).error().message,
              "1x allows at most 3 instances per GPU (1x+me counts toward it); 3 are placed");
  }
  {
    // The one-+me rule spans different +me profiles.
    MigLayout layout(model);
    ASSERT_OK(layout.Place(*model.FindMigProfile("1g+me"), 0));
    EXPECT_EQ(CanPlace(layout, me, 1).error().message,
              "only one +me GPU instance is allowed per GPU; 1g+me@0 is placed");
  }
}

TEST(MigTest, RealModelsLimitInstancesByGeometry) {
  // 7x 1g.10gb, 4x 1g.20gb, 3x 2g, 2x 3g, 1x 4g, 1x 7g fit on an A100-80GB
  // and one more never does.
  const GpuModel& a100 = Model("A100-80GB");
  const std::pair<Kind, int> limits[] = {{k1g, 7}, {k1gMe, 1}, {k1gWide, 4}, {k2g, 3},
                                         {k3g, 2}, {k4g, 1},   {k7g, 1}};
  for (const char* model_name : kMigModelNames) {
    const GpuModel& model = Model(model_name);
    for (auto [kind, count] : limits) {
      SCOPED_TRACE(std::string(model_name) + " " + P(model, kind).name);
      EXPECT_EQ(P(model, kind).max_instances, count);
      MigLayout layout(model);
      for (int i = 0; i < count; ++i) {
        std::optional<int> start = ChooseStart(layout, P(model, kind));
        ASSERT_TRUE(start.has_value()) << i;
        ASSERT_OK(layout.Place(P(model, kind), *start));
      }
      EXPECT_EQ(ChooseStart(layout, P(model, kind)), std::nullopt);
      EXPECT_EQ(layout.CountTowardLimit(P(model, kind)), count);
    }
  }
  EXPECT_EQ(P(a100, k1g).name, "1g.10gb");
}

TEST(MigTest, RemoveAndRemoveOwnedBy) {
  const GpuModel& model = Model("H100-80GB");
  MigLayout layout(model);
  EXPECT_ERROR(layout.Remove(0), ErrorCode::kNotFound);
  ASSERT_OK(layout.Place(P(model, k1g), 0, "a"));
  ASSERT_OK(layout.Place(P(model, k1g), 1, "b"));
  ASSERT_OK(layout.Place(P(model, k2g), 4, "a"));
  EXPECT_ERROR(layout.Remove(5), ErrorCode::kNotFound);  // covered, but not a start
  EXPECT_EQ(layout.RemoveOwnedBy(""), 0);
  EXPECT_EQ(layout.RemoveOwnedBy("a"), 2);
  ASSERT_EQ(layout.instances().size(), 1u);
  EXPECT_EQ(layout.instances()[0].owner, "b");
  EXPECT_EQ(layout.occupied_mask(), 0x02u);
  EXPECT_EQ(layout.used_compute_slices(), 1);
  EXPECT_EQ(layout.RemoveOwnedBy("a"), 0);
}

TEST(MigTest, InstancesStaySortedByStart) {
  const GpuModel& model = Model("A100-40GB");
  MigLayout layout(model);
  ASSERT_OK(layout.Place(P(model, k1g), 6));
  ASSERT_OK(layout.Place(P(model, k2g), 0));
  ASSERT_OK(layout.Place(P(model, k1g), 3));
  std::vector<int> starts;
  for (const MigInstance& inst : layout.instances()) starts.push_back(inst.start);
  EXPECT_EQ(starts, (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(layout.InstanceCovering(7), nullptr);
  EXPECT_EQ(layout.InstanceCovering(1)->start, 0);
}

TEST(MigTest, ChooseStartOnAnEmptyGpuKeepsTheLargeSlotsFree) {
  // 2g, 3g go to slot 4 so 4g@0 stays possible; small ones go to the top.
  const std::pair<Kind, int> expected[] = {{k1g, 6}, {k1gMe, 6}, {k1gWide, 6}, {k2g, 4},
                                           {k3g, 4}, {k4g, 0},   {k7g, 0}};
  for (const char* model_name : kMigModelNames) {
    const GpuModel& model = Model(model_name);
    for (auto [kind, start] : expected) {
      EXPECT_EQ(ChooseStart(MigLayout(model), P(model, kind)), start)
          << model_name << " " << P(model, kind).name;
    }
  }
}

TEST(MigTest, OneGRequestsFillFromTheTopAndLeaveRoomForA3gOr4g) {
  for (const char* model_name : kMigModelNames) {
    SCOPED_TRACE(model_name);
    const GpuModel& model = Model(model_name);
    MigLayout layout(model);
    std::vector<int> starts;
    for (int i = 0; i < 7; ++i) {
      std::optional<int> start = ChooseStart(layout, P(model, k1g));
      ASSERT_TRUE(start.has_value());
      ASSERT_OK(layout.Place(P(model, k1g), *start));
      starts.push_back(*start);
      if (i < 3) {
        // Up to three 1g: both 3g@0 and 4g@0 still fit.
        EXPECT_EQ(ChooseStart(layout, P(model, k3g)), 0) << i;
        EXPECT_EQ(ChooseStart(layout, P(model, k4g)), 0) << i;
      }
      if (i == 3) {
        // The documented trade-off: no 3g after a fourth 1g, but a 2g fits.
        EXPECT_EQ(ChooseStart(layout, P(model, k3g)), std::nullopt);
        EXPECT_TRUE(ChooseStart(layout, P(model, k2g)).has_value());
      }
    }
    EXPECT_EQ(starts, (std::vector<int>{6, 5, 4, 3, 2, 1, 0}));
    EXPECT_EQ(ChooseStart(layout, P(model, k1g)), std::nullopt);
  }
}

TEST(MigTest, ChooseStartPacksMixedRequestsOntoAFullGpu) {
  struct Mix {
    std::vector<Kind> kinds;
    std::vector<int> starts;
  };
  const Mix mixes[] = {
      {{k3g, k4g}, {4, 0}},
      {{k2g, k2g, k2g, k1gWide}, {4, 2, 0, 6}},
      {{k1gWide, k2g, k4g}, {6, 4, 0}},
      {{k1g, k1g, k1g, k4g}, {6, 5, 4, 0}},
      {{k1g, k1g, k1g, k3g}, {6, 5, 4, 0}},
      {{k1gMe, k1g, k1g, k2g, k2g}, {6, 5, 4, 2, 0}},
      {{k2g, k1gWide, k1g, k1g, k1g}, {4, 6, 3, 2, 1}},
  };
  for (const char* model_name : kMigModelNames) {
    const GpuModel& model = Model(model_name);
    for (const Mix& mix : mixes) {
      MigLayout layout(model);
      std::vector<int> starts;
      for (Kind kind : mix.kinds) {
        std::optional<int> start = ChooseStart(layout, P(model, kind));
        ASSERT_TRUE(start.has_value()) << DescribeLayout(layout) << " + " << P(model, kind).name;
        ASSERT_OK(layout.Place(P(model, kind), *start));
        starts.push_back(*start);
      }
      EXPECT_EQ(starts, mix.starts) << DescribeLayout(layout);
    }
  }
}

// A fixed linear congruential generator: the test must not depend on the
// standard library's distributions.
struct Lcg {
  uint64_t state;
  int Below(int n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((state >> 33) % static_cast<uint64_t>(n));
  }
};

TEST(MigTest, RankStartsAgreesWithCanPlaceOnRandomLayouts) {
  Lcg rng{42};
  for (const char* model_name : kMigModelNames) {
    const GpuModel& model = Model(model_name);
    for (int trial = 0; trial < 300; ++trial) {
      MigLayout layout(model);
      const int steps = rng.Below(8);
      for (int i = 0; i < steps; ++i) {
        const MigProfile& p = model.mig_profiles[rng.Below(kKinds)];
        if (auto start = ChooseStart(layout, p)) ASSERT_OK(layout.Place(p, *start));
      }
      if (!layout.empty() && rng.Below(2) == 0) {
        const auto& insts = layout.instances();
        ASSERT_OK(layout.Remove(insts[rng.Below(static_cast<int>(insts.size()))].start));
      }
      for (const MigProfile& p : model.mig_profiles) {
        std::vector<int> fitting;
        for (int s : p.valid_start_slots) {
          if (CanPlace(layout, p, s).has_value()) fitting.push_back(s);
        }
        std::vector<int> ranked = RankStarts(layout, p);
        std::optional<int> chosen = ChooseStart(layout, p);
        EXPECT_EQ(chosen.has_value(), !fitting.empty()) << DescribeLayout(layout);
        if (chosen) {
          EXPECT_EQ(*chosen, ranked.front());
        }
        std::sort(ranked.begin(), ranked.end());
        EXPECT_EQ(ranked, fitting) << DescribeLayout(layout) << " " << p.name;
      }
    }
  }
}

std::vector<MigRequest> Requests(const GpuModel& model, const std::vector<Kind>& kinds) {
  std::vector<MigRequest> out;
  for (size_t i = 0; i < kinds.size(); ++i) {
    out.push_back({&P(model, kinds[i]), "r" + std::to_string(i)});
  }
  return out;
}

struct PlanCase {
  std::vector<Kind> kinds;
  bool fits;
};

TEST(MigTest, PlanLayoutOnAnEmptyGpu) {
  const PlanCase cases[] = {
      {{}, true},
      {{k7g}, true},
      {{k7g, k1g}, false},
      {{k4g, k3g}, true},
      {{k3g, k3g}, true},
      {{k4g, k4g}, false},
      {{k4g, k3g, k1g}, false},
      {{k1g, k1g, k1g, k1g, k1g, k1g, k1g}, true},
      {{k1g, k1g, k1g, k1g, k1g, k1g, k1g, k1g}, false},
      {{k1gWide, k1gWide, k1gWide, k1gWide}, true},
      {{k1gWide, k1gWide, k1gWide, k1gWide, k1g}, false},
      {{k2g, k2g, k2g}, true},
      {{k2g, k2g, k2g, k2g}, false},
      {{k2g, k2g, k2g, k1gWide}, true},
      {{k2g, k2g, k3g}, true},  // 2g@0, 2g@2, 3g@4
      {{k4g, k2g, k1gWide}, true},
      {{k4g, k2g, k2g}, false},            // 2g cannot start at 6
      {{k3g, k1g, k1g, k1g, k1g}, true},   // 3g@4 + 1g at 0..3: what online placement misses
      {{k4g, k1g, k1g, k1g, k1g}, false},  // 1g cannot start at 7
      {{k1gMe, k1gMe}, false},
      {{k1gMe, k1g, k1g, k1g, k1g, k1g, k1g}, true},
      {{k1gMe, k1g, k1g, k1g, k1g, k1g, k1g, k1g}, false},
      {{k3g, k2g, k1gWide, k1g}, false},  // 7 compute slices, 9 memory slots
  };
  for (const char* model_name : kMigModelNames) {
    const GpuModel& model = Model(model_name);
    for (const PlanCase& c : cases) {
      std::vector<MigRequest> requests = Requests(model, c.kinds);
      std::optional<MigLayout> plan = PlanLayout(model, requests);
      std::string what = std::string(model_name) + ":";
      for (Kind k : c.kinds) what += " " + P(model, k).name;
      ASSERT_EQ(plan.has_value(), c.fits) << what;
      if (!plan) continue;
      // Exactly the requested GIs, each with its owner.
      std::multiset<std::pair<std::string, std::string>> want, got;
      for (const MigRequest& r : requests) want.insert({r.profile->name, r.owner});
      for (const MigInstance& inst : plan->instances())
        got.insert({inst.profile->name, inst.owner});
      EXPECT_EQ(got, want) << what;
    }
  }
}

// Every layout reachable by valid placements, as multisets of kinds.
void EnumerateLayouts(MigLayout& layout, int min_start, std::vector<int>& counts,
                      std::set<std::vector<int>>& feasible) {
  feasible.insert(counts);
  for (int k = 0; k < kKinds; ++k) {
    const MigProfile& p = layout.model().mig_profiles[k];
    for (int start : p.valid_start_slots) {
      if (start < min_start || !CanPlace(layout, p, start).has_value()) continue;
      ASSERT_OK(layout.Place(p, start));
      ++counts[k];
      EnumerateLayouts(layout, start + p.memory_slices, counts, feasible);
      --counts[k];
      ASSERT_OK(layout.Remove(start));
    }
  }
}

void ForEachMultiset(int kind, int left, std::vector<int>& counts,
                     const std::function<void(const std::vector<int>&)>& visit) {
  if (kind == kKinds) {
    visit(counts);
    return;
  }
  for (int n = 0; n <= left; ++n) {
    counts[kind] = n;
    ForEachMultiset(kind + 1, left - n, counts, visit);
  }
  counts[kind] = 0;
}

TEST(MigTest, PlanLayoutAgreesWithExhaustiveEnumeration) {
  for (const char* model_name : kMigModelNames) {
    SCOPED_TRACE(model_name);
    const GpuModel& model = Model(model_name);
    MigLayout empty(model);
    std::vector<int> counts(kKinds, 0);
    std::set<std::vector<int>> feasible;
    EnumerateLayouts(empty, 0, counts, feasible);
    EXPECT_GT(feasible.size(), 50u);
    int checked = 0;
    ForEachMultiset(0, 8, counts, [&](const std::vector<int>& multiset) {
      std::vector<Kind> kinds;
      for (int k = 0; k < kKinds; ++k) kinds.insert(kinds.end(), multiset[k], Kind(k));
      const bool fits = PlanLayout(model, Requests(model, kinds)).has_value();
      EXPECT_EQ(fits, feasible.contains(multiset)) << ::testing::PrintToString(multiset);
      ++checked;
    });
    EXPECT_EQ(checked, 6435);  // multisets of at most 8 out of 7 kinds
  }
}

TEST(MigTest, PlanLayoutRefusesLongListsAndForeignProfiles) {
  const GpuModel& model = Model("H200-141GB");
  std::vector<Kind> many(100, k1g);
  EXPECT_FALSE(PlanLayout(model, Requests(model, many)).has_value());
  EXPECT_FALSE(PlanLayout(model, {{nullptr, ""}}).has_value());
  EXPECT_FALSE(PlanLayout(model, {{&P(Model("H100-80GB"), k1g), ""}}).has_value());
}

TEST(MigTest, ExtendLayoutKeepsExistingInstances) {
  const GpuModel& model = Model("A100-80GB");
  MigLayout base(model);
  ASSERT_OK(base.Place(P(model, k3g), 4, "kept"));
  auto extended = ExtendLayout(base, Requests(model, {k1g, k1g, k1g, k1g}));
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(extended->instances().size(), 5u);
  EXPECT_EQ(extended->occupied_mask(), 0xFFu);
  EXPECT_EQ(*extended->InstanceCovering(4), (MigInstance{&P(model, k3g), 4, "kept"}));

  // A 1g at 6 rules out 3g anywhere plus four 1g, though an empty GPU fits it.
  MigLayout blocked(model);
  ASSERT_OK(blocked.Place(P(model, k1g), 6));
  EXPECT_FALSE(ExtendLayout(blocked, Requests(model, {k3g, k1g, k1g, k1g})).has_value());
  EXPECT_TRUE(ExtendLayout(blocked, Requests(model, {k4g, k1g, k1g})).has_value());
  // Identical profiles next to an existing one of the same profile.
  EXPECT_TRUE(ExtendLayout(blocked, Requests(model, {k1g, k1g, k1g, k1g, k1g, k1g})).has_value());
}

TEST(MigTest, FreeSpaceOnAnEmptyGpu) {
  const GpuModel& model = Model("A100-80GB");
  MigFreeSpace space = FreeSpace(MigLayout(model));
  EXPECT_EQ(space.free_slot_mask, 0xFFu);
  EXPECT_EQ(space.free_memory_slots, 8);
  EXPECT_EQ(space.free_compute_slices, 7);
  ASSERT_EQ(space.placeable.size(), 7u);
  const int max_additional[] = {7, 1, 4, 3, 2, 1, 1};
  for (int k = 0; k < kKinds; ++k) {
    EXPECT_EQ(space.placeable[k].profile, &P(model, Kind(k)));
    EXPECT_EQ(space.placeable[k].starts, P(model, Kind(k)).valid_start_slots);
    EXPECT_EQ(space.placeable[k].max_additional, max_additional[k]) << P(model, Kind(k)).name;
  }
}

TEST(MigTest, FreeSpaceAfterA4g) {
  const GpuModel& model = Model("H100-80GB");
  MigLayout layout(model);
  ASSERT_OK(layout.Place(P(model, k4g), 0));
  MigFreeSpace space = FreeSpace(layout);
  EXPECT_EQ(space.free_slot_mask, 0xF0u);
  EXPECT_EQ(space.free_memory_slots, 4);
  EXPECT_EQ(space.free_compute_slices, 3);
  std::map<std::string, std::pair<std::vector<int>, int>> got;
  for (const MigProfileRoom& room : space.placeable) {
    got[room.profile->name] = {room.starts, room.max_additional};
  }
  const std::map<std::string, std::pair<std::vector<int>, int>> want = {
      {"1g.10gb", {{4, 5, 6}, 3}}, {"1g.10gb+me", {{4, 5, 6}, 1}}, {"1g.20gb", {{4, 6}, 2}},
      {"2g.20gb", {{4}, 1}},       {"3g.40gb", {{4}, 1}},
  };
  EXPECT_EQ(got, want);
}

TEST(MigTest, FreeSpaceOfAFullGpu) {
  const GpuModel& model = Model("H200-141GB");
  MigLayout layout(model);
  ASSERT_OK(layout.Place(P(model, k7g), 0));
  MigFreeSpace space = FreeSpace(layout);
  EXPECT_EQ(space.free_slot_mask, 0u);
  EXPECT_EQ(space.free_memory_slots, 0);
  EXPECT_EQ(space.free_compute_slices, 0);
  EXPECT_TRUE(space.placeable.empty());
}

TEST(MigTest, DescribeLayout) {
  const GpuModel& model = Model("A100-80GB");
  MigLayout layout(model);
  EXPECT_EQ(DescribeLayout(layout),
            "A100-80GB: no GPU instances; free slots 0,1,2,3,4,5,6,7; 7/7 compute free");
  ASSERT_OK(layout.Place(P(model, k4g), 0, "alloc-1"));
  ASSERT_OK(layout.Place(P(model, k1g), 6));
  EXPECT_EQ(DescribeLayout(layout),
            "A100-80GB: 4g.40gb@0 [alloc-1], 1g.10gb@6; free slots 4,5,7; 2/7 compute free");
  ASSERT_OK(layout.Remove(6));
  ASSERT_OK(layout.Place(P(model, k3g), 4));
  EXPECT_EQ(DescribeLayout(layout),
            "A100-80GB: 4g.40gb@0 [alloc-1], 3g.40gb@4; no free slots; 0/7 compute free");
}

}  // namespace
}  // namespace atrium::capacity
