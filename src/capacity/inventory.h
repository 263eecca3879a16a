// The physical inventory the scheduler places work on: sites, racks, node
// pools, nodes and their GPUs. Plain value types; no I/O. A region is only a
// name carried by sites and pools. Every member has a default (`{}` where
// nothing else fits) so designated initializers may omit any of them.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace atrium::capacity {

struct Site {
  std::string name{};              // "local-1"
  std::string region{};            // "local"
  int64_t power_budget_watts = 0;  // 0 = no budget
};

struct Rack {
  std::string name{};
  std::string site{};
  int64_t power_budget_watts = 0;  // 0 = no budget
};

// Well-known pool labels (pools may carry any slug).
inline constexpr std::string_view kLabelInteractive = "interactive";
inline constexpr std::string_view kLabelBatch = "batch";
inline constexpr std::string_view kLabelFineTune = "fine-tune";
inline constexpr std::string_view kLabelEmbeddings = "embeddings";
// A sensitive pool must name who may use it (dedicated_tenant or
// allowed_tenants); ValidateFleet refuses one that does not.
inline constexpr std::string_view kLabelSensitive = "sensitive";

struct NodePool {
  std::string name{};
  std::string region{};
  std::string site{};
  std::set<std::string, std::less<>> labels{};  // slugs: what the pool is for
  // Set: the whole pool belongs to this tenant (dedicated-pool tier).
  std::optional<std::string> dedicated_tenant{};
  // Non-empty: only these tenants may use the pool. Empty: any tenant
  // (unless dedicated_tenant is set).
  std::vector<std::string> allowed_tenants{};

  bool HasLabel(std::string_view label) const { return labels.contains(label); }
  // Whether `tenant` may be placed in this pool by pool membership alone
  // (quotas and tiers are the scheduler's business).
  bool Admits(std::string_view tenant) const;
};

struct Gpu {
  int index = 0;           // 0..n-1 within its node, as NVML numbers them
  std::string model{};     // a catalog model name, same as the node's
  int64_t memory_mib = 0;  // as reported (the simulated fleet uses the nominal figure)
  bool mig_enabled = false;
  bool healthy = true;
  bool cordoned = false;  // no new work; running work stays
};

struct Node {
  std::string name{};
  std::string pool{};
  std::string rack{};
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string gpu_model{};  // every GPU of a node is this model; empty for a CPU-only node
  std::vector<Gpu> gpus{};  // gpus[i].index == i
  // GPU indexes that are NVLink-connected to each other; a GPU is in at most
  // one group. Multi-GPU work wants all its GPUs in one group.
  std::vector<std::vector<int>> nvlink_groups{};
  int64_t idle_power_watts = 0;  // whole node, idle
  bool cordoned = false;         // no new work
  bool draining = false;         // no new work, and running work is being moved off
  // The GPU software the node runs (capacity/software_version.h), which
  // environment templates may require a minimum of: NVML reports real ones;
  // the simulated fleet gets kSimulatedDriverVersion / kSimulatedCudaVersion.
  // "" = unknown, which satisfies no minimum.
  std::string driver_version{};  // "550.54.15"
  std::string cuda_version{};    // "12.4": the newest CUDA the driver supports
};

// The inventory, indexed by name. Add* keep names unique among their kind;
// references between objects (a node's pool and rack, ...) are checked by
// ValidateFleet, so objects may be added in any order. Iteration order is
// insertion order, which keeps everything built on it deterministic.
class Fleet {
 public:
  // Each fails with InvalidArgument for an empty name and AlreadyExists for a
  // name already used by the same kind of object; on error nothing changes.
  Status AddSite(Site site);
  Status AddRack(Rack rack);
  Status AddPool(NodePool pool);
  Status AddNode(Node node);

  const std::vector<Site>& sites() const { return sites_; }
  const std::vector<Rack>& racks() const { return racks_; }
  const std::vector<NodePool>& pools() const { return pools_; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // nullptr if absent. Pointers stay valid until the next Add of that kind.
  const Site* FindSite(std::string_view name) const;
  const Rack* FindRack(std::string_view name) const;
  const NodePool* FindPool(std::string_view name) const;
  const Node* FindNode(std::string_view name) const;
  // For state changes (cordon, drain, GPU health). Callers must not rename
  // the node. nullptr if absent.
  Node* FindMutableNode(std::string_view name);

  int64_t TotalGpus() const;

 private:
  // Transparent, so lookups by string_view do not allocate.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using NameIndex = std::unordered_map<std::string, size_t, NameHash, std::equal_to<>>;

  std::vector<Site> sites_;
  std::vector<Rack> racks_;
  std::vector<NodePool> pools_;
  std::vector<Node> nodes_;
  NameIndex site_index_;
  NameIndex rack_index_;
  NameIndex pool_index_;
  NameIndex node_index_;
};

// OK, or InvalidArgument naming the first problem found: a pool's site
// missing or in another region; a rack's site missing; a node's pool or rack
// missing, or its rack in a different site from its pool; an unknown GPU
// model; GPUs whose index or model disagrees with the node; MIG enabled on a
// model without MIG; an NVLink group with an index out of range, a repeated
// index, or a GPU in two groups; non-positive CPU, memory or GPU memory; a
// negative power figure; a driver or CUDA version that is set but not a
// version (SoftwareVersion::Parse); a label that is not a slug; a sensitive pool that
// names no tenant; a dedicated pool with a different allowed_tenants list.
Status ValidateFleet(const Fleet& fleet);

}  // namespace atrium::capacity
