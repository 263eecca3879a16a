// The Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb") as the
// trace simulator reads it: node and pod CSV files, converted the way the
// FGD paper's simulator converts them (METHOD.md §1.1–1.2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "scheduler/frag.h"
#include "scheduler/node_state.h"

namespace atrium::sim {

struct TraceNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t gpus = 0;
  std::string model;
};

struct TracePod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t milli = 0;  // per GPU, clamped to 1000; 0 when num_gpu is 0
  std::string types;  // allowed models joined by '|', empty parts removed; "" = any
};

// A loaded trace with its GPU model table (models sorted by name; a node's
// model is its index, a pod's allowed models a mask over it).
struct Trace {
  std::vector<TraceNode> nodes;  // sorted by name
  std::vector<TracePod> pods;    // sorted by name
  std::vector<std::string> models;

  int64_t GpuCapacityMilli() const;
  int32_t ModelIndex(std::string_view model) const;  // -1 if absent
  // The pod's model mask: 0 for any; otherwise the allowed models' bits plus
  // bit 63, so that a list naming no present model admits no node.
  uint64_t MaskOf(const TracePod& pod) const;
  sched::NodeState StateOf(const TraceNode& node) const;
  sched::Request RequestOf(const TracePod& pod) const;
  // Every pod as a workload sample, and the FGD target workload built from
  // them (before any tuning).
  std::vector<sched::WorkloadSample> WorkloadSamples() const;
  std::vector<sched::TypicalPod> TypicalPods() const;
};

// Parses CSV text with a header row naming the columns (order free; extra
// columns ignored). Errors name the line and the column.
Result<std::vector<TraceNode>> ParseNodeCsv(std::string_view text);
Result<std::vector<TracePod>> ParsePodCsv(std::string_view text);

// Reads both files and builds the trace.
Result<Trace> LoadTrace(const std::string& nodes_path, const std::string& pods_path);
Result<Trace> MakeTrace(std::vector<TraceNode> nodes, std::vector<TracePod> pods);

}  // namespace atrium::sim
