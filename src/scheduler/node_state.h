// What placement sees of a node and of a request. These are the snapshot
// types every policy scores: the trace simulator builds them from CSV rows,
// the scheduler from its inventory. Values only; no I/O.
#pragma once

#include <array>
#include <cstdint>

namespace atrium::sched {

inline constexpr int32_t kMilliPerGpu = 1000;
inline constexpr int kMaxGpusPerNode = 16;

// Free capacity of one node. GPUs are in device-index order; gpu_free[i] is the
// unallocated share of GPU i in milli-GPU (1000 = fully free).
struct NodeState {
  int64_t cpu_left = 0;  // milli-CPU
  int64_t mem_left = 0;  // MiB
  int32_t model = -1;    // index into the snapshot's GPU model table; -1 = no GPUs
  int32_t gpu_count = 0;
  std::array<int32_t, kMaxGpusPerNode> gpu_free{};

  int64_t FreeMilli() const {
    int64_t sum = 0;
    for (int i = 0; i < gpu_count; ++i) sum += gpu_free[i];
    return sum;
  }
  int FullyFreeGpus() const {
    int n = 0;
    for (int i = 0; i < gpu_count; ++i) n += gpu_free[i] == kMilliPerGpu;
    return n;
  }
  bool operator==(const NodeState&) const = default;
};

// One placement request. milli is per GPU: a whole-GPU request has
// milli = 1000 and num_gpu ≥ 1; a share has num_gpu = 1 and milli < 1000;
// a CPU-only request has num_gpu = milli = 0.
struct Request {
  int64_t cpu = 0;  // milli-CPU
  int64_t mem = 0;  // MiB
  int32_t num_gpu = 0;
  int32_t milli = 0;
  uint64_t model_mask = 0;  // bit m allows model m; 0 allows every model

  int64_t TotalMilli() const { return static_cast<int64_t>(num_gpu) * milli; }
  bool NeedsGpu() const { return num_gpu > 0 && milli > 0; }
  bool IsShare() const { return num_gpu == 1 && milli > 0 && milli < kMilliPerGpu; }
  bool AllowsModel(int32_t model) const {
    return model_mask == 0 || (model >= 0 && model < 64 && ((model_mask >> model) & 1) != 0);
  }
  bool operator==(const Request&) const = default;
};

// The GPUs a request takes on a node, by device index.
struct GpuPick {
  int32_t count = 0;
  std::array<int8_t, kMaxGpusPerNode> index{};

  void Add(int i) { index[count++] = static_cast<int8_t>(i); }
};

// The filter: CPU, memory, GPU model and per-GPU fit (a share needs one GPU
// with enough free milli; n whole GPUs need n fully free GPUs).
bool Fits(const NodeState& node, const Request& request);

// The GPUs a request takes under the "ascending free" walk: GPUs sorted by
// free milli ascending (stable by index), taking each with free ≥ milli until
// num_gpu are taken. For whole GPUs this is the first fully free ones by
// index. Callers must have checked Fits().
GpuPick TightestGpus(const NodeState& node, const Request& request);

// The fully free GPUs a whole-GPU request takes: the first num_gpu by index.
GpuPick FirstFreeGpus(const NodeState& node, const Request& request);

// The GPU with the least free milli that still fits a share (lowest index on
// equal free); fully free GPUs are candidates too.
GpuPick BestFitGpu(const NodeState& node, const Request& request);

// The node after the request is placed on pick (CPU, memory and GPU milli
// subtracted). Does not check feasibility.
NodeState Subtract(NodeState node, const Request& request, const GpuPick& pick);

}  // namespace atrium::sched
