// What one tenant's unplaceable backlog costs everyone's scheduling
// (BENCHMARKS.md §5.1). Google Benchmark; the baseline is the same call on
// the same cluster with an empty queue, and the tables give the ratio of
// medians.
//
// The cluster: 16 nodes × 8 H100s, each node holding one 7-GPU allocation
// of tenant "filler", so one GPU is free per node. Tenant "flood" holds
// 10,000 pending 2-GPU preemptible requests, which fit no node (issue 15,
// item 11: 3,000 such submissions slowed each call from 1.5 to 10.7 ms, a
// pass searching a placement for every pending request under the one
// scheduler lock all tenants share).
//
//  - BM_Pass/0 vs BM_Pass/1000 and /10000: one scheduling pass (AdvanceTime,
//    what the timer runs every tick and every mutating call runs).
//  - BM_PassDistinctShapes/10000: the same backlog with every request of its
//    own shape, so every pass searches a placement for each, as all passes
//    did before the shape memo.
//  - BM_SubmitAndCancel/0 vs /10000: another tenant submits a 1-GPU request
//    (placed at once) and releases it — the two passes every tenant's call
//    pays for, now next to the flood's backlog.
#include <benchmark/benchmark.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "capacity/fleet_spec.h"
#include "capacity/gpu_catalog.h"
#include "scheduler/quota.h"
#include "scheduler/scheduler.h"

namespace atrium::sched {
namespace {

constexpr int kNodes = 16;

template <typename T>
T Must(Result<T> r) {
  if (!r.has_value()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

TenantPolicy Tenant(const std::string& id, int64_t guarantee, int64_t limit) {
  TenantPolicy t;
  t.id = id;
  t.quotas[{"H100-80GB", AllocationKind::kGpu}] = {guarantee, limit};
  return t;
}

AllocationRequest Request(const std::string& id, const std::string& tenant, int gpus,
                          Priority priority) {
  AllocationRequest r;
  r.id = id;
  r.tenant = tenant;
  r.model = "H100-80GB";
  r.gpus = gpus;
  r.priority = priority;
  return r;
}

std::unique_ptr<Scheduler> NewScheduler(int backlog) {
  SchedulerOptions options;
  options.max_pending_per_tenant = backlog + 1;
  options.max_pending_per_project = backlog + 1;
  auto s = Must(Scheduler::Create(
      Must(capacity::ParseFleetSpec(std::to_string(kNodes) + "xH100-80GBx8")), options));
  Must(s->SetTenant(Tenant("filler", kNodes * 7000, kNodes * 7000), 0));
  Must(s->SetTenant(Tenant("flood", 0, 1'000'000'000), 0));
  Must(s->SetTenant(Tenant("other", 8000, 8000), 0));
  return s;
}

// The cluster above with `backlog` pending requests of tenant "flood", all
// of one shape, or (distinct_shapes) each of its own shape — a different
// host-memory ask each, so no search is saved: what every pass cost before.
// The backlog is restored rather than submitted, so building it does not
// run 10,000 passes.
std::unique_ptr<Scheduler> Build(int backlog, bool distinct_shapes, int64_t& now) {
  auto filled = NewScheduler(backlog);
  now = 0;
  for (int i = 0; i < kNodes; ++i) {
    Must(
        filled->Submit(Request("fill-" + std::to_string(i), "filler", 7, Priority::kBatch), ++now));
  }
  std::vector<Allocation> all = filled->Allocations();
  uint64_t seq = all.empty() ? 1 : all.back().seq + 1;
  for (int i = 0; i < backlog; ++i) {
    Allocation a;
    a.request = Request("flood-" + std::to_string(i), "flood", 2, Priority::kPreemptible);
    if (distinct_shapes) a.request.memory_mib = 1 + i;
    a.seq = seq++;
    a.submitted_ms = ++now;
    a.charge_milli = ChargeMilli(a.request, *capacity::FindGpuModel("H100-80GB"));
    all.push_back(std::move(a));
  }
  auto s = NewScheduler(backlog);
  if (auto restored = s->Restore(all); !restored)
    throw std::runtime_error(restored.error().message);
  s->AdvanceTime(++now);  // the first pass searches once per shape
  if (s->PendingCount("flood") != backlog || s->PendingCount("filler") != 0) {
    throw std::runtime_error("the cluster is not as described");
  }
  return s;
}

void BM_Pass(benchmark::State& state) {
  int64_t now = 0;
  auto s = Build(static_cast<int>(state.range(0)), /*distinct_shapes=*/false, now);
  for (auto _ : state) {
    auto records = s->AdvanceTime(++now);
    benchmark::DoNotOptimize(records);
    if (!records.empty()) state.SkipWithError("the pass decided something");
  }
  state.counters["pending"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_Pass)->Arg(0)->Arg(1'000)->Arg(10'000)->Unit(benchmark::kMicrosecond);

void BM_PassDistinctShapes(benchmark::State& state) {
  int64_t now = 0;
  auto s = Build(static_cast<int>(state.range(0)), /*distinct_shapes=*/true, now);
  for (auto _ : state) {
    auto records = s->AdvanceTime(++now);
    benchmark::DoNotOptimize(records);
    if (!records.empty()) state.SkipWithError("the pass decided something");
  }
  state.counters["pending"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_PassDistinctShapes)->Arg(10'000)->Unit(benchmark::kMicrosecond);

void BM_SubmitAndCancel(benchmark::State& state) {
  int64_t now = 0;
  auto s = Build(static_cast<int>(state.range(0)), /*distinct_shapes=*/false, now);
  int64_t n = 0;
  for (auto _ : state) {
    const std::string id = "other-" + std::to_string(n++);
    auto placed = Must(s->Submit(Request(id, "other", 1, Priority::kBatch), ++now));
    auto released = Must(s->Release(id, ++now));
    benchmark::DoNotOptimize(placed);
    benchmark::DoNotOptimize(released);
    if (placed.size() != 2) state.SkipWithError("the 1-GPU request was not placed at once");
  }
  state.counters["pending"] = static_cast<double>(state.range(0));
}
BENCHMARK(BM_SubmitAndCancel)->Arg(0)->Arg(10'000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace atrium::sched

BENCHMARK_MAIN();
