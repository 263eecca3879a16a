#include "capacity/fleet_spec.h"

#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/strings.h"

namespace atrium::capacity {
namespace {

// Per 8-GPU server; see the table in fleet_spec.h.
struct ShapeRow {
  std::string_view model;
  int vcpus_per_8_gpus;
  int memory_gib_per_8_gpus;
  int idle_watts_per_gpu;
};

constexpr ShapeRow kShapes[] = {
    {"H100-80GB", 224, 2048, 300}, {"H200-141GB", 224, 2048, 300}, {"A100-80GB", 256, 2048, 200},
    {"A100-40GB", 256, 1024, 200}, {"V100-16GB", 80, 512, 125},    {"V100-32GB", 80, 512, 125},
    {"L40S", 192, 1536, 110},      {"L4", 192, 768, 60},           {"A10", 192, 768, 90},
    {"T4", 96, 384, 55},
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsTimes(char c) { return c == 'x' || c == 'X'; }

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

struct SpecItem {
  const GpuModel* model = nullptr;
  int count = 0;
  int gpus = 0;
};

// Digits longer than this are "too large" whatever they say, which also
// keeps the conversion below from overflowing.
constexpr size_t kMaxDigits = 6;

int ToInt(std::string_view digits) {
  if (digits.size() > kMaxDigits) return INT32_MAX;
  int v = 0;
  for (char c : digits) v = v * 10 + (c - '0');
  return v;
}

Result<SpecItem> ParseItem(std::string_view item) {
  const std::string quoted = "fleet spec item '" + std::string(item) + "'";
  // COUNT x MODEL x GPUS, split at the digit runs on either end so a model
  // name may itself contain an 'x'.
  size_t count_end = 0;
  while (count_end < item.size() && IsDigit(item[count_end])) ++count_end;
  size_t gpus_begin = item.size();
  while (gpus_begin > count_end && IsDigit(item[gpus_begin - 1])) --gpus_begin;
  if (count_end == 0 || gpus_begin == item.size() || count_end + 2 >= gpus_begin ||
      !IsTimes(item[count_end]) || !IsTimes(item[gpus_begin - 1])) {
    return Error::InvalidArgument(quoted +
                                  " is malformed; expected COUNTxMODELxGPUS, e.g. 2xH100-80GBx8");
  }
  const std::string_view model_name = item.substr(count_end + 1, gpus_begin - count_end - 2);
  SpecItem parsed;
  parsed.count = ToInt(item.substr(0, count_end));
  parsed.gpus = ToInt(item.substr(gpus_begin));
  parsed.model = FindGpuModel(model_name);
  if (!parsed.model) {
    return Error::InvalidArgument(quoted + ": unknown GPU model '" + std::string(model_name) +
                                  "' (known: " + KnownGpuModelNames() + ")");
  }
  if (parsed.count < 1) return Error::InvalidArgument(quoted + ": node count must be at least 1");
  if (parsed.count > kMaxNodesPerFleetSpecItem) {
    return Error::InvalidArgument(quoted + ": at most " +
                                  std::to_string(kMaxNodesPerFleetSpecItem) + " nodes per item");
  }
  if (parsed.gpus < 1) {
    return Error::InvalidArgument(quoted + ": GPUs per node must be at least 1");
  }
  if (parsed.gpus > kMaxGpusPerNode) {
    return Error::InvalidArgument(quoted + ": at most " + std::to_string(kMaxGpusPerNode) +
                                  " GPUs per node");
  }
  return parsed;
}

Node MakeNode(const GpuModel& model, int gpus, const SimulatedNodeShape& shape, std::string name,
              std::string rack) {
  Node node;
  node.name = std::move(name);
  node.pool = std::string(kSimulatedPool);
  node.rack = std::move(rack);
  node.cpu_milli = shape.cpu_milli;
  node.memory_mib = shape.memory_mib;
  node.idle_power_watts = shape.idle_power_watts;
  node.gpu_model = model.name;
  node.driver_version = std::string(kSimulatedDriverVersion);
  node.cuda_version = std::string(kSimulatedCudaVersion);
  for (int i = 0; i < gpus; ++i) {
    node.gpus.push_back(Gpu{.index = i, .model = model.name, .memory_mib = model.memory_mib});
  }
  if (model.interconnect == Interconnect::kNvlink && gpus >= 2) {
    std::vector<int> all(gpus);
    std::iota(all.begin(), all.end(), 0);
    node.nvlink_groups.push_back(std::move(all));
  }
  return node;
}

}  // namespace

std::optional<SimulatedNodeShape> SimulatedShapeFor(const GpuModel& model, int gpus) {
  for (const ShapeRow& row : kShapes) {
    if (row.model != model.name) continue;
    return SimulatedNodeShape{
        .cpu_milli = int64_t{row.vcpus_per_8_gpus} * 1000 * gpus / 8,
        .memory_mib = int64_t{row.memory_gib_per_8_gpus} * 1024 * gpus / 8,
        .idle_power_watts = int64_t{row.idle_watts_per_gpu} * gpus,
    };
  }
  return std::nullopt;
}

Result<Fleet> ParseFleetSpec(std::string_view spec) {
  if (spec.size() > kMaxFleetSpecLength) {
    return Error::InvalidArgument("fleet spec is longer than " +
                                  std::to_string(kMaxFleetSpecLength) + " characters");
  }
  if (Trim(spec).empty()) {
    return Error::InvalidArgument("fleet spec is empty; expected items like " +
                                  std::string(kDefaultDevFleetSpec));
  }
  const std::vector<std::string_view> raw_items = SplitString(spec, ',');
  if (raw_items.size() > static_cast<size_t>(kMaxFleetSpecItems)) {
    return Error::InvalidArgument("fleet spec has " + std::to_string(raw_items.size()) +
                                  " items; at most " + std::to_string(kMaxFleetSpecItems));
  }
  std::vector<SpecItem> items;
  int64_t total_nodes = 0;
  for (size_t i = 0; i < raw_items.size(); ++i) {
    const std::string_view item = Trim(raw_items[i]);
    if (item.empty()) {
      return Error::InvalidArgument("fleet spec item " + std::to_string(i + 1) + " is empty");
    }
    ATRIUM_ASSIGN_OR_RETURN(SpecItem parsed, ParseItem(item));
    total_nodes += parsed.count;
    items.push_back(parsed);
  }
  if (total_nodes > kMaxFleetSpecNodes) {
    return Error::InvalidArgument("fleet spec asks for " + std::to_string(total_nodes) +
                                  " nodes; at most " + std::to_string(kMaxFleetSpecNodes));
  }

  Fleet fleet;
  ATRIUM_RETURN_IF_ERROR(fleet.AddSite(
      Site{.name = std::string(kSimulatedSite), .region = std::string(kSimulatedRegion)}));
  ATRIUM_RETURN_IF_ERROR(fleet.AddPool(NodePool{
      .name = std::string(kSimulatedPool),
      .region = std::string(kSimulatedRegion),
      .site = std::string(kSimulatedSite),
      .labels = {std::string(kLabelInteractive), std::string(kLabelBatch)},
  }));
  std::unordered_map<const GpuModel*, int> next_ordinal;
  int64_t node_number = 0;
  for (const SpecItem& item : items) {
    const std::optional<SimulatedNodeShape> shape = SimulatedShapeFor(*item.model, item.gpus);
    if (!shape) return Error::Internal("no simulated node shape for " + item.model->name);
    const std::string prefix = Lower(item.model->name) + "-";
    for (int n = 0; n < item.count; ++n, ++node_number) {
      std::string rack = "rack-" + std::to_string(node_number / kSimulatedNodesPerRack);
      if (node_number % kSimulatedNodesPerRack == 0) {
        ATRIUM_RETURN_IF_ERROR(
            fleet.AddRack(Rack{.name = rack, .site = std::string(kSimulatedSite)}));
      }
      std::string name = prefix + std::to_string(next_ordinal[item.model]++);
      ATRIUM_RETURN_IF_ERROR(fleet.AddNode(
          MakeNode(*item.model, item.gpus, *shape, std::move(name), std::move(rack))));
    }
  }
  if (auto valid = ValidateFleet(fleet); !valid) {
    return Error::Internal("simulated fleet is invalid: " + valid.error().message);
  }
  return fleet;
}

}  // namespace atrium::capacity
