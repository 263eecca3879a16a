// Who holds what on every node and GPU of the fleet, and the power each rack
// and site draws. The scheduler keeps one; reclaim planning copies it to try
// "what if these allocations were gone". Pure values; the fleet (inventory,
// cordon and health flags) is read through a pointer and must outlive it.
//
// Power model: a node draws its idle power whenever it is up, plus, for each
// GPU, the GPU's TDP × the fraction of it allocated (whole GPU and node lease
// 1, share milli/1000, MIG instance compute slices/7), rounded up to a watt
// per allocation part. Racks and sites with a budget never exceed it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/gpu_catalog.h"
#include "capacity/inventory.h"
#include "capacity/mig.h"
#include "common/result.h"
#include "scheduler/allocation.h"
#include "scheduler/node_state.h"

namespace atrium::sched {

// One allocation's hold on one GPU.
struct GpuUse {
  std::string allocation;
  std::string tenant;
  int32_t milli = 0;       // 1000 for a whole GPU, MigMilli (the charge) for MIG, the share's
  int64_t memory_mib = 0;  // GPU memory: the whole GPU, the MIG profile's, the share's cap
  // A scrub hold (ScrubHold): what an ended allocation held, kept from new
  // work until its scrub finishes. It takes room like the allocation did but
  // belongs to nobody: isolation tiers do not count it.
  bool scrubbing = false;
  bool operator==(const GpuUse&) const = default;
};

struct GpuState {
  std::vector<GpuUse> uses;
  bool whole = false;  // one use holds the whole GPU
  // Set while the GPU is in MIG mode: the fleet enabled MIG on it, or the
  // scheduler laid out instances on it (an empty GPU the scheduler switched
  // returns to whole mode when its last instance goes).
  std::optional<capacity::MigLayout> mig;
  // Whole and shares: the sum of the uses' milli. In MIG mode: the compute
  // slices in use in milli (MigModeUsedMilli), so a full GPU reads 1000
  // whatever its instances are charged.
  int32_t used_milli = 0;
  int64_t used_memory_mib = 0;
  bool operator==(const GpuState&) const = default;
};

struct NodeRuntime {
  std::vector<GpuState> gpus;
  int64_t cpu_used = 0;
  int64_t memory_used = 0;
  std::map<std::string, int, std::less<>> tenants;  // tenant → allocation parts here
  std::string leased_by;                            // allocation id of a node lease
  bool operator==(const NodeRuntime&) const = default;
};

class ClusterState {
 public:
  // `fleet` must pass capacity::ValidateFleet and outlive this object; its
  // set of nodes must not change (flags may).
  explicit ClusterState(const capacity::Fleet& fleet);

  const capacity::Fleet& fleet() const { return *fleet_; }
  int32_t node_count() const { return static_cast<int32_t>(nodes_.size()); }
  std::optional<int32_t> NodeIndex(std::string_view name) const;
  const capacity::Node& node(int32_t i) const { return fleet_->nodes()[size_t(i)]; }
  const NodeRuntime& runtime(int32_t i) const { return nodes_[size_t(i)]; }
  // nullptr for a CPU-only node.
  const capacity::GpuModel* model(int32_t i) const { return models_[size_t(i)]; }
  const capacity::NodePool& pool(int32_t i) const;
  int32_t rack_index(int32_t i) const { return rack_of_[size_t(i)]; }
  int32_t site_index(int32_t i) const { return site_of_[size_t(i)]; }
  std::string_view region(int32_t i) const { return pool(i).region; }

  // Healthy and not cordoned: may take new work.
  bool GpuUsable(int32_t i, int g) const;
  bool InMigMode(int32_t i, int g) const {
    return nodes_[size_t(i)].gpus[size_t(g)].mig.has_value();
  }
  // Whether node i holds anything of a tenant other than `tenant`.
  bool HoldsOtherTenant(int32_t i, std::string_view tenant) const;

  int64_t RackDraw(int32_t rack) const { return rack_draw_[size_t(rack)]; }
  int64_t SiteDraw(int32_t site) const { return site_draw_[size_t(site)]; }
  // Watts one allocation part adds on a GPU of `model` using `milli` of it.
  static int64_t GpuWatts(const capacity::GpuModel& model, int64_t milli);
  // Watts one MIG instance of `compute_slices` adds: TDP × slices / 7, rounded
  // up, so a GPU's instances never draw less than the whole GPU would.
  static int64_t MigWatts(const capacity::GpuModel& model, int compute_slices);

  // Takes the resources `allocation` (placed) holds. FailedPrecondition,
  // naming the conflict, when the placement is not free or not valid (GPU
  // taken, MIG slot overlapping, share above 1000 milli or GPU memory ...);
  // on error nothing changes.
  Status Apply(const Allocation& allocation);
  // Gives back what Apply took for the same allocation.
  void Remove(const Allocation& allocation);
  // Holds what `hold` names on its GPU (GPU room only: no host CPU, memory,
  // power or tenant). FailedPrecondition as Apply when the room is not free
  // or the hold is not valid; on error nothing changes.
  Status ApplyScrub(const ScrubHold& hold);
  // Gives back what ApplyScrub took for the same hold.
  void RemoveScrub(const ScrubHold& hold);
  // Holds of finished scrubs taken off: the room the GPUs will have once
  // every scrub in flight is done (reclaim plans against it).
  void RemoveScrubs(const std::vector<ScrubHold>& holds);

  // What the placement engine sees of node i, for every tenant: GPUs that are
  // unusable, whole-taken or in MIG mode have 0 free milli. model_index is
  // the node model's index in capacity::AllGpuModels().
  NodeState EngineView(int32_t i) const;

  bool operator==(const ClusterState& other) const {
    return nodes_ == other.nodes_ && rack_draw_ == other.rack_draw_ &&
           site_draw_ == other.site_draw_;
  }

 private:
  struct Part {
    int32_t node;
    const NodePlacement* placement;
  };
  Status CheckPart(const Allocation& a, int32_t node, const NodePlacement& p) const;
  // `scrub`: a scrub hold's footprint (GPU room only; see GpuUse::scrubbing).
  void ApplyPart(const Allocation& a, int32_t node, const NodePlacement& p, int64_t sign,
                 bool scrub = false);

  const capacity::Fleet* fleet_;
  std::vector<NodeRuntime> nodes_;
  std::vector<const capacity::GpuModel*> models_;
  std::vector<int32_t> model_index_;
  std::vector<int32_t> pool_of_;
  std::vector<int32_t> rack_of_;
  std::vector<int32_t> site_of_;
  std::vector<int64_t> rack_draw_;
  std::vector<int64_t> site_draw_;
  std::map<std::string, int32_t, std::less<>> node_index_;
};

// Index of `model` in capacity::AllGpuModels(), or -1.
int32_t ModelIndex(std::string_view model);

// What a GPU in MIG mode with `compute_slices` of 7 in use shows as used:
// the slices in milli, rounded to the nearest (1 slice 143, 7 slices 1000).
int32_t MigModeUsedMilli(int compute_slices);

}  // namespace atrium::sched
