#include "sim/experiment.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <thread>

#include "scheduler/policies.h"

namespace atrium::sim {

Result<ExperimentResult> RunExperiment(const Trace& trace, const ExperimentOptions& options) {
  for (const auto& name : options.policies) {
    auto policy = sched::MakePolicy(name, sched::PolicyContext{});
    if (!policy.has_value()) return MakeUnexpected(policy.error());
  }
  if (options.seeds < 1) return MakeUnexpected(Error::InvalidArgument("seeds must be at least 1"));

  struct Job {
    size_t policy;
    uint64_t seed;
    std::optional<RunResult> result;
    std::optional<Error> error;
  };
  std::vector<Job> jobs;
  for (size_t p = 0; p < options.policies.size(); ++p) {
    for (int s = 0; s < options.seeds; ++s) {
      jobs.push_back(Job{p, options.first_seed + static_cast<uint64_t>(s), {}, {}});
    }
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j = next++; j < jobs.size(); j = next++) {
      auto run = SimulateRun(
          trace, RunOptions{options.policies[jobs[j].policy], jobs[j].seed, options.tune_ratio});
      if (run.has_value()) {
        jobs[j].result = std::move(*run);
      } else {
        jobs[j].error = run.error();
      }
    }
  };
  unsigned threads = options.jobs > 0 ? static_cast<unsigned>(options.jobs)
                                      : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(jobs.size()));
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();

  std::vector<PolicySummary> out;
  for (size_t p = 0; p < options.policies.size(); ++p) {
    PolicySummary summary;
    summary.policy = options.policies[p];
    std::array<double, kReportedColumns.size()> sum{};
    std::array<int, kReportedColumns.size()> count{};
    double failed = 0;
    for (const auto& job : jobs) {
      if (job.policy != p) continue;
      if (job.error) return MakeUnexpected(*job.error);
      ++summary.runs;
      failed += static_cast<double>(job.result->failed_pods);
      for (size_t c = 0; c < kReportedColumns.size(); ++c) {
        const auto& cell = job.result->alloc_pct[static_cast<size_t>(kReportedColumns[c])];
        if (cell) {
          sum[c] += *cell;
          ++count[c];
        }
      }
    }
    for (size_t c = 0; c < kReportedColumns.size(); ++c) {
      if (count[c] > 0) summary.alloc_pct[c] = sum[c] / count[c];
    }
    summary.failed_pods = summary.runs > 0 ? failed / summary.runs : 0;
    out.push_back(std::move(summary));
  }
  double bound = 0;
  for (int s = 0; s < options.seeds; ++s) {
    bound += OfflineSharePackingWastePct(trace, options.tune_ratio,
                                         options.first_seed + static_cast<uint64_t>(s));
  }
  return ExperimentResult{std::move(out), bound / options.seeds};
}

std::string FormatTable(const ExperimentResult& result) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-16s %8s %8s %8s %8s %8s %12s %12s\n", "policy", "@80%",
                "@90%", "@100%", "@110%", "@130%", "unalloc@100", "failed pods");
  out += line;
  auto cell = [](const std::optional<double>& v) {
    char buf[32];
    if (v) {
      std::snprintf(buf, sizeof buf, "%.2f", *v);
    } else {
      std::snprintf(buf, sizeof buf, "-");
    }
    return std::string(buf);
  };
  for (const auto& s : result.policies) {
    std::snprintf(line, sizeof line, "%-16s %8s %8s %8s %8s %8s %12s %12.1f\n", s.policy.c_str(),
                  cell(s.alloc_pct[0]).c_str(), cell(s.alloc_pct[1]).c_str(),
                  cell(s.alloc_pct[2]).c_str(), cell(s.alloc_pct[3]).c_str(),
                  cell(s.alloc_pct[4]).c_str(), cell(s.UnallocatedAt100()).c_str(), s.failed_pods);
    out += line;
  }
  std::snprintf(line, sizeof line,
                "offline reference: packing the shares that arrive by 100 %% best-fit decreasing, "
                "knowing them all in advance, still leaves %.2f %% of GPUs unallocated\n",
                result.share_packing_bound_pct);
  out += line;
  return out;
}

nlohmann::json ToJson(const ExperimentResult& result, const ExperimentOptions& options) {
  nlohmann::json policies = nlohmann::json::array();
  auto value = [](const std::optional<double>& v) {
    return v ? nlohmann::json(std::round(*v * 1000) / 1000) : nlohmann::json(nullptr);
  };
  for (const auto& s : result.policies) {
    nlohmann::json alloc = nlohmann::json::object();
    for (size_t c = 0; c < kReportedColumns.size(); ++c) {
      alloc[std::to_string(kReportedColumns[c])] = value(s.alloc_pct[c]);
    }
    policies.push_back({{"policy", s.policy},
                        {"alloc_pct", alloc},
                        {"unalloc_pct_at_100", value(s.UnallocatedAt100())},
                        {"failed_pods_mean", s.failed_pods},
                        {"runs", s.runs}});
  }
  return {
      {"seeds", options.seeds},
      {"first_seed", options.first_seed},
      {"tune_ratio", options.tune_ratio},
      {"offline_share_packing_bound_pct", std::round(result.share_packing_bound_pct * 1000) / 1000},
      {"policies", policies}};
}

}  // namespace atrium::sim
