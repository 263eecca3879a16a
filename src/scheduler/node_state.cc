#include "scheduler/node_state.h"

#include <algorithm>
#include <numeric>

namespace atrium::sched {

bool Fits(const NodeState& node, const Request& request) {
  if (request.cpu > node.cpu_left || request.mem > node.mem_left) return false;
  if (!request.NeedsGpu()) return true;
  if (node.gpu_count == 0 || !request.AllowsModel(node.model)) return false;
  int fitting = 0;
  for (int i = 0; i < node.gpu_count; ++i) fitting += node.gpu_free[i] >= request.milli;
  return fitting >= request.num_gpu;
}

GpuPick TightestGpus(const NodeState& node, const Request& request) {
  std::array<int8_t, kMaxGpusPerNode> order{};
  std::iota(order.begin(), order.begin() + node.gpu_count, 0);
  std::stable_sort(order.begin(), order.begin() + node.gpu_count,
                   [&](int8_t a, int8_t b) { return node.gpu_free[a] < node.gpu_free[b]; });
  GpuPick pick;
  for (int k = 0; k < node.gpu_count && pick.count < request.num_gpu; ++k) {
    if (node.gpu_free[order[k]] >= request.milli) pick.Add(order[k]);
  }
  return pick;
}

GpuPick FirstFreeGpus(const NodeState& node, const Request& request) {
  GpuPick pick;
  for (int i = 0; i < node.gpu_count && pick.count < request.num_gpu; ++i) {
    if (node.gpu_free[i] == kMilliPerGpu) pick.Add(i);
  }
  return pick;
}

GpuPick BestFitGpu(const NodeState& node, const Request& request) {
  int best = -1;
  for (int i = 0; i < node.gpu_count; ++i) {
    if (node.gpu_free[i] < request.milli) continue;
    if (best < 0 || node.gpu_free[i] < node.gpu_free[best]) best = i;
  }
  GpuPick pick;
  if (best >= 0) pick.Add(best);
  return pick;
}

NodeState Subtract(NodeState node, const Request& request, const GpuPick& pick) {
  node.cpu_left -= request.cpu;
  node.mem_left -= request.mem;
  for (int k = 0; k < pick.count; ++k) node.gpu_free[pick.index[k]] -= request.milli;
  return node;
}

}  // namespace atrium::sched
