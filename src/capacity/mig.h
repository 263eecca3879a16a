// MIG geometry of one GPU: which GPU instances (GIs) can coexist, where a new
// one should go, and whether an empty GPU can hold a set of them.
//
// The rules (data/gpu/mig_profiles.json, placement_algorithm_hint):
//  - a GI of profile P starting at slot s occupies memory slots
//    [s, s + P.memory_slices) of 8; s must be one of P.valid_start_slots;
//  - GIs may not overlap on the memory axis;
//  - at most 7 compute slices are used in total (4g@0 + 3g@4 is allowed);
//  - at most P.max_instances GIs of P; a "+me" GI also counts toward its base
//    profile's limit (1g.10gb+me toward 1g.10gb);
//  - at most one "+me" GI per GPU (it owns the GPU's media engines).
// Compute-instance subdivision inside a GI is not modelled.
//
// Pure value types and functions: no I/O, no clock, deterministic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/gpu_catalog.h"
#include "common/result.h"

namespace atrium::capacity {

inline constexpr int kMigMemorySlots = 8;
inline constexpr int kMigComputeSlices = 7;

// One GPU instance. `profile` points into the layout's GpuModel.
struct MigInstance {
  const MigProfile* profile = nullptr;
  int start = 0;
  std::string owner{};  // allocation id holding it; empty when unassigned

  int end() const { return start + profile->memory_slices; }  // one past the last slot
  friend bool operator==(const MigInstance&, const MigInstance&) = default;
};

// The GIs on one GPU. A value type; it keeps a pointer to its model, so the
// model must outlive it (catalog models live for the process). Every state a
// MigLayout can reach through its methods satisfies the rules above.
class MigLayout {
 public:
  // An empty layout (no GIs) of `model`.
  explicit MigLayout(const GpuModel& model) : model_(&model) {}

  const GpuModel& model() const { return *model_; }
  // Sorted by start slot.
  const std::vector<MigInstance>& instances() const { return instances_; }
  bool empty() const { return instances_.empty(); }
  // Bit i set = memory slot i is taken.
  uint32_t occupied_mask() const { return occupied_mask_; }
  int used_compute_slices() const { return used_compute_slices_; }
  int free_compute_slices() const { return kMigComputeSlices - used_compute_slices_; }
  int free_memory_slots() const;

  // GIs that count toward `profile`'s max_instances: those of `profile`, and
  // for a base profile also those of its "+me" variant.
  int CountTowardLimit(const MigProfile& profile) const;
  // The GI covering memory slot `slot`, or nullptr. Points into this layout;
  // valid until the next Place/Remove.
  const MigInstance* InstanceCovering(int slot) const;

  // Adds a GI after CanPlace (below) allows it; on error nothing changes.
  Status Place(const MigProfile& profile, int start, std::string owner = {});
  // Removes the GI starting at `start`. NotFound if there is none.
  Status Remove(int start);
  // Removes every GI held by `owner` (non-empty); returns how many.
  int RemoveOwnedBy(std::string_view owner);

  friend bool operator==(const MigLayout& a, const MigLayout& b) {
    return a.model_ == b.model_ && a.instances_ == b.instances_;
  }

 private:
  const GpuModel* model_;
  std::vector<MigInstance> instances_;
  uint32_t occupied_mask_ = 0;
  int used_compute_slices_ = 0;
};

// OK if a GI of `profile` may start at `start` on `layout` now. Errors, each
// naming the reason in words:
//  - InvalidArgument: `profile` is not a profile of the layout's model (same
//    object, not just the same name), or `start` is not one of its valid
//    start slots ("slot 1 is not a valid start for 2g.20gb (valid: 0, 2, 4)");
//  - FailedPrecondition: the GPU's current GIs leave no room — overlap
//    ("memory slots 4..5 are taken by 3g.40gb@4 (alloc-7)"), compute slices,
//    the profile's max_instances, or the one-"+me" rule.
Status CanPlace(const MigLayout& layout, const MigProfile& profile, int start);

// Every start slot where `profile` fits now, best first (see ChooseStart).
std::vector<int> RankStarts(const MigLayout& layout, const MigProfile& profile);

// The start slot a new GI of `profile` should take, or nullopt if it fits
// nowhere. Rule, so that later requests find the most room: among the free
// valid starts, prefer the one after which
//   1. the largest profile that can still be placed is largest (by memory
//      slices, then compute slices) — e.g. a 2g goes to slot 4, not 0, so
//      4g@0 stays possible;
//   2. then, the most (profile, start) placements remain possible;
//   3. then, the higher start slot — small GIs fill from the top so the
//      0-aligned large placements stay free.
// Online placement cannot be optimal for every future: 1g GIs fill slots
// 6, 5, 4 first (4g@0 and 3g@0 still fit after three), so a fourth 1g rules
// out any 3g, although 3g@4 + four 1g at 0..3 is a valid layout. PlanLayout
// finds such layouts when a GPU can be re-laid out.
std::optional<int> ChooseStart(const MigLayout& layout, const MigProfile& profile);

// One GI wanted by PlanLayout / ExtendLayout.
struct MigRequest {
  const MigProfile* profile = nullptr;
  std::string owner{};
};

// A layout of `model` holding every request, or nullopt if none exists
// (including when a request's profile is not one of `model`'s). Exhaustive
// backtracking, largest GIs first, each tried at its ChooseStart-ranked
// starts; deterministic. Used when the scheduler may re-lay out an empty GPU.
std::optional<MigLayout> PlanLayout(const GpuModel& model, const std::vector<MigRequest>& requests);

// Like PlanLayout, but keeps `layout`'s GIs where they are and adds the
// requests around them.
std::optional<MigLayout> ExtendLayout(const MigLayout& layout,
                                      const std::vector<MigRequest>& requests);

// Room left for one profile.
struct MigProfileRoom {
  const MigProfile* profile = nullptr;
  std::vector<int> starts{};  // where one more GI fits now, ascending
  int max_additional = 0;     // how many more GIs of only this profile fit together (exact)
};

// What is free on a GPU.
struct MigFreeSpace {
  uint32_t free_slot_mask = 0;  // bit i set = memory slot i free
  int free_memory_slots = 0;
  int free_compute_slices = 0;
  std::vector<MigProfileRoom> placeable{};  // profiles with room, in the model's order
};

MigFreeSpace FreeSpace(const MigLayout& layout);

// One line for logs and error messages, e.g.
// "A100-80GB: 4g.40gb@0 [alloc-1], 1g.10gb@6; free slots 4,5,7; 2/7 compute free".
std::string DescribeLayout(const MigLayout& layout);

}  // namespace atrium::capacity
