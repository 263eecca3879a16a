// Many simulator runs: policies × seeds, run in parallel, summarized the way
// the published results are (mean over seeds of each arrived-% column).
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "sim/simulator.h"

namespace atrium::sim {

inline constexpr std::array<int, 5> kReportedColumns = {80, 90, 100, 110, 130};

struct ExperimentOptions {
  std::vector<std::string> policies;
  int seeds = 10;
  uint64_t first_seed = 42;  // seeds first_seed .. first_seed + seeds - 1
  double tune_ratio = 1.3;
  int jobs = 0;  // worker threads; 0 = one per hardware thread
};

struct PolicySummary {
  std::string policy;
  // Mean over seeds of the allocation ratio (% of GPUs) at kReportedColumns.
  std::array<std::optional<double>, kReportedColumns.size()> alloc_pct;
  double failed_pods = 0;  // mean per run
  int runs = 0;

  std::optional<double> UnallocatedAt100() const {
    if (!alloc_pct[2]) return std::nullopt;
    return 100 - *alloc_pct[2];
  }
};

struct ExperimentResult {
  std::vector<PolicySummary> policies;
  // Mean over the seeds of OfflineSharePackingWastePct: a reference for how
  // few GPUs (%) a policy can leave unallocated at 100 % arrived.
  double share_packing_bound_pct = 0;
};

// Runs every policy on every seed. Fails on an unknown policy before running.
Result<ExperimentResult> RunExperiment(const Trace& trace, const ExperimentOptions& options);

std::string FormatTable(const ExperimentResult& result);
nlohmann::json ToJson(const ExperimentResult& result, const ExperimentOptions& options);

}  // namespace atrium::sim
