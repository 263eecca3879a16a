// Placement decision speed (BENCHMARKS.md §4). A plain executable printing a
// table: every figure is the median of --repetitions runs, and best-fit — the
// cheapest baseline policy — is measured in the same run as the reference.
//
// 1. The Alibaba openb cluster (1,213 nodes, 6,212 GPUs): the default trace's
//    arrivals for seed 42, replayed until 130 % of capacity has arrived
//    (~10,900 decisions, placements and rejections), one thread.
// 2. A synthetic 100,000-GPU fleet (12,500 nodes × 8 GPUs): requests drawn
//    from the openb pod mix until 90 % of the GPUs are allocated; per-decision
//    latency percentiles.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "scheduler/engine.h"
#include "scheduler/policies.h"
#include "sim/sim_command.h"
#include "sim/simulator.h"

namespace {

using atrium::sched::Engine;
using atrium::sched::NodeState;
using atrium::sched::Request;
using Clock = std::chrono::steady_clock;

struct Sample {
  double decisions_per_s = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  int64_t decisions = 0;
};

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

Sample Replay(std::vector<NodeState> nodes, std::vector<int32_t> rank,
              const std::vector<Request>& requests, const std::string& policy_name,
              const std::vector<atrium::sched::TypicalPod>& workload, int64_t stop_at_used) {
  atrium::sched::PolicyContext context;
  context.workload = workload;
  context.node_count = static_cast<int32_t>(nodes.size());
  auto policy = atrium::sched::MakePolicy(policy_name, context);
  Engine engine(std::move(nodes), std::move(rank), **policy, 1);
  std::vector<double> latencies;
  latencies.reserve(requests.size());
  int64_t used = 0;
  const auto start = Clock::now();
  for (const auto& r : requests) {
    const auto t0 = Clock::now();
    auto d = engine.Decide(r);
    if (d) engine.Commit(*d, r);
    latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (d) used += r.TotalMilli();
    if (stop_at_used > 0 && used >= stop_at_used) break;
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  Sample s;
  s.decisions = static_cast<int64_t>(latencies.size());
  s.decisions_per_s = static_cast<double>(s.decisions) / total_s;
  s.p50_us = Percentile(latencies, 0.50);
  s.p99_us = Percentile(latencies, 0.99);
  s.max_us = *std::max_element(latencies.begin(), latencies.end());
  return s;
}

Sample Median(std::vector<Sample> runs) {
  auto med = [&](auto field) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(field(r));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Sample s;
  s.decisions = runs[0].decisions;
  s.decisions_per_s = med([](const Sample& r) { return r.decisions_per_s; });
  s.p50_us = med([](const Sample& r) { return r.p50_us; });
  s.p99_us = med([](const Sample& r) { return r.p99_us; });
  s.max_us = med([](const Sample& r) { return r.max_us; });
  return s;
}

void Print(const char* fleet, const std::string& policy, const Sample& s, const Sample& base) {
  std::printf("%-22s %-10s %9lld %12.0f %8.2fx %9.1f %9.1f %9.1f\n", fleet, policy.c_str(),
              static_cast<long long>(s.decisions), s.decisions_per_s,
              s.decisions_per_s / base.decisions_per_s, s.p50_us, s.p99_us, s.max_us);
}

}  // namespace

int main(int argc, char** argv) {
  int repetitions = 5;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--repetitions") repetitions = std::max(1, std::atoi(argv[i + 1]));
  }
  auto trace = atrium::sim::LoadTrace(atrium::sim::BundledTracePath("openb_node_list_gpu_node.csv"),
                                      atrium::sim::BundledTracePath("openb_pod_list_default.csv"));
  if (!trace.has_value()) {
    std::fprintf(stderr, "%s\n", trace.error().message.c_str());
    return 1;
  }
  const auto workload = trace->TypicalPods();
  const std::vector<std::string> policies = {"best-fit", "fgd", "atrium"};
  std::printf("%-22s %-10s %9s %12s %9s %9s %9s %9s\n", "fleet", "policy", "decisions",
              "decisions/s", "vs base", "p50 us", "p99 us", "max us");

  // 1. The openb cluster.
  std::vector<int32_t> rank;
  const auto pods = atrium::sim::ArrivalSequence(*trace, 1.3, 42, &rank);
  std::vector<Request> requests;
  for (const auto& p : pods) requests.push_back(trace->RequestOf(p));
  std::vector<NodeState> nodes;
  for (const auto& n : trace->nodes) nodes.push_back(trace->StateOf(n));
  Sample base;
  for (const auto& name : policies) {
    std::vector<Sample> runs;
    for (int r = 0; r < repetitions; ++r) {
      runs.push_back(Replay(nodes, rank, requests, name, workload, 0));
    }
    const Sample s = Median(runs);
    if (name == policies[0]) base = s;
    Print("openb 1213n/6212 GPUs", name, s, base);
  }

  // 2. 12,500 nodes × 8 GPUs (an H100-class node shape), the openb pod mix
  //    without model constraints, until 90 % of the GPUs are allocated.
  const int kNodes = 12500;
  NodeState big;
  big.cpu_left = 224000;
  big.mem_left = 2 << 20;
  big.model = 0;
  big.gpu_count = 8;
  for (int g = 0; g < 8; ++g) big.gpu_free[static_cast<size_t>(g)] = 1000;
  std::vector<NodeState> fleet(kNodes, big);
  std::vector<int32_t> big_rank(kNodes);
  for (int i = 0; i < kNodes; ++i) big_rank[static_cast<size_t>(i)] = (i * 7919) % kNodes;
  atrium::sched::Rng rng(7);
  std::vector<Request> stream;
  int64_t offered = 0;
  while (offered < int64_t{kNodes} * 8000) {
    auto r = trace->RequestOf(trace->pods[rng.Below(trace->pods.size())]);
    r.model_mask = 0;
    offered += r.TotalMilli();
    stream.push_back(r);
  }
  const int64_t stop = int64_t{kNodes} * 8000 * 9 / 10;
  for (const auto& name : policies) {
    std::vector<Sample> runs;
    for (int r = 0; r < repetitions; ++r) {
      runs.push_back(Replay(fleet, big_rank, stream, name, workload, stop));
    }
    const Sample s = Median(runs);
    if (name == policies[0]) base = s;
    Print("synthetic 100,000 GPUs", name, s, base);
  }
  return 0;
}
