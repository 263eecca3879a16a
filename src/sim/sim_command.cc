#include "sim/sim_command.h"

#include <filesystem>

#include "common/strings.h"
#include "scheduler/policies.h"
#include "sim/experiment.h"

namespace atrium::sim {

std::string BundledTracePath(const std::string& file) {
  const std::filesystem::path local = std::filesystem::path("data/alibaba-gpu-v2023") / file;
  if (std::filesystem::exists(local)) return local.string();
  return (std::filesystem::path(ATRIUM_DATA_DIR) / "alibaba-gpu-v2023" / file).string();
}

int RunSimCommand(const SimCommandOptions& options, std::ostream& out, std::ostream& err) {
  ExperimentOptions experiment;
  if (options.policies.empty()) {
    experiment.policies = sched::PolicyNames();
  } else {
    for (auto name : SplitString(options.policies, ',')) {
      if (!name.empty()) experiment.policies.emplace_back(name);
    }
  }
  if (experiment.policies.empty()) {
    err << "atrium sim: --policies names no policy\n";
    return 2;
  }
  if (options.seeds < 1 || options.seeds > 1000) {
    err << "atrium sim: --seeds must be between 1 and 1000\n";
    return 2;
  }
  if (!(options.tune_ratio > 0 && options.tune_ratio <= 10)) {
    err << "atrium sim: --tune must be in (0, 10]\n";
    return 2;
  }
  experiment.seeds = options.seeds;
  experiment.first_seed = options.first_seed;
  experiment.tune_ratio = options.tune_ratio;
  experiment.jobs = options.jobs;

  const std::string nodes =
      options.nodes.empty() ? BundledTracePath("openb_node_list_gpu_node.csv") : options.nodes;
  const std::string pods =
      options.pods.empty() ? BundledTracePath("openb_pod_list_default.csv") : options.pods;
  auto trace = LoadTrace(nodes, pods);
  if (!trace.has_value()) {
    err << "atrium sim: " << trace.error().message << "\n";
    return 2;
  }
  auto summaries = RunExperiment(*trace, experiment);
  if (!summaries.has_value()) {
    err << "atrium sim: " << summaries.error().message << "\n";
    return summaries.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
  }
  if (options.json) {
    auto doc = ToJson(*summaries, experiment);
    doc["nodes"] = nodes;
    doc["pods"] = pods;
    out << doc.dump(2) << "\n";
  } else {
    out << "trace: " << pods << " on " << nodes << " (" << trace->nodes.size() << " nodes, "
        << trace->GpuCapacityMilli() / 1000 << " GPUs)\n"
        << "GPU allocation ratio (% of GPUs) at arrived workload (% of GPU capacity), mean of "
        << experiment.seeds << " seeds\n"
        << FormatTable(*summaries);
  }
  return 0;
}

}  // namespace atrium::sim
