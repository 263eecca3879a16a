// The GPU models Atrium knows: memory, power, interconnect and, for
// MIG-capable models, the MIG GPU-instance profiles. The MIG profiles come
// from data/gpu/mig_profiles.json (compiled in; one source of truth, with its
// sources); the rest is the table in gpu_catalog.cc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace atrium::capacity {

enum class Interconnect {
  kNvlink,  // SXM boards: GPUs of a node talk over NVLink/NVSwitch
  kPcie,    // PCIe cards: no NVLink between GPUs
};

// "nvlink" or "pcie".
std::string_view InterconnectName(Interconnect interconnect);

// One MIG GPU-instance profile, as `nvidia-smi mig -lgip` / `-lgipp` print it.
// Every MIG GPU has 7 compute slices and 8 memory slots; a profile occupies
// [start, start + memory_slices) on the memory axis.
struct MigProfile {
  std::string name{};  // "3g.40gb", "1g.10gb+me"
  int nvml_gi_profile_id = 0;
  int compute_slices = 0;                // 1..7
  int memory_slices = 0;                 // 1..8: width on the memory-slot axis
  std::vector<int> valid_start_slots{};  // ascending
  int max_instances = 0;                 // per GPU
  int64_t memory_mib = 0;                // usable memory of one instance
  bool media_extensions = false;         // a "+me" profile (owns the media engines)
  // For a "+me" profile, the profile whose max_instances it also counts toward
  // ("1g.10gb" for "1g.10gb+me"); empty otherwise.
  std::string base_profile{};
};

struct GpuModel {
  std::string name{};      // "H100-80GB"; what fleet specs and nodes name
  int64_t memory_mib = 0;  // nominal: the GB in the name x 1024 (agents report the exact figure)
  bool mig_capable = false;
  int tdp_watts = 0;
  Interconnect interconnect = Interconnect::kPcie;
  std::vector<MigProfile> mig_profiles{};  // empty unless mig_capable; smallest first

  // The profile named `name` (exact match), or nullptr. The pointer lives as
  // long as this model.
  const MigProfile* FindMigProfile(std::string_view name) const;
};

// Every known model, in a fixed order (MIG-capable first, then by name).
// Built on first use from the table and the embedded JSON; the models live
// for the whole process, so pointers into them (models, profiles) never
// dangle. A broken embedded file aborts on first use (tests catch it first).
const std::vector<GpuModel>& AllGpuModels();

// The model whose name equals `name` ignoring ASCII case ("h100-80gb" finds
// "H100-80GB"), or nullptr. Points into AllGpuModels().
const GpuModel* FindGpuModel(std::string_view name);

// The known model names joined by ", " (for error messages).
std::string KnownGpuModelNames();

// The profile `name` of `model`, or InvalidArgument naming the model's
// profiles. Points into `model`.
Result<const MigProfile*> FindMigProfile(const GpuModel& model, std::string_view name);

// Builds the catalog from the built-in table and the text of a
// mig_profiles.json. Exposed for tests; everything else uses AllGpuModels().
// Errors (InvalidArgument): malformed JSON, a missing or out-of-range field,
// a profile that does not fit 8 memory slots, a "+me" profile without its base
// profile, a MIG model missing from the file or a file model missing from the
// table, or a total memory that disagrees with the table.
Result<std::vector<GpuModel>> BuildGpuCatalog(std::string_view mig_profiles_json);

// The text of data/gpu/mig_profiles.json, compiled in (static storage).
std::string_view EmbeddedMigProfilesJson();

}  // namespace atrium::capacity
