// What the scheduler is asked for and what it hands out: allocation requests,
// allocations (the record the shell persists), resource classes (the unit of
// quota) and the decision records every change produces. Values only.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace atrium::sched {

// gpu: 1..8 whole GPUs on one node, or a gang of `nodes` such nodes;
// mig: one MIG GPU instance of a named profile; share: a time-sliced fraction
// of one GPU with a GPU-memory cap; node: a whole node (bare-metal lease).
enum class AllocationKind { kGpu, kMig, kShare, kNode };

// Smaller is more important. Interactive (production) work is never
// preempted; batch work is never preempted either but may not borrow;
// preemptible work may borrow above the guarantee and is what reclaim takes.
enum class Priority { kInteractive = 0, kBatch = 1, kPreemptible = 2 };

// pending: waiting in the queue; running: placed; preempting: placed and
// marked as a reclaim victim, preempted when its grace period ends.
enum class AllocationState { kPending, kRunning, kPreempting };

std::string_view KindName(AllocationKind kind);           // "gpu", "mig", "share", "node"
std::string_view PriorityName(Priority priority);         // "interactive", "batch", "preemptible"
std::string_view StateName(AllocationState state);        // "pending", "running", "preempting"
Result<AllocationKind> ParseKind(std::string_view name);  // InvalidArgument naming the valid ones
Result<Priority> ParsePriority(std::string_view name);
Result<AllocationState> ParseState(std::string_view name);

// The unit of quota: a GPU model (catalog name) and an allocation kind.
// Quotas are measured in milli-GPU of that model (see ChargeMilli).
struct ResourceClass {
  std::string model;
  AllocationKind kind = AllocationKind::kGpu;

  std::string ToString() const;  // "H100-80GB/mig"
  // Parses "MODEL/KIND"; the model must be in the catalog (its canonical
  // spelling is kept). InvalidArgument otherwise.
  static Result<ResourceClass> Parse(std::string_view text);
  auto operator<=>(const ResourceClass&) const = default;
  bool operator==(const ResourceClass&) const = default;
};

// Milli-GPU a MIG instance of `compute_slices` is charged: its sevenths of
// the GPU's compute, rounded down (1g 142, 2g 285, 3g 428, 4g 571, 7g 1000).
// Rounding down keeps every set of instances that fits on one GPU (at most 7
// slices) at or under 1000 milli, so a 1-GPU MIG quota admits all 7 slices
// of a GPU; rounding to the nearest charged 7 × 1g 1001. Compute, not memory,
// is what MIG divides for pricing and fairness; memory is implied by the
// profile. Before this rule a 1g was charged 143 (see Scheduler::Restore).
int32_t MigMilli(int compute_slices);

// Upper bounds on what one request may ask for.
inline constexpr int32_t kMaxGpusPerRequestNode = 8;
inline constexpr int32_t kMaxGangNodes = 256;

// What the GPU software of a node must be for a request: the requirements
// of the environment template the work runs in. Each empty member asks
// nothing; a request with none (Empty) costs placement one branch per node.
// Versions are capacity::SoftwareVersion text, compared numerically; a node
// whose version is unknown meets no minimum.
struct NodeRequirements {
  std::string min_driver_version;       // "550.54.15"
  std::string min_cuda_version;         // "12.4"
  std::vector<std::string> gpu_models;  // catalog names; the request's model must be one

  bool Empty() const {
    return min_driver_version.empty() && min_cuda_version.empty() && gpu_models.empty();
  }
  auto operator<=>(const NodeRequirements&) const = default;
  bool operator==(const NodeRequirements&) const = default;
};

// "driver >= 560, CUDA >= 12.6, GPU model H100-80GB or H200-141GB"; "" when Empty.
std::string DescribeRequirements(const NodeRequirements& requirements);

// A request as the API hands it over. `id` is chosen by the shell and must be
// unique among the scheduler's allocations.
struct AllocationRequest {
  std::string id;
  std::string tenant;
  std::string project;  // empty: charged to the tenant only
  AllocationKind kind = AllocationKind::kGpu;
  Priority priority = Priority::kBatch;
  std::string model;        // required for every kind: quotas are per model
  int32_t gpus = 1;         // kGpu: GPUs per node, 1..8
  int32_t nodes = 1;        // kGpu: > 1 makes an all-or-nothing gang
  std::string mig_profile;  // kMig: "3g.40gb"
  int32_t milli = 0;        // kShare: 1..999
  int64_t mem_cap_mib = 0;  // kShare: 1..GPU memory
  int64_t cpu_milli = 0;    // host CPU per node (0: none reserved; a lease takes all)
  int64_t memory_mib = 0;   // host memory per node; both bounded per GPU fraction (placement.h)
  std::string pool;         // optional: only nodes of this pool
  std::string region;       // optional: only nodes of this region
  NodeRequirements requirements;  // optional: only nodes whose GPU software meets them

  bool operator==(const AllocationRequest&) const = default;
};

// Where one node's part of an allocation runs.
struct NodePlacement {
  std::string node;
  std::vector<int> gpus;  // device indexes, ascending
  bool operator==(const NodePlacement&) const = default;
};

// An allocation as the shell persists it. Everything needed to rebuild the
// scheduler after a restart (Scheduler::Restore) is here.
struct Allocation {
  AllocationRequest request;
  AllocationState state = AllocationState::kPending;
  uint64_t seq = 0;  // submission order; breaks every tie in the queue
  int64_t submitted_ms = 0;
  int64_t placed_ms = -1;                // -1 while pending
  std::vector<NodePlacement> placement;  // empty while pending
  int mig_start = -1;                    // kMig: memory slot where the instance starts
  int64_t charge_milli = 0;              // quota charge (ChargeMilli)
  int64_t preempt_at_ms = -1;            // kPreempting: when the grace period ends
  std::string preempted_for;             // kPreempting: the reclaiming allocation
  // Placed on a draining node or an unhealthy GPU and asked to move (the
  // last kMoveRequested's reason and time); cleared when the node or GPU is
  // back in service. Kept with the allocation so that a restart asks only
  // for the moves nobody asked for yet.
  std::string move_requested;
  int64_t move_requested_ms = -1;

  const std::string& id() const { return request.id; }
  bool Placed() const { return state != AllocationState::kPending; }
  bool operator==(const Allocation&) const = default;
};

// Scrub before reuse (SchedulerOptions::scrub_gpus): what an ended
// allocation held of one GPU stays held, by nobody's work, until the shell
// reports that GPU's scrub finished, so no other tenant is placed on a GPU
// that may still hold the last tenant's data. One hold per (allocation,
// node, GPU): a gang or a multi-GPU allocation leaves one per GPU, a node
// lease one whole-GPU hold per GPU of the node. The allocation itself has
// ended (its tenant is no longer charged); the hold is capacity only: no
// quota, no host CPU or memory, no power, no tenant for isolation tiers.
enum class ScrubState {
  kScrubbing,  // waits for its scrub
  kFailed,     // the scrub failed: the GPU was marked unhealthy; the hold
               // stays until an operator marks the GPU healthy again
};
std::string_view ScrubStateName(ScrubState state);  // "scrubbing", "failed"

// What a tenant is told of a failed scrub: the scrub command's output (its
// exit status, its last line) is the operator's, never a tenant's.
inline constexpr char kScrubFailed[] = "scrub failed";
// A GPU's health reason as a tenant may read it: kScrubFailed for a failed
// scrub's "scrub failed: <detail>", anything else as it is (an operator's
// own words when marking a GPU unhealthy).
std::string TenantReasonOf(std::string_view reason);
Result<ScrubState> ParseScrubState(std::string_view name);

struct ScrubHold {
  std::string allocation;  // the ended allocation
  std::string tenant;      // whose it was (platform views only)
  std::string node;
  int gpu = -1;
  // What is held on the GPU: kGpu (the whole GPU; also a lease's GPUs), kMig
  // (the instance at mig_start) or kShare (milli and mem_cap_mib).
  AllocationKind kind = AllocationKind::kGpu;
  std::string model;
  std::string mig_profile;
  int mig_start = -1;
  int32_t milli = 0;
  int64_t mem_cap_mib = 0;
  int64_t since_ms = 0;  // when the allocation ended
  ScrubState state = ScrubState::kScrubbing;
  // kFailed: "scrub failed: <detail>", the command's words for operators;
  // tenants are told only kScrubFailed (TenantReasonOf).
  std::string reason;

  bool operator==(const ScrubHold&) const = default;
};

// The holds `a` (placed, ending now at `now_ms`) leaves, in placement order.
std::vector<ScrubHold> ScrubHoldsOf(const Allocation& a, int64_t now_ms);
// "n1 gpu 3 (alloc-1)", as records and logs name a hold.
std::string DescribeScrub(const ScrubHold& hold);

// What every decision that changes an allocation returns, for the shell to
// audit and persist.
enum class DecisionKind {
  kQueued,               // accepted; waits for room
  kPlaced,               // placement holds the node(s), GPUs and MIG slot
  kRejected,             // can never fit; reason says why; nothing kept
  kPreemptionScheduled,  // a reclaim victim; preempted at at_ms + grace
  kPreemptionCancelled,  // the reclaim no longer needs it
  kPreempted,            // grace over: the allocation is gone
  kReleased,             // released by its owner, by eviction, or cancelled while pending
  kMoveRequested,        // on a draining node or an unhealthy GPU; still running
};
std::string_view DecisionKindName(DecisionKind kind);  // "queued", "placed", ...

// The state an allocation is kept in, as history, after the decision that
// ended it: "released", "preempted" or "rejected" for kReleased, kPreempted
// and kRejected; "" for a decision that does not end it.
std::string_view EndedStateName(DecisionKind kind);
// Every state a stored allocation can be in: a held one's (StateName:
// pending, running, preempting), then an ended one's (EndedStateName:
// released, preempted, rejected). The one list that the API and the CLI
// check a state filter against.
const std::vector<std::string>& AllAllocationStateNames();

struct DecisionRecord {
  DecisionKind kind = DecisionKind::kQueued;
  std::string allocation_id;
  std::string tenant;
  int64_t at_ms = 0;
  std::vector<NodePlacement> placement;  // kPlaced (and kPreempted/kReleased: what was freed)
  std::string mig_profile;
  int mig_start = -1;
  int64_t preempt_at_ms = -1;  // kPreemptionScheduled
  std::string reason;          // words: why rejected, preempted, released, moved

  // One line, e.g. "placed a1 on h100-80gb-0 gpus 0,1" or
  // "placed m1 on h100-80gb-0 gpu 3 mig 1g.10gb@6" or "rejected x: ...".
  std::string ToString() const;
  bool operator==(const DecisionRecord&) const = default;
};

// "h100-80gb-0 gpus 0,1" / "n1 gpu 3" / "n1, n2 gpus 0..." (one per node joined by "; ").
std::string DescribePlacement(const std::vector<NodePlacement>& placement);

}  // namespace atrium::sched
