#include "nvml/node_mapping.h"

#include <cstdio>

#include "capacity/fleet_spec.h"
#include "capacity/inventory.h"

namespace atrium::nvml {
namespace {

// The words of an NVML name, split at spaces and '-' ("Tesla V100-SXM2-16GB"
// → Tesla, V100, SXM2, 16GB).
std::vector<std::string_view> WordsOf(std::string_view name) {
  std::vector<std::string_view> words;
  size_t start = 0;
  for (size_t i = 0; i <= name.size(); ++i) {
    if (i == name.size() || name[i] == ' ' || name[i] == '-') {
      if (i > start) words.push_back(name.substr(start, i - start));
      start = i + 1;
    }
  }
  return words;
}

std::string_view FamilyOf(std::string_view catalog_name) {
  return catalog_name.substr(0, catalog_name.find('-'));
}

std::string Watts(unsigned int milliwatts) { return std::to_string(milliwatts / 1000) + " W"; }

}  // namespace

Result<const capacity::GpuModel*> CatalogModelFor(std::string_view nvml_name, int64_t memory_mib) {
  if (memory_mib <= 0 || memory_mib > (int64_t{1} << 40)) {
    return Error::InvalidArgument("GPU '" + std::string(nvml_name) + "' reports " +
                                  std::to_string(memory_mib) + " MiB of memory");
  }
  const auto words = WordsOf(nvml_name);
  const capacity::GpuModel* best = nullptr;
  for (const capacity::GpuModel& model : capacity::AllGpuModels()) {
    bool family_named = false;
    for (std::string_view word : words) family_named = family_named || word == FamilyOf(model.name);
    if (!family_named) continue;
    // Reported memory within 85%..102% of the nominal figure (integer
    // arithmetic: no rounding surprises at the edges).
    if (memory_mib * 100 < model.memory_mib * 85 || memory_mib * 100 > model.memory_mib * 102) {
      continue;
    }
    best = &model;
    break;  // nominal sizes of one family are far apart: at most one fits
  }
  if (best == nullptr) {
    return Error::InvalidArgument(
        "GPU '" + std::string(nvml_name) + "' with " + std::to_string(memory_mib) +
        " MiB is not a model Atrium knows (known: " + capacity::KnownGpuModelNames() + ")");
  }
  return best;
}

GpuVerdict JudgeGpuHealth(const DiscoveredGpu& gpu, const HealthLimits& limits) {
  GpuVerdict v;
  auto fail = [&v](std::string reason) {
    v.healthy = false;
    v.reasons.push_back(std::move(reason));
  };
  const GpuHealthSignals& h = gpu.health;
  for (unsigned long long xid : h.xid_errors) {
    fail("critical XID " + std::to_string(xid) + " reported");
  }
  if (h.ecc_uncorrected_volatile.value_or(0) > 0) {
    fail(std::to_string(*h.ecc_uncorrected_volatile) +
         " uncorrectable ECC errors since the driver loaded");
  }
  if (h.retired_pages_pending.value_or(false)) {
    fail("memory pages are pending retirement (a GPU reset retires them)");
  }
  if (h.remapped_rows_failed.value_or(false)) fail("a memory row remapping failed");
  if (h.remapped_rows_pending.value_or(false)) {
    fail("memory rows are pending remapping (a GPU reset remaps them)");
  }
  if (h.temperature_c) {
    const bool own = h.slowdown_temperature_c.has_value() && *h.slowdown_temperature_c > 0;
    const unsigned int max = own ? *h.slowdown_temperature_c : limits.fallback_max_temperature_c;
    if (*h.temperature_c >= max) {
      fail("at " + std::to_string(*h.temperature_c) + " °C, at or above " +
           (own ? "its slowdown threshold " : "the limit ") + std::to_string(max) + " °C");
    }
  }
  if (h.power_mw && h.power_limit_mw && *h.power_limit_mw > 0 &&
      static_cast<double>(*h.power_mw) >
          static_cast<double>(*h.power_limit_mw) * limits.max_power_over_limit) {
    fail("drawing " + Watts(*h.power_mw) + ", beyond its " + Watts(*h.power_limit_mw) + " limit");
  }
  return v;
}

Result<NodeMapping> MapHostToNode(const DiscoveredHost& host, const NodeShape& shape,
                                  const HealthLimits& limits) {
  if (shape.name.empty()) return Error::InvalidArgument("the discovered node has no name");
  if (shape.cpu_milli <= 0 || shape.memory_mib <= 0) {
    return Error::InvalidArgument("node '" + shape.name + "': CPU and memory must be positive");
  }
  if (host.gpus.empty()) {
    return Error::InvalidArgument("node '" + shape.name + "': NVML reports no GPU");
  }
  NodeMapping out;
  out.node.name = shape.name;
  out.node.pool = std::string(capacity::kSimulatedPool);
  out.node.rack = std::string(kDiscoveredRack);
  out.node.cpu_milli = shape.cpu_milli;
  out.node.memory_mib = shape.memory_mib;
  for (const DiscoveredGpu& gpu : host.gpus) {
    ATRIUM_ASSIGN_OR_RETURN(const capacity::GpuModel* model,
                            CatalogModelFor(gpu.name, gpu.memory_mib));
    if (out.node.gpu_model.empty()) {
      out.node.gpu_model = model->name;
    } else if (out.node.gpu_model != model->name) {
      return Error::InvalidArgument("node '" + shape.name + "' has GPUs of two models (" +
                                    out.node.gpu_model + " and " + model->name + " at GPU " +
                                    std::to_string(gpu.index) + "); a node is one model");
    }
    const bool mig = gpu.mig_enabled.value_or(false);
    if (mig && !model->mig_capable) {
      return Error::InvalidArgument("GPU " + std::to_string(gpu.index) + " (" + model->name +
                                    ") reports MIG on, but " + model->name + " has no MIG");
    }
    MappedGpu mapped{.index = gpu.index,
                     .uuid = gpu.uuid,
                     .verdict = JudgeGpuHealth(gpu, limits),
                     .mig_instances = {}};
    for (const MigInstance& instance : gpu.mig_instances) {
      std::string profile = "profile-" + std::to_string(instance.profile_id);
      for (const capacity::MigProfile& p : model->mig_profiles) {
        if (p.nvml_gi_profile_id == static_cast<int>(instance.profile_id)) profile = p.name;
      }
      mapped.mig_instances.push_back(profile + "@" + std::to_string(instance.start));
    }
    out.node.gpus.push_back({.index = static_cast<int64_t>(out.node.gpus.size()),
                             .model = model->name,
                             .memory_mib = gpu.memory_mib,
                             .mig_enabled = mig,
                             .healthy = mapped.verdict.healthy,
                             .cordoned = false});
    out.gpus.push_back(std::move(mapped));
  }
  for (const auto& group : host.nvlink_groups) {
    out.node.nvlink_groups.emplace_back(group.begin(), group.end());
  }
  return out;
}

FleetRecord FleetRecordForNode(const FleetNodeRecord& node) {
  FleetRecord r;
  r.spec = std::string(kDiscoveredSpecPrefix) + node.name;
  r.sites.push_back({.name = std::string(capacity::kSimulatedSite),
                     .region = std::string(capacity::kSimulatedRegion),
                     .power_budget_watts = 0});
  r.racks.push_back({.name = std::string(kDiscoveredRack),
                     .site = std::string(capacity::kSimulatedSite),
                     .power_budget_watts = 0});
  r.pools.push_back(
      {.name = std::string(capacity::kSimulatedPool),
       .region = std::string(capacity::kSimulatedRegion),
       .site = std::string(capacity::kSimulatedSite),
       .labels = {std::string(capacity::kLabelBatch), std::string(capacity::kLabelInteractive)},
       .dedicated_tenant = "",
       .allowed_tenants = {}});
  r.nodes.push_back(node);
  return r;
}

}  // namespace atrium::nvml
