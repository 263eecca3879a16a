#include "runtime/fleet_discovery.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <climits>

namespace atrium {
namespace {

// The host's name, CPUs and memory.
Result<nvml::NodeShape> ThisHost(const Config& config) {
  nvml::NodeShape shape;
  shape.name = config.fleet_node_name;
  if (shape.name.empty()) {
    char name[HOST_NAME_MAX + 1] = {};
    if (::gethostname(name, sizeof name - 1) != 0) {
      return Error::Unavailable("cannot read this host's name; set [fleet] node_name");
    }
    shape.name = name;
    if (auto valid = ValidateNodeName(shape.name); !valid) {
      return Error::InvalidArgument("this host's name cannot name its node (" +
                                    valid.error().message + "); set [fleet] node_name");
    }
  }
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGE_SIZE);
  if (cpus <= 0 || pages <= 0 || page_size <= 0) {
    return Error::Unavailable("cannot read this host's CPUs and memory");
  }
  shape.cpu_milli = int64_t{cpus} * 1000;
  shape.memory_mib = static_cast<int64_t>(pages) * page_size / (1024 * 1024);
  return shape;
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

Result<FleetDiscovery> Simulated(FleetDiscovery d, std::string why) {
  d.fleet.reset();
  d.library.reset();
  d.summary = "fleet: simulated (" + why + ")";
  spdlog::info("{}", d.summary);
  return d;
}

}  // namespace

Result<FleetDiscovery> DiscoverFleet(const Config& config) {
  FleetDiscovery d;
  const bool required = config.fleet_discover == "nvml";
  if (config.fleet_discover == "off") return Simulated(std::move(d), "[fleet] discover = off");
  if (!required && !config.scheduler_fleet.empty()) {
    return Simulated(std::move(d), "[scheduler] fleet names one");
  }
  // Under "nvml" every reason not to use the host fails the start; under
  // "auto" it is said once and the simulated fleet is used.
  auto give_up = [&](FleetDiscovery d, const std::string& why) -> Result<FleetDiscovery> {
    if (required) {
      return Error::FailedPrecondition("[fleet] discover = \"nvml\", but " + why);
    }
    spdlog::warn("fleet: this host's GPUs are not used: {}", why);
    return Simulated(std::move(d), why);
  };

  auto library = nvml::NvmlLibrary::Open(config.fleet_nvml_library);
  if (!library) return give_up(std::move(d), "NVML is not available: " + library.error().message);
  auto host = (*library)->Discover();
  if (!host) return give_up(std::move(d), "NVML discovery failed: " + host.error().message);
  d.host = *host;
  if (host->gpus.empty()) return give_up(std::move(d), "NVML reports no GPU");
  ATRIUM_ASSIGN_OR_RETURN(nvml::NodeShape shape, ThisHost(config));
  auto mapped = nvml::MapHostToNode(*host, shape);
  if (!mapped) return give_up(std::move(d), mapped.error().message);

  d.fleet = nvml::FleetRecordForNode(mapped->node);
  d.gpus = mapped->gpus;
  d.library = std::move(*library);
  d.summary = "fleet: this host's GPUs through NVML: node " + shape.name + ", " +
              std::to_string(host->gpus.size()) + " x " + mapped->node.gpu_model + ", driver " +
              host->driver_version + ", CUDA " +
              (host->cuda_driver_version.empty() ? "unknown" : host->cuda_driver_version);
  spdlog::info("{}", d.summary);
  for (const nvml::MappedGpu& gpu : d.gpus) {
    if (!gpu.verdict.healthy) {
      spdlog::warn("fleet: GPU {} ({}) is unhealthy: {}", gpu.index, gpu.uuid,
                   Joined(gpu.verdict.reasons));
    }
    if (!gpu.mig_instances.empty()) {
      spdlog::info("fleet: GPU {} holds MIG instances made outside Atrium: {}", gpu.index,
                   Joined(gpu.mig_instances));
    }
  }
  if (!host->missing_symbols.empty()) {
    spdlog::info("fleet: this NVML lacks {}; what they give is not watched",
                 Joined(host->missing_symbols));
  }
  return d;
}

}  // namespace atrium
